package xds_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// go-control-plane numbers state-of-the-world and delta streams with separate counters, so a
// mixed fleet has a SotW stream and a delta stream with the same id: both are tracked.
func TestTrackerKeepsSotWAndDeltaStreamsWithTheSameIDApart(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	ctx := context.Background()
	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sotw"}, TypeUrl: resource.RouteType}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "delta"}, TypeUrl: resource.RouteType}))

	cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", VersionInfo: "v-sotw"})
	cb.OnStreamDeltaResponse(1, nil, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", SystemVersionInfo: "v-delta"})
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: "1", VersionInfo: "v-sotw"}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: "1"}))

	clients := tr.Clients()
	require.Len(t, clients, 2)
	assert.Equal(t, "delta", clients[0].NodeID)
	assert.Equal(t, "v-delta", clients[0].Acked[resource.RouteType])
	assert.Equal(t, "sotw", clients[1].NodeID)
	assert.Equal(t, "v-sotw", clients[1].Acked[resource.RouteType])

	cb.OnStreamClosed(1, nil)
	require.Len(t, tr.Clients(), 1, "closing the SotW stream leaves the delta stream")
	assert.Equal(t, "delta", tr.Clients()[0].NodeID)
}

// Membership moves when a client makes itself known or a known stream closes, not on ACKs.
func TestTrackerMembership(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	ctx := context.Background()
	m0 := tr.Membership()
	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.RouteType}))
	m1 := tr.Membership()
	assert.NotEqual(t, m0, m1, "a client made itself known")

	cb.OnStreamDeltaResponse(1, nil, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", SystemVersionInfo: "v1"})
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.RouteType, ResponseNonce: "1"}))
	assert.Equal(t, m1, tr.Membership(), "an ACK")

	cb.OnDeltaStreamClosed(1, nil)
	assert.NotEqual(t, m1, tr.Membership(), "a known stream closed")
}

// The tracker reads subscriptions as go-control-plane does: a first request without names
// is a wildcard for listeners and clusters until the stream names resources, names replace
// the state-of-the-world subscription, delta subscribes and unsubscribes, "*" is explicit.
func TestTrackerRecordsSubscriptions(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	ctx := context.Background()
	node := &corev3.Node{Id: "n"}
	sub := func(typ string) xds.Subscription {
		t.Helper()
		clients := tr.Clients()
		require.Len(t, clients, 2)
		for _, c := range clients {
			if c.Stream == "sotw-1" && typ != resource.RouteType || c.Stream == "delta-1" && typ == resource.RouteType {
				return c.Subscribed[typ]
			}
		}
		return xds.Subscription{}
	}
	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}))
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNames: []string{"c1", "c2"}}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.RouteType, ResourceNamesSubscribe: []string{"r1", "r2"}}))
	assert.True(t, sub(resource.ListenerType).Wildcard, "legacy wildcard")
	assert.Equal(t, []string{"c1", "c2"}, sub(resource.ClusterType).SortedNames())
	assert.False(t, sub(resource.ClusterType).Wildcard)
	assert.Equal(t, []string{"r1", "r2"}, sub(resource.RouteType).SortedNames())

	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ListenerType}))
	assert.True(t, sub(resource.ListenerType).Wildcard, "still the legacy wildcard")
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ListenerType, ResourceNames: []string{"l1"}}))
	assert.False(t, sub(resource.ListenerType).Wildcard, "naming a resource ends the legacy wildcard")
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ListenerType}))
	assert.Empty(t, sub(resource.ListenerType).SortedNames(), "then no names means none")
	assert.False(t, sub(resource.ListenerType).Wildcard)
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNames: []string{"*", "c3"}}))
	assert.True(t, sub(resource.ClusterType).Wildcard, "explicit wildcard")
	assert.Equal(t, []string{"c3"}, sub(resource.ClusterType).SortedNames())

	held := sub(resource.RouteType)
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType,
		ResourceNamesSubscribe: []string{"r3"}, ResourceNamesUnsubscribe: []string{"r1"}}))
	assert.Equal(t, []string{"r2", "r3"}, sub(resource.RouteType).SortedNames())
	assert.Equal(t, []string{"r1", "r2"}, held.SortedNames(), "a subscription handed out never changes")
	assert.True(t, sub(resource.RouteType).IncludesAny([]string{"x", "r3"}))
	assert.False(t, sub(resource.RouteType).IncludesAny([]string{"r1"}))
}

// Every stream is its own client, with its peer address, even when node ids are equal.
func TestTrackerKeepsStreamsOfOneNodeApart(t *testing.T) {
	srv, ads := startServer(t)
	_, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	for range 2 {
		stream, err := ads.StreamAggregatedResources(context.Background())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 2)
		assert.NotEqual(c, clients[0].ID(), clients[1].ID())
		for _, cl := range clients {
			assert.Equal(c, "envoy-1", cl.NodeID)
			assert.Contains(c, cl.Peer, "127.0.0.1:")
			assert.True(c, cl.Subscribed[resource.ClusterType].Wildcard)
		}
	}, 10*time.Second, 10*time.Millisecond)
}

// A delta client that reconnects declaring the current version of everything it subscribes
// to gets nothing from the server, and holds the current version as if it had ACKed it; a
// stale declaration waits for the real ACK.
func TestDeltaReconnectWithCurrentVersionsCounts(t *testing.T) {
	srv, ads := startServer(t)
	vs, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)

	stream, err := ads.DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	// By name, as Envoy subscribes to route configurations (go-control-plane answers a
	// wildcard stream's first request even when nothing changed).
	names := []string{"prod/chat/worker-a", "prod/chat/worker-b"}
	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: names}))
	first := recv(t, responses, 10*time.Second)
	require.NotNil(t, first)
	held := map[string]string{}
	for _, r := range (*first).GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	require.Len(t, held, 2)
	require.NoError(t, stream.CloseSend())

	reconnect := func(declared map[string]string) (<-chan *discoveryv3.DeltaDiscoveryResponse, string) {
		t.Helper()
		known := map[string]bool{} // the streams before this one opens
		for _, cl := range srv.Tracker().Clients() {
			known[cl.Stream] = true
		}
		s, err := ads.DeltaAggregatedResources(context.Background())
		require.NoError(t, err)
		ch := xdstest.Stream(s.Recv)
		require.NoError(t, s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
			ResourceNamesSubscribe: names, InitialResourceVersions: declared}))
		var stream string
		require.EventuallyWithT(t, func(c *assert.CollectT) { // the request is recorded, declarations with it
			for _, cl := range srv.Tracker().Clients() {
				if _, ok := cl.Subscribed[resource.ClusterType]; ok && !known[cl.Stream] {
					stream = cl.Stream
				}
			}
			assert.NotEmpty(c, stream)
		}, 10*time.Second, 10*time.Millisecond)
		return ch, stream
	}

	ch, current := reconnect(held)
	assert.Nil(t, recv(t, ch, 300*time.Millisecond), "current declarations: the server sends nothing")
	acked := func(stream string) string {
		for _, cl := range srv.Tracker().Clients() {
			if cl.Stream == stream {
				return cl.Acked[resource.ClusterType]
			}
		}
		return ""
	}
	assert.Equal(t, vs[resource.ClusterType], acked(current), "yet the stream holds the current version")

	stale := map[string]string{"prod/chat/worker-a": "old", "prod/chat/worker-b": held["prod/chat/worker-b"]}
	ch, waiting := reconnect(stale)
	assert.Empty(t, acked(waiting), "a stale declaration is no ACK")
	require.NotNil(t, recv(t, ch, 10*time.Second), "the server sends the stale resource")
}

// A delta client that reconnects to a restarted publisher before it serves its flavour
// (the publisher builds a flavour for its first client), declaring the versions it holds,
// holds the current version once the flavour is served with that content, with nothing sent.
func TestDeltaReconnectBeforeFlavourServed(t *testing.T) {
	before, ads := startServer(t)
	_, err := before.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	names := []string{"prod/chat/worker-a", "prod/chat/worker-b"}
	stream, err := ads.DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: names}))
	first := recv(t, xdstest.Stream(stream.Recv), 10*time.Second)
	require.NotNil(t, first)
	held := map[string]string{}
	for _, r := range (*first).GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	require.Len(t, held, 2)

	srv, ads2 := startServer(t) // the restarted publisher: nothing served yet
	s, err := ads2.DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	ch := xdstest.Stream(s.Recv)
	require.NoError(t, s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: names, InitialResourceVersions: held}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 1)
		assert.Contains(c, clients[0].Subscribed, resource.ClusterType)
	}, 10*time.Second, 10*time.Millisecond)
	assert.Empty(t, srv.Tracker().Clients()[0].Acked[resource.ClusterType], "nothing served yet")

	vs, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	assert.Equal(t, vs[resource.ClusterType], srv.Tracker().Clients()[0].Acked[resource.ClusterType], "the declaration is judged when the flavour is served")
	assert.Nil(t, recv(t, ch, 300*time.Millisecond), "current declarations: the server sends nothing")
}

// A delta stream's answers count per response, whichever was sent last: a late NACK of an
// older response marks the resources it carried (those no later response carried again)
// rejected even after a newer response was ACKed; a resource sent again is judged by the
// answer to the later response; an ACK clears the type's NACK only once no resource of it
// stays rejected. NACK texts are bounded.
func TestTrackerDeltaAnswersPerResponse(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	require.NoError(t, cb.OnDeltaStreamOpen(context.Background(), 1, resource.AnyType))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "e"}, TypeUrl: resource.ClusterType}))
	send := func(nonce, version string, names ...string) {
		var res []*discoveryv3.Resource
		for _, n := range names {
			res = append(res, &discoveryv3.Resource{Name: n})
		}
		cb.OnStreamDeltaResponse(1, nil, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: resource.ClusterType, Nonce: nonce, SystemVersionInfo: version, Resources: res})
	}
	answer := func(nonce, nack string) {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: nonce}
		if nack != "" {
			req.ErrorDetail = &status.Status{Message: nack}
		}
		require.NoError(t, cb.OnStreamDeltaRequest(1, req))
	}
	state := func() xds.ClientState {
		clients := tr.Clients()
		require.Len(t, clients, 1)
		return clients[0]
	}

	send("1", "v1", "a", "b")
	assert.Equal(t, map[string]xds.Unanswered{"a": {}, "b": {}}, state().Unacked[resource.ClusterType], "sent, not answered; held as in no version before")
	send("2", "v2", "b", "c")
	answer("2", "")
	assert.Equal(t, "v2", state().Acked[resource.ClusterType])
	assert.Equal(t, map[string]xds.Unanswered{"a": {}}, state().Unacked[resource.ClusterType], "b's latest content was ACKed")
	held := state().Unacked[resource.ClusterType]

	long := strings.Repeat("é", 4096)
	answer("1", long) // late: it rejects a only, b was sent again since
	rejected := state().Unacked[resource.ClusterType]
	require.Len(t, rejected, 1)
	require.NotNil(t, rejected["a"].Nack)
	assert.Empty(t, rejected["a"].Held, "a rejected resource is held as before it was sent")
	assert.Equal(t, "v1", rejected["a"].Nack.Version)
	assert.LessOrEqual(t, len(rejected["a"].Nack.Message), 1024, "a client's NACK text is bounded")
	assert.True(t, strings.HasSuffix(rejected["a"].Nack.Message, "(truncated)"))
	assert.True(t, utf8.ValidString(rejected["a"].Nack.Message))
	assert.Nil(t, held["a"].Nack, "a state handed out never changes")
	assert.Equal(t, "v2", state().Acked[resource.ClusterType], "an older answer does not move the version back")

	send("3", "v3", "c")
	answer("3", "")
	assert.Contains(t, state().Nacked, resource.ClusterType, "a stays rejected: an ACK of other resources keeps the type's NACK")
	send("4", "v4", "a")
	assert.Equal(t, map[string]xds.Unanswered{"a": {}}, state().Unacked[resource.ClusterType], "a's new content is sent, not yet answered; still held as before v1 (rejected)")
	answer("4", "")
	assert.Empty(t, state().Unacked[resource.ClusterType])
	assert.Empty(t, state().Nacked)
	assert.Equal(t, "v4", state().Acked[resource.ClusterType])
	answer("9", "") // no such response
	assert.Equal(t, "v4", state().Acked[resource.ClusterType])
}
