package xds_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

type harness struct {
	t       *testing.T
	server  *xds.Server
	entries []weights.Entry
	client  testgrpc.TestServiceClient
	addr    string // where the server listens
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, server: xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t)})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.server.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })

	h.entries = []weights.Entry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 70},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 30},
	}
	h.publish(nil)

	h.client = xdstest.GRPCClient(t, lis.Addr().String(), "grpc-client-1", "chat.prod")
	return h
}

// publish serves the harness's entries under drains and returns the route version.
func (h *harness) publish(drains []weights.Drain) xds.Versions {
	h.t.Helper()
	res, err := weights.Compute(weights.Input{Entries: h.entries, Drains: drains})
	require.NoError(h.t, err)
	r, err := xds.TranslateGRPC([]xds.Service{{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Result: res}})
	require.NoError(h.t, err)
	versions, err := h.server.SetResources(context.Background(), xds.FlavourGRPC, r)
	require.NoError(h.t, err)
	return versions
}

// waitAcked waits until the client has ACKed the versions of every type it uses, with no NACK.
func (h *harness) waitAcked(versions xds.Versions) {
	h.t.Helper()
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		clients := h.server.Tracker().Clients()
		require.Len(c, clients, 1)
		assert.Equal(c, xds.FlavourGRPC, clients[0].Flavour)
		assert.Empty(c, clients[0].Nacked)
		for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
			assert.Equal(c, versions[typ], clients[0].Acked[typ], typ)
		}
	}, 30*time.Second, 10*time.Millisecond)
}

func (h *harness) call() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	return resp.GetHostname(), err
}

func (h *harness) spread(n int) map[string]int {
	h.t.Helper()
	got := map[string]int{}
	for range n {
		host, err := h.call()
		require.NoError(h.t, err)
		got[host]++
	}
	return got
}

// TestProxylessGRPCClient drives a real grpc-go xDS client: weighted RPCs, a drain, a drain
// of everything (UNAVAILABLE from the fixed response) and an undrain, with no NACK.
func TestProxylessGRPCClient(t *testing.T) {
	h := newHarness(t)
	_, err := h.call() // the first RPC waits for the client's first configuration
	require.NoError(t, err)

	// 70/30 within a chi-square test at alpha 1e-6 (1 degree of freedom: critical value 23.93).
	const n = 2000
	got := h.spread(n)
	chi2 := 0.0
	for cluster, share := range map[string]float64{"worker-a": 0.7, "worker-b": 0.3} {
		exp := share * n
		d := float64(got[cluster]) - exp
		chi2 += d * d / exp
	}
	assert.Less(t, chi2, 23.93, "observed %v", got)

	// The seed's drain: once the client has applied it, every RPC goes to worker-b. grpc-go
	// ACKs before its balancer has applied the route, so a few RPCs right after the ACK may
	// still be picked by the old weights: wait until 20 in a row reach worker-b.
	h.waitAcked(h.publish([]weights.Drain{{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for range 20 {
			host, err := h.call()
			require.NoError(c, err)
			require.Equal(c, "worker-b", host)
		}
	}, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, map[string]int{"worker-b": 200}, h.spread(200))

	// Everything drained: a fixed response, which gRPC answers with UNAVAILABLE.
	h.waitAcked(h.publish([]weights.Drain{
		{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"},
		{ID: "maintenance-b", Cluster: "worker-b", Reason: "planned maintenance"},
	}))
	_, err = h.call()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	// Undrain: traffic comes back on both. grpc-go drops a zero-weight cluster from its
	// cluster manager and builds it again only after it has applied the route that weights
	// it: until then an RPC picked for it fails with UNAVAILABLE ("unknown cluster selected
	// for RPC"), on the client alone. Wait until an RPC reaches worker-a, then count.
	h.waitAcked(h.publish(nil))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		host, err := h.call()
		require.NoError(c, err)
		assert.Equal(c, "worker-a", host)
	}, 30*time.Second, 10*time.Millisecond)
	got = h.spread(200)
	assert.Positive(t, got["worker-a"])
	assert.Positive(t, got["worker-b"])
}
