package xds

import (
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
	"github.com/trafficmap/publisher/xds/xdstest"
)

// The fleet benchmark's finding at N = 10,000 (issue 29), end to end: a delta Envoy stream
// (listeners and clusters by wildcard, the one route configuration by name) that has not
// yet answered the route configuration a drain of embed changed still holds chat's
// content, so chat stays InPlace meanwhile (it went Pending, Published False, for every map
// judged in that window); the drained embed is Pending until the stream ACKs it.
func TestDeltaEnvoyAnsweringAnotherMapsChangeKeepsMapsPublished(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx := serveSink(t, s)
	endpoints := []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}
	chat := chatPlan(t, endpoints, false)
	embedPlan := func(drained bool) *model.Plan {
		p := chatPlan(t, endpoints, drained)
		p.Name, p.Service, p.Hostnames = "embed", "embed", []string{"embed.example.com"}
		return p
	}
	serveNow(t, s, chat)
	serveNow(t, s, embedPlan(false))

	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	node := &corev3.Node{Id: "envoy"}
	for typ, names := range map[string][]string{resource.ListenerType: nil, resource.ClusterType: nil, resource.RouteType: {s.envoy.RouteConfigName}} {
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: names}))
	}
	responses := xdstest.Stream(stream.Recv)
	ack := func(r *discoveryv3.DeltaDiscoveryResponse) {
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}))
	}
	state := func(p *model.Plan) model.State {
		c, err := s.Apply(ctx, p, model.Standing{})
		require.NoError(t, err)
		return c.State
	}
	require.Eventually(t, func() bool { return s.server.Tracker().Consumed(FlavourEnvoy) }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.loop.rebuild(ctx)) // builds the Envoy flavour for its first client
	require.Eventually(t, func() bool {
		for {
			r, ok := xdstest.Next(responses, 10*time.Millisecond)
			if !ok {
				break
			}
			ack(r)
		}
		return state(chat) == model.InPlace && state(embedPlan(false)) == model.InPlace
	}, 10*time.Second, time.Millisecond)

	drained := embedPlan(true)
	serveNow(t, s, drained)
	var route *discoveryv3.DeltaDiscoveryResponse
	for route == nil {
		r, ok := xdstest.Next(responses, 10*time.Second)
		require.True(t, ok, "the drain's route configuration")
		if r.GetTypeUrl() == resource.RouteType {
			route = r // not answered yet
			continue
		}
		ack(r)
	}
	assert.Equal(t, model.InPlace, state(chat), "the stream holds chat's content in the route configuration it has and in the one it was sent")
	assert.Equal(t, model.Pending, state(drained), "the stream may still route embed by its content before the drain")

	ack(route)
	require.Eventually(t, func() bool { return state(drained) == model.InPlace }, 10*time.Second, time.Millisecond)
	assert.Equal(t, model.InPlace, state(chat))
}

// The sink's history follows its tracker: a version a connected client holds is kept
// however many versions come after it (TestStalledClientKeepsTheMapsItHoldsConfirmed).
func TestSinkHistoryFollowsItsClients(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0"}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { s.loop.queue.ShutDown(); _ = s.listener.Close() })
	s.history.mu.Lock()
	defer s.history.mu.Unlock()
	assert.NotNil(t, s.history.held)
}
