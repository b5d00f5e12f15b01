package xds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
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

// demandPlan is prod/svc-<i> over worker-a and worker-b, with the hostname
// svc-<i>.example.com.
func demandPlan(t *testing.T, i int) *model.Plan {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: fmt.Sprintf("https://svc-%d.worker-a.example.com", i), Weight: 1},
		{Cluster: "worker-b", Endpoint: fmt.Sprintf("https://svc-%d.worker-b.example.com", i), Weight: 1},
	}})
	require.NoError(t, err)
	name := fmt.Sprintf("svc-%d", i)
	return &model.Plan{Namespace: "prod", Name: name, Service: name, Hostnames: []string{name + ".example.com"}, Result: res}
}

// startDemandSink starts a sink (RequireAck) serving plans, whose gRPC maps linger for
// linger after their last subscriber left, with its metrics in the registry returned.
func startDemandSink(t *testing.T, linger time.Duration, plans ...*model.Plan) (*Sink, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, Registerer: reg}, zaptest.NewLogger(t))
	require.NoError(t, err)
	s.loop.demand.linger = linger // before the loop starts
	for _, p := range plans {
		s.Serve(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := s.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); wait() })
	return s, reg
}

// gRPCServed are the names of the gRPC flavour's resources of typeURL the server holds,
// sorted.
func gRPCServed(s *Sink, typeURL string) []string {
	return slices.Sorted(maps.Keys(s.server.cache.cache(string(FlavourGRPC), typeURL).entries()))
}

// adsStream is a protocol-level proxyless gRPC client: one state-of-the-world ADS stream
// that subscribes type by type and ACKs only when told; close ends the stream.
type adsStream struct {
	t     *testing.T
	ads   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	recv  <-chan *discoveryv3.DiscoveryResponse
	node  *corev3.Node
	close func()

	mu   sync.Mutex
	last map[string]*discoveryv3.DiscoveryResponse // by type URL
}

func dialADS(t *testing.T, s *Sink, id string) *adsStream {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	var once sync.Once
	closeAll := func() { once.Do(func() { cancel(); _ = conn.Close() }) }
	t.Cleanup(closeAll)
	return &adsStream{t: t, ads: ads, recv: xdstest.Stream(ads.Recv), node: &corev3.Node{Id: id, UserAgentName: "gRPC Go"},
		close: closeAll, last: map[string]*discoveryv3.DiscoveryResponse{}}
}

// subscribe sends the type's subscription (nil names: none yet, a legacy wildcard),
// ACKing the last response of the type if any.
func (a *adsStream) subscribe(typeURL string, names ...string) {
	a.t.Helper()
	a.mu.Lock()
	last := a.last[typeURL]
	a.mu.Unlock()
	require.NoError(a.t, a.ads.Send(&discoveryv3.DiscoveryRequest{Node: a.node, TypeUrl: typeURL, ResourceNames: names,
		VersionInfo: last.GetVersionInfo(), ResponseNonce: last.GetNonce()}))
}

// next is the stream's next response, which must be of typeURL.
func (a *adsStream) next(typeURL string) *discoveryv3.DiscoveryResponse {
	a.t.Helper()
	resp, ok := xdstest.Next(a.recv, 20*time.Second)
	require.True(a.t, ok, "a response for %s", typeURL)
	require.Equal(a.t, typeURL, resp.GetTypeUrl())
	a.mu.Lock()
	a.last[typeURL] = resp
	a.mu.Unlock()
	return resp
}

// ack ACKs resp, still subscribed to names.
func (a *adsStream) ack(resp *discoveryv3.DiscoveryResponse, names ...string) {
	a.t.Helper()
	require.NoError(a.t, a.ads.Send(&discoveryv3.DiscoveryRequest{Node: a.node, TypeUrl: resp.GetTypeUrl(), ResourceNames: names,
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}))
}

// gauge is the trafficmap_publisher_xds_resources gauge of the gRPC flavour's type.
func gauge(t *testing.T, reg *prometheus.Registry, typ string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "trafficmap_publisher_xds_resources" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["flavour"] == string(FlavourGRPC) && labels["type"] == typ {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no gauge for %s", typ)
	return 0
}

// The gRPC flavour carries only the maps a gRPC stream subscribes to one of the names of
// (its listeners, its route configuration, one of its clusters), or every map once one
// subscribes to a type by wildcard: the server holds nothing of the other maps, as the
// resources gauge shows.
func TestGRPCFlavourServesOnlyDemandedMaps(t *testing.T) {
	all := []string{"svc-0", "svc-1", "svc-2", "svc-3"}
	for _, tc := range []struct {
		name  string
		typ   string
		names []string // nil: a legacy wildcard
		want  []string // the maps built
	}{
		{name: "a name nobody serves", typ: resource.ListenerType, names: []string{"nobody"}},
		{name: "a map's listener", typ: resource.ListenerType, names: []string{"svc-1.prod"}, want: []string{"svc-1"}},
		{name: "a map's hostname", typ: resource.ListenerType, names: []string{"svc-2.example.com", "nobody"}, want: []string{"svc-2"}},
		{name: "a map's route configuration", typ: resource.RouteType, names: []string{"prod/svc-3"}, want: []string{"svc-3"}},
		{name: "one of a map's clusters", typ: resource.ClusterType, names: []string{"prod/svc-0/worker-b"}, want: []string{"svc-0"}},
		{name: "a legacy wildcard", typ: resource.ListenerType, want: all},
		{name: "a wildcard of another type", typ: resource.EndpointType, names: []string{"*"}, want: all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plans []*model.Plan
			for i := range all {
				plans = append(plans, demandPlan(t, i))
			}
			s, reg := startDemandSink(t, 0, plans...)
			dialADS(t, s, "grpc-1").subscribe(tc.typ, tc.names...)
			var listeners, routes, clusters []string
			for _, name := range tc.want {
				listeners = append(listeners, name+".example.com", name+".prod")
				routes = append(routes, "prod/"+name)
				clusters = append(clusters, "prod/"+name+"/worker-a", "prod/"+name+"/worker-b")
			}
			slices.Sort(listeners)
			require.Eventually(t, func() bool { return s.isBuilt(FlavourGRPC) }, 10*time.Second, time.Millisecond)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Equal(c, listeners, nilIfEmpty(gRPCServed(s, resource.ListenerType)))
				assert.Equal(c, routes, nilIfEmpty(gRPCServed(s, resource.RouteType)))
				assert.Equal(c, clusters, nilIfEmpty(gRPCServed(s, resource.ClusterType)))
			}, 10*time.Second, time.Millisecond)
			assert.InDelta(t, len(listeners), gauge(t, reg, "Listener"), 0)
			assert.InDelta(t, len(clusters), gauge(t, reg, "Cluster"), 0)
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// confirmed is the sink's confirmation of plan: its state and confirmed/relevant clients.
func confirmed(t require.TestingT, s *Sink, plan *model.Plan) (model.State, int, int) {
	c, err := s.Apply(context.Background(), plan, model.Standing{})
	require.NoError(t, err)
	return c.State, c.Progress.Confirmed, c.Progress.Total
}

// A map whose gRPC resources were dropped after its last subscriber left is built again,
// with its current content, when a client subscribes again: the new subscriber gets the
// right weights (a drain given while the map was dropped), a real grpc-go client's RPCs
// follow them, and Published counts exactly the relevant clients all along (a gRPC client
// subscribed to other names never counts; the map is not confirmed before its subscribers
// ACKed it).
func TestDroppedMapIsRebuiltForItsNextSubscriber(t *testing.T) {
	endpoints := []string{xdstest.StartBackend(t, "worker-a"), xdstest.StartBackend(t, "worker-b")}
	s, reg := startDemandSink(t, 0, chatPlan(t, endpoints, false), demandPlan(t, 1))
	other := dialADS(t, s, "grpc-other") // a gRPC client of another map, never relevant to chat
	other.subscribe(resource.ListenerType, "svc-1.prod")
	other.next(resource.ListenerType)
	require.Eventually(t, func() bool {
		return slices.Equal([]string{"svc-1.example.com", "svc-1.prod"}, gRPCServed(s, resource.ListenerType))
	},
		10*time.Second, time.Millisecond, "chat is not built: no client subscribes to it")

	// holds subscribes to chat type by type, checks the route's weights, and checks that
	// chat is not confirmed before it ACKed every type.
	holds := func(a *adsStream, plan *model.Plan, want map[string]uint32, others int) {
		t.Helper()
		a.subscribe(resource.ListenerType, "chat.prod")
		for { // a fresh stream is answered at once, before the rebuild its subscription asks for
			listeners := a.next(resource.ListenerType)
			a.ack(listeners, "chat.prod")
			if len(listeners.GetResources()) > 0 {
				break
			}
		}
		a.subscribe(resource.RouteType, "prod/chat")
		var routes *discoveryv3.DiscoveryResponse
		for { // the rebuild serves listeners before routes: the first answer can come between
			routes = a.next(resource.RouteType)
			a.ack(routes, "prod/chat")
			if len(routes.GetResources()) > 0 {
				break
			}
		}
		assert.Equal(t, want, weightsOf(t, routes), "the current weights")
		clusters := []string{"prod/chat/worker-a", "prod/chat/worker-b"}
		a.subscribe(resource.ClusterType, clusters...)
		resp := a.next(resource.ClusterType)
		state, acked, total := confirmed(t, s, plan)
		assert.Equal(t, model.Pending, state, "not confirmed before the client ACKed every type")
		assert.Equal(t, others+1, total, "the relevant clients: those subscribed to chat")
		assert.Equal(t, others, acked)
		a.ack(resp, clusters...)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			state, acked, total := confirmed(c, s, plan)
			assert.Equal(c, model.InPlace, state)
			assert.Equal(c, []int{others + 1, others + 1}, []int{acked, total})
		}, 20*time.Second, 10*time.Millisecond)
	}
	first := dialADS(t, s, "grpc-1")
	holds(first, chatPlan(t, endpoints, false), map[string]uint32{"prod/chat/worker-a": 1, "prod/chat/worker-b": 1}, 0)

	// The last subscriber leaves: chat is dropped (no linger here), and no client is relevant.
	first.close()
	require.Eventually(t, func() bool { return !slices.Contains(gRPCServed(s, resource.ListenerType), "chat.prod") }, 10*time.Second, time.Millisecond)
	assert.InDelta(t, 2, gauge(t, reg, "Cluster"), 0, "only svc-1's clusters")
	drained := chatPlan(t, endpoints, true) // given while chat is dropped
	s.Serve(drained)
	require.Eventually(t, func() bool { return s.Carries(drained) }, 10*time.Second, time.Millisecond)
	state, acked, total := confirmed(t, s, drained)
	assert.Equal(t, []any{model.InPlace, 0, 0}, []any{state, acked, total}, "no relevant client")
	assert.NotContains(t, gRPCServed(s, resource.ListenerType), "chat.prod", "not built for a change alone")

	// A new subscriber gets it built again, with the drain.
	holds(dialADS(t, s, "grpc-2"), drained, map[string]uint32{"prod/chat/worker-b": 1}, 0)
	// And a real grpc-go client reaches worker-b alone; it counts once it ACKed.
	client := xdstest.GRPCClient(t, s.Addr().String(), "grpc-go", "chat.prod")
	for range 20 {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := client.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		ccancel()
		require.NoError(t, err)
		assert.Equal(t, "worker-b", resp.GetHostname(), "the map was built with the drain: the client never saw worker-a")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		state, acked, total := confirmed(c, s, drained)
		assert.Equal(c, model.InPlace, state)
		assert.Equal(c, []int{2, 2}, []int{acked, total}, "grpc-2 and grpc-go; grpc-other is not relevant")
	}, 20*time.Second, 10*time.Millisecond)
	_, _, total = confirmed(t, s, demandPlan(t, 1))
	assert.Equal(t, 1, total, "svc-1: grpc-other alone is relevant")
}

// A wildcard gRPC client demands every map: while it is connected every map is built,
// a map given then too; when it leaves, the flavour carries the named maps again.
func TestWildcardGRPCClientBuildsEveryMap(t *testing.T) {
	s, _ := startDemandSink(t, 0, demandPlan(t, 0), demandPlan(t, 1), demandPlan(t, 2))
	named := dialADS(t, s, "grpc-named")
	named.subscribe(resource.ListenerType, "svc-1.prod")
	built := func(want ...string) {
		t.Helper()
		var listeners []string
		for _, name := range want {
			listeners = append(listeners, name+".example.com", name+".prod")
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, listeners, gRPCServed(s, resource.ListenerType))
		}, 10*time.Second, time.Millisecond)
	}
	built("svc-1")
	wildcard := dialADS(t, s, "grpc-wildcard")
	wildcard.subscribe(resource.ListenerType)
	built("svc-0", "svc-1", "svc-2")
	s.Serve(demandPlan(t, 3))
	built("svc-0", "svc-1", "svc-2", "svc-3")
	wildcard.close()
	built("svc-1")
}

// A map whose last subscriber left stays built for the linger, so a client reconnecting
// within it finds it; a rebuild after the linger drops it. Rebuilds run by hand here, on a
// fake clock.
func TestDemandLingers(t *testing.T) {
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, Now: func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return now
	}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	tick := func(d time.Duration) {
		clock.Lock()
		now = now.Add(d)
		clock.Unlock()
	}
	s.Serve(demandPlan(t, 0))
	ctx, connected := serveByHand(t, s)
	builtNow := func() bool {
		t.Helper()
		require.NoError(t, s.loop.rebuild(ctx))
		return slices.Contains(gRPCServed(s, resource.ListenerType), "svc-0.prod")
	}

	first := dialADS(t, s, "grpc-1")
	first.subscribe(resource.ListenerType, "svc-0.prod")
	connected(1)
	assert.True(t, builtNow(), "built for its subscriber")
	first.close()
	connected(0)
	assert.True(t, builtNow(), "kept: the linger has just begun")
	tick(DemandLinger - time.Second)
	assert.True(t, builtNow(), "kept within the linger")
	second := dialADS(t, s, "grpc-2") // reconnects within the linger
	second.subscribe(resource.ListenerType, "svc-0.prod")
	connected(1)
	tick(time.Hour)
	assert.True(t, builtNow(), "demanded again: no linger runs")
	second.close()
	connected(0)
	assert.True(t, builtNow(), "a new linger begins")
	tick(DemandLinger)
	assert.False(t, builtNow(), "dropped once the linger ended")
}

// New maps coalesce (see TestNewMapsCoalesce) even while gRPC streams change what they
// subscribe to: the subscription change is served at once, alone, and the new map waits
// for the snapshot after. Serving the new maps with every subscription change sent every
// Envoy the fleet's route configuration every few tens of milliseconds in a cold start,
// and maps judged while an Envoy had not answered one went back to Published False.
func TestNewMapsCoalesceWhileGRPCStreamsSubscribe(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, connected := serveByHand(t, s)
	served := func(key string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.served[key]
		return ok
	}
	s.Serve(demandPlan(t, 0))
	s.Serve(demandPlan(t, 2))
	dialADS(t, s, "grpc-1").subscribe(resource.ListenerType, "svc-0.prod")
	connected(1)
	require.NoError(t, s.loop.rebuild(ctx)) // the first: both served, the gRPC flavour built for svc-0
	require.True(t, served("prod/svc-0") && served("prod/svc-2"))
	require.Equal(t, []string{"svc-0.example.com", "svc-0.prod"}, gRPCServed(s, resource.ListenerType))

	s.Serve(demandPlan(t, 1)) // new, right after a snapshot
	dialADS(t, s, "grpc-2").subscribe(resource.ListenerType, "svc-2.prod")
	connected(2)
	require.NoError(t, s.loop.rebuild(ctx))
	assert.Equal(t, []string{"svc-0.example.com", "svc-0.prod", "svc-2.example.com", "svc-2.prod"}, gRPCServed(s, resource.ListenerType),
		"the new subscription is served at once")
	assert.False(t, served("prod/svc-1"), "the new map waits for more")
	require.Eventually(t, func() bool {
		require.NoError(t, s.loop.rebuild(ctx))
		return served("prod/svc-1")
	}, 10*time.Second, 50*time.Millisecond, "served once coalesceNew has passed since the last snapshot that served maps")
}

// serveByHand runs s's xDS server alone (the test makes the rebuilds) until the test ends,
// and returns its context and a wait for n identified clients.
func serveByHand(t *testing.T, s *Sink) (context.Context, func(n int)) {
	ctx := serveSink(t, s)
	return ctx, func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == n }, 10*time.Second, time.Millisecond)
	}
}
