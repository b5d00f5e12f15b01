package integration

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/trafficmap/publisher/publish"
)

// writes sums what a replica wrote: route and Service writes and Published conditions.
func writes(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != "trafficmap_publisher_route_writes_total" && mf.GetName() != "trafficmap_publisher_published_conditions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// servesXDS checks that a replica answers an ADS request with configuration.
func servesXDS(t *testing.T, r *runningPublisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	stream, err := adsClient(t, r).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "probe", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	assert.Len(t, resp.GetResources(), 2, "the map's two clusters")
}

// Two replicas: only the Lease holder writes, both serve xDS, and when the leader stops the
// other takes over and converges.
func TestLeaderElectionOnlyLeaderWrites(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	replica := func(id string, reg *prometheus.Registry) func(*publish.Config) {
		return func(c *publish.Config) {
			c.Sinks = []string{publish.SinkHTTPRoute, publish.SinkXDS}
			c.XDSAddress, c.RequireXDSAck, c.Registerer = "127.0.0.1:0", false, reg
			c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: "publisher", Identity: id,
				LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
		}
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := startPublisherWith(t, f.publisherConfig(replica("a", regA)), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished() // a holds the Lease: it was alone
	b := startPublisherWith(t, f.publisherConfig(replica("b", regB)), restCfg, zaptest.NewLogger(t).Named("b"))

	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Positive(t, writes(t, regA), "the leader writes")
	assert.Zero(t, writes(t, regB), "the follower writes nothing")
	servesXDS(t, a)
	servesXDS(t, b)

	a.stop(t) // releases the Lease
	f.drain(`{}`)
	f.waitPublishedWith("worker-a=1, worker-b=1")
	assert.Positive(t, writes(t, regB), "the new leader converged the map")
	servesXDS(t, b)
}
