package xds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// crasher is the request of issue 43's D7: an empty nonce, a version, and a type URL whose
// last segment has no dot. Before the fix its ACK reached the metric label code, whose
// path.Ext(typeURL)[1:] panicked and took the process down.
func crasher() *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "evil"}, TypeUrl: "type.googleapis.com/evil", VersionInfo: "v1"}
}

// metricLabels are the values of label across every series of the metric family name.
func metricLabels(t *testing.T, reg *prometheus.Registry, name, label string) []string {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// D7: the crashing request, as the server's callbacks get it, is refused with
// InvalidArgument naming the field and the rule; it leaves no tracker state and no metric
// label; a known type the publisher does not serve is still accepted, under its fixed label.
func TestUnknownTypeURLIsRefusedNotAPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Registerer: reg})
	cb := s.Tracker().Callbacks()
	ctx := context.Background()
	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.AnyType))

	var err error
	require.NotPanics(t, func() { err = cb.OnStreamRequest(1, crasher()) })
	require.Error(t, err)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), `type_url "type.googleapis.com/evil": not a resource type of the xDS API v3`)
	assert.Empty(t, s.Tracker().Clients(), "a refused request identifies no client")
	assert.Equal(t, 1.0, testutil.ToFloat64(refusedCounter(t, reg, "unknown_type")))

	// Other made-up type URLs: none becomes a label or a subscription.
	for i, typ := range []string{"x", "/", "a/b.", "type.googleapis.com/envoy.config.listener.v3.Listener\n", strings.Repeat("z", 1<<16)} {
		id := int64(10 + i)
		require.NoError(t, cb.OnStreamOpen(ctx, id, resource.AnyType))
		err := cb.OnStreamRequest(id, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "evil"}, TypeUrl: typ, VersionInfo: "v1"})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%q: %v", typ, err)
		assert.LessOrEqual(t, len(status.Convert(err).Message()), 512, "the client's type URL is shortened in the status")
		cb.OnStreamClosed(id, nil)
	}

	// A known type the publisher does not serve (EDS) is accepted and counted under its
	// fixed label; the served types under theirs.
	require.NoError(t, cb.OnStreamOpen(ctx, 2, resource.AnyType))
	require.NoError(t, cb.OnStreamRequest(2, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy"}, TypeUrl: resource.EndpointType, VersionInfo: "v1"}))
	require.NoError(t, cb.OnStreamRequest(2, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v1"}))
	assert.ElementsMatch(t, []string{"ClusterLoadAssignment", "Cluster"}, metricLabels(t, reg, "trafficmap_publisher_xds_acks_total", "type"))
	require.Len(t, s.Tracker().Clients(), 1)
	assert.NotContains(t, s.Tracker().Clients()[0].Acked, "type.googleapis.com/evil")
}

// A per-type stream carries its own type only; an ADS delta request must name its type.
func TestStreamTypeIsChecked(t *testing.T) {
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t)})
	cb := s.Tracker().Callbacks()
	ctx := context.Background()
	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.ListenerType))
	err := cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.ClusterType})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "this stream's service serves only "+resource.ListenerType)
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a"}}), "a per-type request may leave the type out")

	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	err = cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "b"}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "type_url is empty")
}

func refusedCounter(t *testing.T, reg *prometheus.Registry, reason string) prometheus.Collector {
	t.Helper()
	return gathered{reg: reg, name: "trafficmap_publisher_xds_refused_requests_total", label: "reason", value: reason}
}

// gathered is one series of a registry as a collector, for testutil.ToFloat64.
type gathered struct {
	reg                *prometheus.Registry
	name, label, value string
}

func (g gathered) Describe(chan<- *prometheus.Desc) {}

func (g gathered) Collect(ch chan<- prometheus.Metric) {
	families, _ := g.reg.Gather()
	for _, f := range families {
		if f.GetName() != g.name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == g.label && l.GetValue() == g.value {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	}
}

// D7 end to end: a real server on a real listener gets the crashing request on a raw ADS
// stream. The stream ends with InvalidArgument; the server goes on serving a real grpc-go
// xDS client and a second, well-formed ADS stream on the same connection.
func TestServerSurvivesCrashingRequest(t *testing.T) {
	h := newHarness(t)
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)

	evil, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, evil.Send(crasher()))
	_, err = evil.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	host, err := h.call()
	require.NoError(t, err, "the server still serves the gRPC client")
	assert.Contains(t, []string{"worker-a", "worker-b"}, host)

	good, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, good.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "after", UserAgentName: "gRPC Go"}, TypeUrl: resource.ListenerType,
		ResourceNames: []string{"chat.prod"}}))
	resp, ok := xdstest.Next(xdstest.Stream(good.Recv), 20*time.Second)
	require.True(t, ok, "a well-formed stream is answered")
	assert.Equal(t, resource.ListenerType, resp.GetTypeUrl())
	assert.Len(t, resp.GetResources(), 1)
}
