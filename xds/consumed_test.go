package xds

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// memPlans collects plans before a sink exists; serve hands each to it, as the pipeline
// hands every cached map's plan to the sink before it starts.
type memPlans struct {
	plans map[string]*model.Plan
}

func (m *memPlans) set(p *model.Plan) { m.plans[p.Key().String()] = p }

func (m *memPlans) serve(s *Sink) {
	for _, p := range m.plans {
		s.Serve(p)
	}
}

// chatPlan is prod/chat over two backends, worker-a drained when drained.
func chatPlan(t *testing.T, endpoints []string, drained bool) *model.Plan {
	t.Helper()
	in := weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: endpoints[0], Weight: 1},
		{Cluster: "worker-b", Endpoint: endpoints[1], Weight: 1},
	}}
	if drained {
		in.Drains = []weights.Drain{{ID: "m", Cluster: "worker-a", Reason: "maintenance"}}
	}
	res, err := weights.Compute(in)
	require.NoError(t, err)
	return &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Result: res}
}

func (s *Sink) isBuilt(f Flavour) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.built[f]
}

// Build only what is consumed: with no client, no flavour is built, yet the plan is
// carried (it is what a first client will get) and confirmed (no client to wait for). The
// first Envoy client gets the complete current content at once; the gRPC flavour stays
// unbuilt until a real grpc-go client dials, which then reaches the backends. The
// confirmation waits for the relevant clients of each flavour, and a drain reaches both.
func TestBuildsOnlyConsumedFlavours(t *testing.T) {
	endpoints := []string{xdstest.StartBackend(t, "worker-a"), xdstest.StartBackend(t, "worker-b")}
	plans := &memPlans{plans: map[string]*model.Plan{}}
	plans.set(chatPlan(t, endpoints, false))
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	plans.serve(s)
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := s.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); wait() })

	plan := chatPlan(t, endpoints, false)
	assert.False(t, s.isBuilt(FlavourEnvoy), "no Envoy client, no Envoy resources")
	assert.False(t, s.isBuilt(FlavourGRPC), "no gRPC client, no gRPC resources")
	assert.True(t, s.Carries(plan), "what a first client will be built")
	c, err := s.Apply(ctx, plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, c.Message)

	// An Envoy (state of the world, wildcard clusters first, as Envoy starts).
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	recv := xdstest.Stream(ads.Recv)
	node := &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}
	next := func(typ string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		resp, ok := xdstest.Next(recv, 20*time.Second)
		require.True(t, ok, "a response for %s", typ)
		require.Equal(t, typ, resp.GetTypeUrl())
		return resp
	}
	ack := func(resp *discoveryv3.DiscoveryResponse, names ...string) {
		t.Helper()
		require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: names}))
	}
	require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
	clusters := next(resource.ClusterType)
	assert.Len(t, clusters.GetResources(), 2, "the complete cluster set, built for the first Envoy client")
	for _, r := range clusters.GetResources() {
		var cl clusterv3.Cluster
		require.NoError(t, r.UnmarshalTo(&cl))
		assert.Contains(t, []string{"prod/chat/worker-a", "prod/chat/worker-b"}, cl.GetName())
	}
	require.Eventually(t, func() bool { return s.isBuilt(FlavourEnvoy) }, 10*time.Second, time.Millisecond, "recorded once served")
	assert.False(t, s.isBuilt(FlavourGRPC), "an Envoy client builds the Envoy flavour alone")
	ack(clusters)
	require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}))
	listeners := next(resource.ListenerType)
	require.Len(t, listeners.GetResources(), 1)
	ack(listeners)
	require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.RouteType, ResourceNames: []string{DefaultEnvoyOptions.RouteConfigName}}))
	routes := next(resource.RouteType)
	assert.Equal(t, map[string]uint32{"prod/chat/worker-a": 1, "prod/chat/worker-b": 1}, weightsOf(t, routes))
	ack(routes, DefaultEnvoyOptions.RouteConfigName)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conf, err := s.Apply(ctx, plan, model.Standing{})
		require.NoError(c, err)
		assert.Equal(c, model.InPlace, conf.State, conf.Message)
		assert.Equal(c, 1, conf.Progress.Confirmed)
	}, 20*time.Second, 10*time.Millisecond, "confirmed once the Envoy ACKed every type")

	// A proxyless gRPC client dials the map: the gRPC flavour is built for it, and RPCs flow.
	client := xdstest.GRPCClient(t, s.Addr().String(), "grpc-client-1", "chat.prod")
	call := func() (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		resp, err := client.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		return resp.GetHostname(), err
	}
	_, err = call()
	require.NoError(t, err, "the first RPC waits for the gRPC flavour, built for this client")
	require.Eventually(t, func() bool { return s.isBuilt(FlavourGRPC) }, 10*time.Second, time.Millisecond, "recorded once served")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conf, err := s.Apply(ctx, plan, model.Standing{})
		require.NoError(c, err)
		assert.Equal(c, model.InPlace, conf.State, conf.Message)
		assert.Equal(c, 2, conf.Progress.Confirmed, "the Envoy and the gRPC client")
	}, 20*time.Second, 10*time.Millisecond)

	// A drain reaches both flavours, and is confirmed once both ACKed it.
	drained := chatPlan(t, endpoints, true)
	assert.False(t, s.Carries(drained))
	s.Serve(drained)
	routes = next(resource.RouteType)
	assert.Equal(t, map[string]uint32{"prod/chat/worker-b": 1}, weightsOf(t, routes))
	ack(routes, DefaultEnvoyOptions.RouteConfigName)
	require.Eventually(t, func() bool { return s.Carries(drained) }, 10*time.Second, time.Millisecond, "recorded once served")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		conf, err := s.Apply(ctx, drained, model.Standing{})
		require.NoError(c, err)
		assert.Equal(c, model.InPlace, conf.State, conf.Message)
		assert.Equal(c, 2, conf.Progress.Confirmed)
	}, 20*time.Second, 10*time.Millisecond)
	// grpc-go ACKs before its balancer has applied the route: wait until it has.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for range 20 {
			host, err := call()
			require.NoError(c, err)
			require.Equal(c, "worker-b", host)
		}
	}, 20*time.Second, 10*time.Millisecond)
}

// weightsOf reads the weighted clusters of the one route of a route configuration response.
func weightsOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]uint32 {
	t.Helper()
	require.Len(t, resp.GetResources(), 1)
	var rc routev3.RouteConfiguration
	require.NoError(t, resp.GetResources()[0].UnmarshalTo(&rc))
	require.Len(t, rc.GetVirtualHosts(), 1)
	out := map[string]uint32{}
	for _, cw := range rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters() {
		out[cw.GetName()] = cw.GetWeight().GetValue()
	}
	return out
}
