package xds

import (
	"context"
	"fmt"
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

	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// Issue 25, item 4: 2,000 maps of namespace aaa whose plans fail (a missing service,
// never Published) and bbb/chat, served and ACKed by this replica's Envoy. The report,
// encoded for the Lease and read back by the leader, releases bbb/chat; on main it listed
// every map not True, sorted, first 2,000 (all of aaa) and held every later namespace.
func TestReportBrokenMapsDoNotHoldOtherNamespaces(t *testing.T) {
	var broken []string // never given: their plans fail in the pipeline
	for i := range 2000 {
		broken = append(broken, fmt.Sprintf("aaa/map-%04d", i))
	}
	chat := chatPlan(t, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, false)
	chat.Namespace = "bbb"
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	s.Serve(chat)
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := s.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); wait() })

	// An Envoy subscribes to every type and ACKs what it is sent.
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	recv := xdstest.Stream(ads.Recv)
	node := &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}
	exchange := func(typ string, names ...string) {
		t.Helper()
		require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names}))
		resp, ok := xdstest.Next(recv, 20*time.Second)
		require.True(t, ok, "a response for %s", typ)
		require.Equal(t, typ, resp.GetTypeUrl())
		require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: names}))
	}
	exchange(resource.ClusterType)
	exchange(resource.ListenerType)
	exchange(resource.RouteType, DefaultEnvoyOptions.RouteConfigName)

	keys := append(slicesClone(broken), chat.Key().String())
	digest := view(chat).Digest()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := replicas.Encode(s.Replica().Report(keys))
		require.NoError(c, err)
		r, err := replicas.Decode(v)
		require.NoError(c, err)
		r.Identity = "pub-b"
		verdict := replicas.Judge([]replicas.Report{r}, chat.Key().String(), digest, false)
		assert.True(c, verdict.Done, verdict.Message)
		assert.Equal(c, 1, verdict.Total, "the Envoy is relevant to bbb/chat")
	}, 20*time.Second, 10*time.Millisecond)
}

func slicesClone(in []string) []string { return append([]string(nil), in...) }
