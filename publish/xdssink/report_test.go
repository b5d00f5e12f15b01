package xdssink

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// brokenPlans are memPlans plus maps whose plan fails (a missing service).
type brokenPlans struct {
	*memPlans
	broken []string
}

func (b *brokenPlans) Keys() []string { return append(b.memPlans.Keys(), b.broken...) }

func (b *brokenPlans) Plan(namespace, name string) (*model.Plan, bool, error) {
	if strings.HasPrefix(namespace+"/"+name, "aaa/") {
		return nil, true, errors.New("inferenceservice not found")
	}
	return b.memPlans.Plan(namespace, name)
}

// Issue 25, item 4: 2,000 maps of namespace aaa whose plans fail (a missing service,
// never Published) and bbb/chat, served and ACKed by this replica's Envoy. The report,
// encoded for the Lease and read back by the leader, releases bbb/chat; on main it listed
// every map not True, sorted, first 2,000 (all of aaa) and held every later namespace.
func TestReportBrokenMapsDoNotHoldOtherNamespaces(t *testing.T) {
	plans := &brokenPlans{memPlans: &memPlans{plans: map[string]*model.Plan{}}}
	for i := range 2000 {
		plans.broken = append(plans.broken, fmt.Sprintf("aaa/map-%04d", i))
	}
	chat := chatPlan(t, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, false)
	chat.Namespace = "bbb"
	plans.set(chat)
	s, err := New(Config{Address: "127.0.0.1:0", RequireAck: true, Plans: plans, Requeue: func(string, string) {}}, zaptest.NewLogger(t))
	require.NoError(t, err)
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
	exchange(resource.RouteType, xds.DefaultEnvoyOptions.RouteConfigName)

	keys := append(slicesClone(plans.broken), chat.Key().String())
	digest := view(chat).Digest()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := replicas.Encode(s.Report(keys))
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
