package xds

import (
	"context"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// departedClient is a state-of-the-world Envoy-flavour ADS stream on a connection of its
// own, which the test can cut (close).
type departedClient struct {
	conn      *grpc.ClientConn
	stream    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	responses <-chan *discoveryv3.DiscoveryResponse
	names     map[string][]string
}

func dialDeparted(t *testing.T, s *Sink, node string) *departedClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	require.NoError(t, err)
	c := &departedClient{conn: conn, stream: stream, names: map[string][]string{
		resource.ListenerType: nil, resource.ClusterType: nil, resource.RouteType: {s.envoy.RouteConfigName}}}
	for _, typ := range []string{resource.ListenerType, resource.ClusterType, resource.RouteType} {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: typ, ResourceNames: c.names[typ]}))
	}
	c.responses = xdstest.Stream(stream.Recv)
	return c
}

// serveSink runs s's xDS server until the test ends and returns the context it serves with.
func serveSink(t *testing.T, s *Sink) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.server.Serve(ctx, s.listener) }()
	t.Cleanup(func() { cancel(); <-done; s.loop.queue.ShutDown() })
	return ctx
}

// ackAll ACKs every response received so far.
func (c *departedClient) ackAll(t *testing.T) {
	for {
		r, ok := xdstest.Next(c.responses, 10*time.Millisecond)
		if !ok {
			return
		}
		require.NoError(t, c.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(),
			ResponseNonce: r.GetNonce(), ResourceNames: c.names[r.GetTypeUrl()]}))
	}
}

// D12 (issue 44): a client whose stream went away (closed, keepalive, reset) keeps routing
// by the last content it applied. Before, it stopped counting the moment its stream closed
// and the drain went InPlace (Published True) while it still held the undrained weights.
// Now the departed stream holds the map Pending for --xds-departed-grace, named in the
// message and in the replica report the leader counts; past the grace the map goes
// InPlace naming it, and the grace's end names the map to the pipeline. A returning client
// counts as any client; one that ACKed the current content before it left holds nothing.
func TestDepartedClientHoldsWhatItHeld(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, DepartedGrace: time.Hour, Now: clock}, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx := serveSink(t, s)
	endpoints := []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}
	undrained, drained := chatPlan(t, endpoints, false), chatPlan(t, endpoints, true)
	serveNow(t, s, undrained)
	apply := func(p *model.Plan) model.Confirmation {
		t.Helper()
		c, err := s.Apply(ctx, p, model.Standing{})
		require.NoError(t, err)
		return c
	}

	envoy := dialDeparted(t, s, "envoy-1")
	require.Eventually(t, func() bool { return s.server.Tracker().Consumed(FlavourEnvoy) }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.loop.rebuild(ctx))
	require.Eventually(t, func() bool { envoy.ackAll(t); return apply(undrained).State == model.InPlace }, 10*time.Second, time.Millisecond)

	serveNow(t, s, drained) // the drain: the client is frozen and never applies it
	require.NoError(t, envoy.conn.Close())
	require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == 0 }, 10*time.Second, time.Millisecond)
	s.Updated()

	c := apply(drained)
	assert.Equal(t, model.Pending, c.State, "the departed client still routes by the undrained weights: %s", c.Message)
	assert.Contains(t, c.Message, `departed xds client stream(s) that left without confirming these weights`)
	assert.Contains(t, c.Message, `node "envoy-1" stream sotw-`)
	assert.Contains(t, c.Message, "held until 2026-12-03T13:00:00Z")
	rep := s.Replica().Report([]string{"prod/chat"})
	require.Len(t, rep.Maps, 1)
	assert.Equal(t, 1, rep.Maps[0].Relevant, "a follower's report holds the map on the leader too")
	assert.Equal(t, 0, rep.Maps[0].Acked)
	require.Len(t, rep.Maps[0].Waiting, 1)
	assert.Contains(t, rep.Maps[0].Waiting[0], `departed "envoy-1"/sotw-`)

	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	s.server.tracker.departed.ended()
	assert.Contains(t, s.Updated(), drained.Key(), "the end of the grace names the map it held")
	c = apply(drained)
	assert.Equal(t, model.InPlace, c.State, c.Message)
	assert.Contains(t, c.Message, `not counted, past --xds-departed-grace 1h0m0s: 1 departed xds client stream(s)`)
	assert.Contains(t, c.Message, `node "envoy-1"`)
	rep = s.Replica().Report([]string{"prod/chat"})
	assert.Equal(t, 0, rep.Maps[0].Relevant, "past the grace it holds nothing on the leader either")

	back := dialDeparted(t, s, "envoy-1")
	require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == 1 }, 10*time.Second, time.Millisecond)
	c = apply(drained)
	assert.NotContains(t, c.Message, "departed", "the returning client replaced what was remembered of it")
	require.Eventually(t, func() bool { back.ackAll(t); return apply(drained).State == model.InPlace }, 10*time.Second, time.Millisecond)

	require.NoError(t, back.conn.Close()) // it leaves having ACKed the current content
	require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == 0 }, 10*time.Second, time.Millisecond)
	c = apply(drained)
	assert.Equal(t, model.InPlace, c.State, c.Message)
	assert.NotContains(t, c.Message, "departed")
	c = apply(undrained)
	assert.Equal(t, model.Pending, c.State, "it holds the drained weights, not these")
	assert.Contains(t, c.Message, `node "envoy-1"`)
}

// The departed streams remembered are bounded (MaxDeparted): at the cap a stream past its
// grace is forgotten first; one within its grace is forgotten, but its hold is kept by its
// certificate identity, over every map that identity may see, until its grace ends.
func TestDepartedCap(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d := newDepartures(time.Minute, func() time.Time { return now })
	d.max = 2
	t.Cleanup(d.stop)
	h := NewHistory(4)
	served := map[Flavour]Served{FlavourGRPC: {Digest: "d", Names: map[string][]string{resource.ListenerType: {"chat"}}}}
	state := func(node string, access Access) ClientState {
		return ClientState{NodeID: node, Flavour: FlavourGRPC, Stream: "sotw-1", Access: access,
			Subscribed: map[string]Subscription{resource.ListenerType: {Wildcard: true}}}
	}
	teamA := Access{Identity: "spiffe://a", restricted: true, namespaces: []string{"team-a"}}
	d.add(state("old", Access{}))
	now = now.Add(2 * time.Minute) // "old" is past its grace
	d.add(state("a-1", teamA))
	d.add(state("a-2", teamA))
	list, over, _ := d.snapshot(nil)
	require.Len(t, list, 2)
	assert.Equal(t, "a-1", list[0].NodeID, "the one past its grace went first")
	assert.Empty(t, over)

	d.add(state("a-3", teamA)) // every one remembered is within its grace
	list, over, at := d.snapshot(nil)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"a-2", "a-3"}, []string{list[0].NodeID, list[1].NodeID})
	for _, tc := range []struct {
		key   string
		holds bool
	}{{"team-a/chat", true}, {"team-b/chat", false}} {
		v := judgeDeparted(nil, over, at, time.Minute, h, tc.key, served)
		assert.Equal(t, tc.holds, v.Holds(), tc.key)
		if tc.holds {
			assert.Contains(t, v.Message(), "forgotten beyond the 4096 remembered")
		}
	}
	now = now.Add(time.Minute)
	_, over, at = d.snapshot(nil)
	assert.False(t, judgeDeparted(nil, over, at, time.Minute, h, "team-a/chat", served).Holds(), "the hold ends with the grace")

	d.returned(state("a-3", teamA))
	list, _, _ = d.snapshot(nil)
	assert.Len(t, list, 1, "a-2 is past its grace but still named")
	now = now.Add(departedNamed)
	list, _, _ = d.snapshot(nil)
	assert.Empty(t, list, "forgotten departedNamed past its grace")
}

// The grace's end is timer-driven: with no other event, the map it held is named to the
// pipeline, and the timer stops with the server.
func TestDepartedGraceEndRequeues(t *testing.T) {
	d := newDepartures(50*time.Millisecond, nil)
	ended := make(chan struct{}, 4)
	d.onEnd = func() { ended <- struct{}{} }
	d.add(ClientState{NodeID: "n", Stream: "sotw-1"})
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the grace's end was not signalled")
	}
	list, _, now := d.snapshot(nil)
	require.Len(t, list, 1)
	assert.False(t, now.Before(list[0].Until))
	d.stop()
	d.add(ClientState{NodeID: "m", Stream: "sotw-2"})
	list, _, _ = d.snapshot(nil)
	assert.Len(t, list, 1, "nothing departs after stop")
	d.mu.Lock()
	assert.Nil(t, d.timer)
	d.mu.Unlock()
}

// The stuck maps of the chaos run with a real gateway (issue 46): an Envoy whose stream to
// the leader went away came back to another replica and ACKed the new content there, yet
// the leader held the map for its departed stream until --xds-departed-grace ran out (up to
// 39s "stuck"), since only a return to the same replica forgot it. Now each replica's
// report lists the clients that arrived there within the grace (replicas.Report.Arrived,
// by ClientTag); a departed stream whose client a counted peer lists holds nothing any
// more, the peer counting it, and the news names the maps it held. A peer that lists
// another client changes nothing.
func TestDepartedClientBackAtAnotherReplica(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var peers []replicas.Report
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, DepartedGrace: time.Minute, Now: clock,
		Peers: func() []replicas.Report { mu.Lock(); defer mu.Unlock(); return peers }}, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx := serveSink(t, s)
	endpoints := []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}
	undrained, drained := chatPlan(t, endpoints, false), chatPlan(t, endpoints, true)
	apply := func(p *model.Plan) model.Confirmation {
		t.Helper()
		c, err := s.Apply(ctx, p, model.Standing{})
		require.NoError(t, err)
		return c
	}
	setPeer := func(arrived ...string) {
		mu.Lock()
		defer mu.Unlock()
		s.mu.Lock()
		digest := s.served[drained.Key().String()].Digest()
		s.mu.Unlock()
		// pub-b serves the drained content, and its one relevant client ACKed it.
		peers = []replicas.Report{{Identity: "pub-b", Clients: 1, Arrived: arrived,
			Maps: []replicas.Map{{Key: drained.Key().String(), Digest: digest, Relevant: 1, Acked: 1}}}}
	}
	serveNow(t, s, undrained)
	envoy := dialDeparted(t, s, "envoy-1")
	require.Eventually(t, func() bool { return s.server.Tracker().Consumed(FlavourEnvoy) }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.loop.rebuild(ctx))
	require.Eventually(t, func() bool { envoy.ackAll(t); return apply(undrained).State == model.InPlace }, 10*time.Second, time.Millisecond)
	tag := replicas.ClientTag("", "envoy-1")
	assert.Equal(t, []string{tag}, s.Replica().Report(nil).Arrived, "a client identified within the grace is listed")

	serveNow(t, s, drained)
	require.NoError(t, envoy.conn.Close()) // it leaves this replica holding the undrained weights
	require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == 0 }, 10*time.Second, time.Millisecond)
	s.Updated()
	setPeer(replicas.ClientTag("", "envoy-2")) // another client arrived there
	s.Replica().PeerArrived([]string{replicas.ClientTag("", "envoy-2")})
	assert.Empty(t, s.Updated(), "no client remembered here arrived there")
	c := apply(drained)
	assert.Equal(t, model.Pending, c.State, "envoy-1 may still route by the undrained weights: %s", c.Message)
	assert.Contains(t, c.Message, `node "envoy-1" stream sotw-`)
	rep := s.Replica().Report([]string{drained.Key().String()})
	require.Len(t, rep.Maps, 1)
	assert.Equal(t, 1, rep.Maps[0].Relevant, "the follower's report holds it too")
	assert.Empty(t, rep.Arrived, "a departed client is not listed")

	setPeer(tag) // envoy-1 came back at pub-b, which counts it: it ACKed the drain there
	s.Replica().PeerArrived([]string{tag})
	assert.Contains(t, s.Updated(), drained.Key(), "the maps it held are judged again")
	c = apply(drained)
	assert.Equal(t, model.InPlace, c.State, c.Message)
	assert.NotContains(t, c.Message, "departed")
	rep = s.Replica().Report([]string{drained.Key().String()})
	require.Len(t, rep.Maps, 1)
	assert.Zero(t, rep.Maps[0].Relevant, "nor does the report hold it")

	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	again := dialDeparted(t, s, "envoy-3")
	t.Cleanup(func() { _ = again.conn.Close() })
	require.Eventually(t, func() bool { return len(s.server.Tracker().Clients()) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{replicas.ClientTag("", "envoy-3")}, s.Replica().Report(nil).Arrived)
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	assert.Empty(t, s.Replica().Report(nil).Arrived, "past the grace an arrival is not news")
}
