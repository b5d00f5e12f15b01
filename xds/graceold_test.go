package xds

import (
	"context"
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

// The reconnect grace waives only clients still reconnecting or resubscribing. Within the
// window, content confirmed before the start stays InPlace while a relevant client has
// subscribed but neither declared nor ACKed anything yet; a client that reconnects
// declaring an older version (state-of-the-world version_info, delta
// initial_resource_versions) routes by that older content and holds the map Pending
// until it ACKs the current one. Real server, raw ADS client streams that do not ACK.
func TestReconnectGraceDoesNotWaiveOldContent(t *testing.T) {
	endpoints := []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}
	node := &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}
	// start serves prod/chat, confirmed before the start, within a long grace window,
	// and returns the sink and an ADS client of it.
	start := func(t *testing.T) (*Sink, discoveryv3.AggregatedDiscoveryServiceClient, *model.Plan) {
		s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, ReconnectGrace: time.Hour}, zaptest.NewLogger(t))
		require.NoError(t, err)
		s.Serve(chatPlan(t, endpoints, false))
		ctx, cancel := context.WithCancel(context.Background())
		wait, err := s.Start(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { cancel(); wait() })
		conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		plan := chatPlan(t, endpoints, false)
		return s, discoveryv3.NewAggregatedDiscoveryServiceClient(conn), plan
	}
	apply := func(t *testing.T, s *Sink, p *model.Plan) model.Confirmation {
		t.Helper()
		c, err := s.Apply(t.Context(), p, model.Standing{PublishedBefore: true, Confirmed: true}) // confirmed before the start
		require.NoError(t, err)
		return c
	}

	t.Run("resubscribing is waived", func(t *testing.T) {
		s, ads, plan := start(t)
		stream, err := ads.StreamAggregatedResources(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
		_, ok := xdstest.Next(xdstest.Stream(stream.Recv), 20*time.Second)
		require.True(t, ok, "the current clusters are sent")
		c := apply(t, s, plan)
		assert.Equal(t, model.InPlace, c.State, c.Message)
		assert.Contains(t, c.Message, "content confirmed before the start")
	})

	t.Run("state of the world declaring an old version holds the map", func(t *testing.T) {
		s, ads, plan := start(t)
		stream, err := ads.StreamAggregatedResources(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, VersionInfo: "0123456789abcdef"}))
		_, ok := xdstest.Next(xdstest.Stream(stream.Recv), 20*time.Second)
		require.True(t, ok, "the current clusters are sent")
		// The declaration is judged as the flavour is first served, which may come just
		// after the response is sent.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			c := apply(t, s, plan)
			assert.Equal(ct, model.Pending, c.State, c.Message)
			assert.Contains(ct, c.Message, "1 relevant xds client(s) hold older content")
		}, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("delta declaring old resource versions holds the map", func(t *testing.T) {
		s, ads, plan := start(t)
		stream, err := ads.DeltaAggregatedResources(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType,
			InitialResourceVersions: map[string]string{
				ClusterName("prod", "chat", "worker-a"): "0123456789abcdef",
				ClusterName("prod", "chat", "worker-b"): "0123456789abcdef",
			}}))
		_, ok := xdstest.Next(xdstest.Stream(stream.Recv), 20*time.Second)
		require.True(t, ok, "the current clusters are sent")
		// The declaration is judged as the flavour is first served, which may come just
		// after the response is sent.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			c := apply(t, s, plan)
			assert.Equal(ct, model.Pending, c.State, c.Message)
			assert.Contains(ct, c.Message, "1 relevant xds client(s) hold older content")
		}, 10*time.Second, 10*time.Millisecond)
	})
}
