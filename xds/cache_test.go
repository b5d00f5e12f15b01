package xds

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// namedService is prod/<name> with clusters worker-a and worker-b weighted a and b.
func namedService(t *testing.T, name string, a, b int64) Service {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: "https://" + name + ".a.example.com", Weight: a},
		{Cluster: "worker-b", Endpoint: "https://" + name + ".b.example.com", Weight: b},
	}})
	require.NoError(t, err)
	return Service{Namespace: "prod", Name: name, Service: name, Result: res}
}

func serveGRPC(t *testing.T, srv *Server, services ...Service) Versions {
	t.Helper()
	res, err := TranslateGRPC(services)
	require.NoError(t, err)
	vs, err := srv.SetResources(context.Background(), FlavourGRPC, res)
	require.NoError(t, err)
	return vs
}

// A change of one route configuration is sent to the wildcard streams and to the named
// streams that include it, as that one resource; a named stream of another route
// configuration is sent nothing, and holds the new version all the same.
func TestChangeReachesOnlyTheStreamsItConcerns(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	ctx, ads := serveADS(t, srv)
	serveGRPC(t, srv, namedService(t, "chat", 1, 1), namedService(t, "search", 1, 1))
	node := func(id string) *corev3.Node { return &corev3.Node{Id: id, UserAgentName: "gRPC Go"} }

	// chat: state of the world by name; search: delta by name; all: delta wildcard.
	chat, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	chatIn := xdstest.Stream(chat.Recv)
	require.NoError(t, chat.Send(&discoveryv3.DiscoveryRequest{Node: node("chat"), TypeUrl: resource.RouteType, ResourceNames: []string{"prod/chat"}}))
	search, err := ads.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	searchIn := xdstest.Stream(search.Recv)
	require.NoError(t, search.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node("search"), TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{"prod/search"}}))
	all, err := ads.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	allIn := xdstest.Stream(all.Recv)
	require.NoError(t, all.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node("all"), TypeUrl: resource.RouteType}))

	// every: state of the world, wildcard.
	every, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	everyIn := xdstest.Stream(every.Recv)
	require.NoError(t, every.Send(&discoveryv3.DiscoveryRequest{Node: node("every"), TypeUrl: resource.RouteType}))
	firstEvery, ok := xdstest.Next(everyIn, 10*time.Second)
	require.True(t, ok)
	assert.Len(t, firstEvery.GetResources(), 2)
	require.NoError(t, every.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.RouteType, VersionInfo: firstEvery.GetVersionInfo(), ResponseNonce: firstEvery.GetNonce()}))

	ackSotW := func(r *discoveryv3.DiscoveryResponse) {
		require.NoError(t, chat.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: []string{"prod/chat"},
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}))
	}
	ackDelta := func(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, r *discoveryv3.DeltaDiscoveryResponse) {
		require.NoError(t, s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: r.GetNonce()}))
	}
	first, ok := xdstest.Next(chatIn, 10*time.Second)
	require.True(t, ok)
	assert.Len(t, first.GetResources(), 1)
	ackSotW(first)
	firstSearch, ok := xdstest.Next(searchIn, 10*time.Second)
	require.True(t, ok)
	assert.Len(t, firstSearch.GetResources(), 1)
	ackDelta(search, firstSearch)
	firstAll, ok := xdstest.Next(allIn, 10*time.Second)
	require.True(t, ok)
	assert.Len(t, firstAll.GetResources(), 2)
	ackDelta(all, firstAll)
	acked := func(id string) string {
		for _, c := range srv.Tracker().Clients() {
			if c.NodeID == id {
				return c.Acked[resource.RouteType]
			}
		}
		return ""
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range []string{"chat", "search", "all", "every"} {
			assert.Equal(c, srv.cache.version(string(FlavourGRPC), resource.RouteType), acked(id))
		}
	}, 10*time.Second, 10*time.Millisecond)

	vs := serveGRPC(t, srv, namedService(t, "chat", 0, 1), namedService(t, "search", 1, 1))
	got, ok := xdstest.Next(chatIn, 10*time.Second)
	require.True(t, ok, "the named stream of the changed route configuration is sent it")
	assert.Equal(t, vs[resource.RouteType], got.GetVersionInfo())
	assert.Len(t, got.GetResources(), 1)
	gotAll, ok := xdstest.Next(allIn, 10*time.Second)
	require.True(t, ok, "the wildcard stream is sent the change")
	require.Len(t, gotAll.GetResources(), 1, "only the changed resource")
	assert.Equal(t, "prod/chat", gotAll.GetResources()[0].GetName())
	gotEvery, ok := xdstest.Next(everyIn, 10*time.Second)
	require.True(t, ok, "the state-of-the-world wildcard stream is sent the change")
	assert.Equal(t, vs[resource.RouteType], gotEvery.GetVersionInfo())
	assert.Len(t, gotEvery.GetResources(), 1, "route configurations are not full state: only the changed one")
	_, sent := xdstest.Next(searchIn, 300*time.Millisecond) // a bounded look
	assert.False(t, sent, "the named stream of another route configuration is sent nothing")
	assert.Equal(t, vs[resource.RouteType], acked("search"), "and holds the new version: its resources are the same in both")
}

// Every response that carries a resource carries the same encoding of it: a resource is
// encoded once, not once per client.
func TestResourceEncodedOncePerContent(t *testing.T) {
	c := newTypeCache(resource.RouteType)
	res, err := TranslateGRPC([]Service{namedService(t, "chat", 1, 1)})
	require.NoError(t, err)
	sum := (&versioner{}).summer()
	changed, removed, err := c.diff(toResources(res.Routes), sum)
	require.NoError(t, err)
	assert.Empty(t, removed)
	c.update("v1", changed, removed)

	respond := func() *discoveryv3.DiscoveryResponse {
		ch := make(chan cachev3.Response, 1)
		c.createWatch(&cachev3.Request{TypeUrl: resource.RouteType, ResourceNames: []string{"prod/chat"}},
			streamv3.NewSotwSubscription([]string{"prod/chat"}, true), ch)
		r, err := (<-ch).GetDiscoveryResponse()
		require.NoError(t, err)
		return r
	}
	a, b := respond(), respond()
	require.Len(t, a.GetResources(), 1)
	assert.Same(t, a.GetResources()[0], b.GetResources()[0], "one encoding shared by both responses")
	assert.NotSame(t, a, b, "each response is a message of its own (the server sets its nonce)")

	again, _, err := c.diff(toResources(res.Routes), sum)
	require.NoError(t, err)
	assert.Empty(t, again, "the same content is no change")
}

// A flavour is consumed once a client of it has identified itself.
func TestConsumedFlavours(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	ctx, ads := serveADS(t, srv)
	assert.False(t, srv.Tracker().Consumed(FlavourEnvoy))
	assert.False(t, srv.Tracker().Consumed(FlavourGRPC))

	stream, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}, TypeUrl: resource.ClusterType}))
	require.Eventually(t, func() bool { return srv.Tracker().Consumed(FlavourEnvoy) }, 10*time.Second, 10*time.Millisecond)
	assert.False(t, srv.Tracker().Consumed(FlavourGRPC))
}

// The validator's memory never hides a problem: a set whose routes name a cluster it no
// longer has fails, again when it is validated again unchanged, and the set that fixes it
// passes.
func TestValidatorRemembersFailures(t *testing.T) {
	v := &validator{}
	good := grpcResources(t, "worker-a", "worker-b")
	require.NoError(t, v.validate(good))
	broken := good
	broken.Clusters = good.Clusters[:1] // the same messages, worker-b gone
	require.ErrorIs(t, v.validate(broken), ErrInvalidResources)
	require.ErrorIs(t, v.validate(broken), ErrInvalidResources, "the same lists again: the same verdict")
	require.NoError(t, v.validate(good))
	require.NoError(t, v.validate(good), "the same lists again: the same verdict")
}

// A large route configuration assembled from its virtual hosts' encodings is its
// deterministic encoding, also when some encodings are remembered from another one.
func TestLargeRouteEncoding(t *testing.T) {
	var services []Service
	for i := range largeRoute + 4 {
		s := namedService(t, fmt.Sprintf("svc-%02d", i), 1, 1)
		s.Hostnames = []string{fmt.Sprintf("svc-%02d.example.com", i)}
		services = append(services, s)
	}
	res, err := TranslateEnvoy(DefaultEnvoyOptions, services)
	require.NoError(t, err)
	rc := res.Routes[0]
	want, err := cachev3.MarshalResource(rc)
	require.NoError(t, err)
	got, known, err := encodeRoute(rc, nil)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	services[3] = namedService(t, "svc-03", 0, 1)
	services[3].Hostnames = []string{"svc-03.example.com"}
	res, err = TranslateEnvoy(DefaultEnvoyOptions, services)
	require.NoError(t, err)
	want, err = cachev3.MarshalResource(res.Routes[0])
	require.NoError(t, err)
	for i, vh := range res.Routes[0].VirtualHosts { // the unchanged virtual hosts as the translator shares them
		if i != 3 {
			known[vh] = known[rc.VirtualHosts[i]]
		}
	}
	got, _, err = encodeRoute(res.Routes[0], known)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// A response that an update not concerning the stream overtakes (the update moves the
// streams it leaves alone before the stream's response at the old version is recorded)
// still counts for the new version once ACKed.
func TestTrackerForwardsLateResponses(t *testing.T) {
	tr := NewTracker(nil)
	key := streamKey{id: 1}
	node := &corev3.Node{Id: "grpc-1", UserAgentName: "gRPC Go"}
	tr.open(key, "", Access{}, "")
	sub := func(s *stream, typ string) *refusal { s.subscribeSotW(typ, []string{"prod/chat"}); return nil }
	require.Nil(t, tr.request(trackedRequest{key: key, node: node, typeURL: resource.RouteType, subscribe: sub}))
	tr.advance(FlavourGRPC, resource.RouteType, "v1", "v2", map[string]struct{}{"prod/search": {}})
	tr.response(key, resource.RouteType, "n1", "v1") // sent at v1, recorded after the update
	require.Nil(t, tr.request(trackedRequest{key: key, node: node, typeURL: resource.RouteType, nonce: "n1", version: "v1", subscribe: sub}))
	require.Len(t, tr.Clients(), 1)
	assert.Equal(t, "v2", tr.Clients()[0].Acked[resource.RouteType], "v2 differs from v1 only in prod/search")

	tr.advance(FlavourGRPC, resource.RouteType, "v2", "v3", map[string]struct{}{"prod/chat": {}})
	assert.Equal(t, "v2", tr.Clients()[0].Acked[resource.RouteType], "v3 changes prod/chat: the stream waits for it")
}

// A delta wildcard stream follows a run of updates (changes, additions, removals, each
// acknowledged): after each, what it holds is exactly what is served, each update sends
// only what changed, and a removal after earlier in-place updates of its versions is sent.
func TestDeltaWildcardStreamFollowsUpdates(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	ctx, ads := serveADS(t, srv)
	serveGRPC(t, srv, namedService(t, "a", 1, 1), namedService(t, "b", 1, 1), namedService(t, "c", 1, 1))
	st, err := ads.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	in := xdstest.Stream(st.Recv)
	require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "all", UserAgentName: "gRPC Go"}, TypeUrl: resource.RouteType}))
	held := map[string]string{}
	receive := func(step string) []string {
		t.Helper()
		r, ok := xdstest.Next(in, 10*time.Second)
		require.True(t, ok, step)
		var got []string
		for _, res := range r.GetResources() {
			held[res.GetName()] = res.GetVersion()
			got = append(got, res.GetName())
		}
		for _, name := range r.GetRemovedResources() {
			delete(held, name)
			got = append(got, "-"+name)
		}
		require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: r.GetNonce()}))
		return got
	}
	names := func() []string {
		var out []string
		for name := range held {
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	assert.ElementsMatch(t, []string{"prod/a", "prod/b", "prod/c"}, receive("first"))
	for i, step := range []struct {
		serve []Service
		sent  []string
		holds []string
	}{
		{[]Service{namedService(t, "a", 0, 1), namedService(t, "b", 1, 1), namedService(t, "c", 1, 1)}, []string{"prod/a"}, []string{"prod/a", "prod/b", "prod/c"}},
		{[]Service{namedService(t, "a", 0, 1), namedService(t, "c", 1, 1)}, []string{"-prod/b"}, []string{"prod/a", "prod/c"}},
		{[]Service{namedService(t, "a", 0, 1), namedService(t, "c", 1, 1), namedService(t, "d", 1, 1)}, []string{"prod/d"}, []string{"prod/a", "prod/c", "prod/d"}},
		{[]Service{namedService(t, "a", 1, 1), namedService(t, "c", 1, 2), namedService(t, "d", 1, 1)}, []string{"prod/a", "prod/c"}, []string{"prod/a", "prod/c", "prod/d"}},
		{[]Service{namedService(t, "a", 1, 1), namedService(t, "c", 1, 2)}, []string{"-prod/d"}, []string{"prod/a", "prod/c"}},
	} {
		serveGRPC(t, srv, step.serve...)
		assert.ElementsMatch(t, step.sent, receive(fmt.Sprint("step ", i)), "step %d sends only what changed", i)
		assert.Equal(t, step.holds, names(), "step %d", i)
	}
	_, sent := xdstest.Next(in, 300*time.Millisecond) // a bounded look
	assert.False(t, sent, "nothing more")
}
