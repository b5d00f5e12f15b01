package xds_test

import (
	"context"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// oneBackend is the map prod/name served by one cluster, worker-1, at host.
func oneBackend(t *testing.T, name, host string) xds.Service {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-1", Endpoint: "https://" + host, Weight: 1}}})
	require.NoError(t, err)
	return xds.Service{Namespace: "prod", Name: name, Service: name, Hostnames: []string{name + ".example.com"}, Result: res}.Sealed()
}

// deltaEnvoy is a real delta ADS client stream subscribed, as a wildcard, to listeners,
// route configurations and clusters. It answers every response as it arrives: a NACK when
// the response carries a resource named in reject, an ACK otherwise; it counts the
// responses that carried each resource.
type deltaEnvoy struct {
	mu      sync.Mutex
	reject  map[string]bool
	carried map[string]int
}

func startDeltaEnvoy(t *testing.T, ads discoveryv3.AggregatedDiscoveryServiceClient) *deltaEnvoy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := ads.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: typ}))
	}
	c := &deltaEnvoy{reject: map[string]bool{}, carried: map[string]int{}}
	responses := xdstest.Stream(stream.Recv)
	go func() { // the only sender from here on
		for r := range responses {
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}
			c.mu.Lock()
			for _, res := range r.GetResources() {
				c.carried[res.GetName()]++
				if c.reject[res.GetName()] {
					req.ErrorDetail = &status.Status{Message: "cluster " + res.GetName() + " rejected by test"}
				}
			}
			c.mu.Unlock()
			if stream.Send(req) != nil {
				return
			}
		}
	}()
	return c
}

func (c *deltaEnvoy) rejects(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reject = map[string]bool{}
	for _, n := range names {
		c.reject[n] = true
	}
}

func (c *deltaEnvoy) sent(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.carried[name]
}

// Delta ACKs and NACKs count per resource: after a delta client NACKed map A's changed
// cluster, its ACK of map B's next change (a response carrying only B's cluster) neither
// clears A's rejection nor confirms A, and A's NACK never makes B rejected. A's rejected
// cluster is not sent again while unchanged; its next content change is, and once ACKed
// it confirms A. A real go-control-plane server and a real delta ADS stream.
func TestDeltaNackIsNotErasedByAnotherMapsAck(t *testing.T) {
	srv, ads := startServer(t)
	h := xds.NewHistory(16)
	set := func(services ...xds.Service) {
		t.Helper()
		res, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, services)
		require.NoError(t, err)
		vs, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, res)
		require.NoError(t, err)
		h.Record(xds.FlavourEnvoy, vs, services, nil) // as the sink records what it serves
	}
	confirm := func(s xds.Service) xds.Confirmation {
		return xds.Confirm(srv.Tracker().Clients(), h, s.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, s), 1)
	}
	clusterA := xds.ClusterName("prod", "a", "worker-1")
	clusterB := xds.ClusterName("prod", "b", "worker-1")

	a1, b1 := oneBackend(t, "a", "a1.example.com"), oneBackend(t, "b", "b1.example.com")
	set(a1, b1)
	envoy := startDeltaEnvoy(t, ads)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, confirm(a1).Done, confirm(a1).Message)
		assert.True(c, confirm(b1).Done, confirm(b1).Message)
	}, 10*time.Second, 10*time.Millisecond)

	// A changes; the client rejects A's new cluster.
	envoy.rejects(clusterA)
	a2 := oneBackend(t, "a", "a2.example.com")
	set(a2, b1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := confirm(a2)
		assert.False(c, got.Done)
		if assert.NotNil(c, got.Nack, got.Message) {
			assert.Equal(c, "cluster "+clusterA+" rejected by test", got.Nack.Message)
		}
	}, 10*time.Second, 10*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) { // once the shared route configuration is ACKed
		got := confirm(b1)
		assert.True(c, got.Done, "A's rejection is not B's: %s", got.Message)
		assert.Nil(c, got.Nack, got.Message)
	}, 10*time.Second, 10*time.Millisecond)

	// B changes; the client ACKs the response, which carries B's cluster alone.
	b2 := oneBackend(t, "b", "b2.example.com")
	set(a2, b2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, confirm(b2).Done, confirm(b2).Message)
	}, 10*time.Second, 10*time.Millisecond)
	got := confirm(a2)
	assert.False(t, got.Done, "the client never took A's cluster: %s", got.Message)
	require.NotNil(t, got.Nack, "A stays rejected: %s", got.Message)
	assert.Equal(t, "cluster "+clusterA+" rejected by test", got.Nack.Message)
	assert.Equal(t, 2, envoy.sent(clusterA), "A's rejected cluster is not sent again while unchanged")
	assert.Equal(t, 2, envoy.sent(clusterB))

	// A changes again: its cluster is sent again, and the ACK of it confirms A.
	envoy.rejects()
	a3 := oneBackend(t, "a", "a3.example.com")
	set(a3, b2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := confirm(a3)
		assert.True(c, got.Done, got.Message)
		assert.Nil(c, got.Nack)
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 3, envoy.sent(clusterA))
	assert.True(t, confirm(b2).Done)
	for _, cl := range srv.Tracker().Clients() {
		assert.Empty(t, cl.Nacked, "no rejection is left once A's cluster is taken")
	}
}
