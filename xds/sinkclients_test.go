package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// An ACK after which a waiting map still waits for another relevant client decides
// nothing, so it tells the pipeline nothing, and neither does the rebuild that served the
// map's new content before any client ACKed it; the map's last ACK does (one reconcile per
// decision, not one per client's ACK or per snapshot).
func TestOnlyDecidingACKsTellThePipeline(t *testing.T) {
	endpoints := []string{"https://chat.a.example.com", "https://chat.b.example.com"}
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	s.Serve(chatPlan(t, endpoints, false))
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := s.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); wait() })

	type envoy struct {
		node *corev3.Node
		ads  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
		recv <-chan *discoveryv3.DiscoveryResponse
	}
	next := func(e *envoy, typ string) *discoveryv3.DiscoveryResponse {
		t.Helper()
		resp, ok := xdstest.Next(e.recv, 20*time.Second)
		require.True(t, ok, "%s: a response for %s", e.node.GetId(), typ)
		require.Equal(t, typ, resp.GetTypeUrl())
		return resp
	}
	ack := func(e *envoy, resp *discoveryv3.DiscoveryResponse, names ...string) {
		t.Helper()
		require.NoError(t, e.ads.Send(&discoveryv3.DiscoveryRequest{Node: e.node, TypeUrl: resp.GetTypeUrl(),
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names}))
	}
	route := DefaultEnvoyOptions.RouteConfigName
	connect := func(id string) *envoy {
		t.Helper()
		conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		require.NoError(t, err)
		e := &envoy{node: &corev3.Node{Id: id, UserAgentName: "envoy"}, ads: ads, recv: xdstest.Stream(ads.Recv)}
		for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
			var names []string
			if typ == resource.RouteType {
				names = []string{route}
			}
			require.NoError(t, ads.Send(&discoveryv3.DiscoveryRequest{Node: e.node, TypeUrl: typ, ResourceNames: names}))
			ack(e, next(e, typ), names...)
		}
		return e
	}
	e1, e2 := connect("envoy-1"), connect("envoy-2")

	drained := chatPlan(t, endpoints, true)
	judge := func() model.Confirmation {
		t.Helper()
		c, err := s.Apply(ctx, drained, model.Standing{})
		require.NoError(t, err)
		return c
	}
	assert.Equal(t, model.Pending, judge().State, "the drain waits for both Envoys")
	r1, r2 := next(e1, resource.RouteType), next(e2, resource.RouteType) // the drain's route configuration
	key := drained.Key().String()
	told := func() bool {
		select {
		case <-s.Updates():
		default:
		}
		return slices.ContainsFunc(s.Updated(), func(k types.NamespacedName) bool { return k.String() == key })
	}
	require.Eventually(t, func() bool { return s.Carries(drained) }, 20*time.Second, time.Millisecond, "the drain is served")
	assert.Empty(t, s.watch.worthTelling([]string{key}), "served, no client ACKed yet: the rebuild tells nothing")
	acked := func(id, version string) bool {
		for _, c := range s.server.Tracker().Clients() {
			if c.NodeID == id && c.Acked[resource.RouteType] == version {
				return true
			}
		}
		return false
	}

	ack(e1, r1, route)
	require.Eventually(t, func() bool { return acked("envoy-1", r1.GetVersionInfo()) }, 20*time.Second, time.Millisecond)
	assert.Empty(t, s.watch.decided(s.server.Tracker().Clients(), []string{key}), "envoy-2 has not ACKed: nothing is decided")
	c := judge()
	assert.Equal(t, model.Pending, c.State, c.Message)
	assert.Equal(t, 1, c.Progress.Confirmed)

	told() // nothing left from before the last ACK
	ack(e2, r2, route)
	require.Eventually(t, func() bool { return acked("envoy-2", r2.GetVersionInfo()) }, 20*time.Second, time.Millisecond)
	assert.Equal(t, []string{key}, s.watch.decided(s.server.Tracker().Clients(), []string{key}), "the last ACK decides the map")
	require.Eventually(t, told, 20*time.Second, time.Millisecond, "the pipeline is told once the last relevant client ACKed")
	assert.Equal(t, model.InPlace, judge().State)
}

// The server's callback never blocks the stream that ACKed, whatever the number of changes
// before the watch looks again, and they ask for one look, not one each.
func TestClientChangesAskForOneLook(t *testing.T) {
	w := newClientWatch(nil)
	for range 1000 {
		w.signal()
	}
	assert.Len(t, w.kicks, 1)
}

// namedPlan is the map prod/name over one cluster, with the hostname name.example.com.
func namedPlan(t *testing.T, name string) *model.Plan {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-a", Endpoint: "https://" + name + ".a.example.com", Weight: 1}}})
	require.NoError(t, err)
	return &model.Plan{Namespace: "prod", Name: name, Service: name, Hostnames: []string{name + ".example.com"}, Result: res}
}

// A client's connect or disconnect reconciles again only the maps it is relevant to (issue
// 44, D9): a gRPC client of one map its map, not the fleet; a wildcard Envoy every map of
// its flavour. A map waiting for --xds-min-clients is reconciled again when a client
// connects (it may have enough now), and with --xds-min-clients a departure that leaves a
// map too few clients reconciles it. On c14dc7a every connect and disconnect reconciled
// every map. The watch's look is run by hand (the sink is not started) on the tracker's
// callbacks, so what one look tells is exactly what it added.
func TestClientConnectTellsOnlyItsMaps(t *testing.T) {
	grpcNode := func(id string) *corev3.Node { return &corev3.Node{Id: id, UserAgentName: "gRPC Go"} }
	newSink := func(t *testing.T, minClients int) (*Sink, serverv3.Callbacks, func() []string) {
		s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, MinClients: minClients}, zaptest.NewLogger(t))
		require.NoError(t, err)
		for _, name := range []string{"m0", "m1", "m2", "m3"} {
			s.Serve(namedPlan(t, name))
		}
		look := func() []string {
			s.watch.changed()
			var keys []string
			for _, k := range s.news.Updated() {
				keys = append(keys, k.String())
			}
			return keys
		}
		return s, s.server.Tracker().Callbacks(), look
	}
	open := func(t *testing.T, cb serverv3.Callbacks, id int64, node *corev3.Node, names ...string) {
		require.NoError(t, cb.OnStreamOpen(context.Background(), id, resource.AnyType))
		require.NoError(t, cb.OnStreamRequest(id, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType, ResourceNames: names}))
	}

	t.Run("by name", func(t *testing.T) {
		_, cb, look := newSink(t, 0)
		look()
		open(t, cb, 1, grpcNode("grpc-1"), "m1.prod")
		assert.Equal(t, []string{"prod/m1"}, look(), "a client of m1 connected")
		cb.OnStreamClosed(1, nil)
		assert.Equal(t, []string{"prod/m1"}, look(), "a client of m1 left")
		open(t, cb, 2, grpcNode("grpc-2"), "nothing.prod")
		assert.Empty(t, look(), "a client of no map")
	})
	t.Run("wildcard", func(t *testing.T) {
		_, cb, look := newSink(t, 0)
		look()
		open(t, cb, 1, &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"})
		assert.Equal(t, []string{"prod/m0", "prod/m1", "prod/m2", "prod/m3"}, look(), "a wildcard Envoy may hold every map with hostnames")
	})
	t.Run("min clients", func(t *testing.T) {
		s, cb, look := newSink(t, 2)
		c, err := s.Apply(context.Background(), namedPlan(t, "m3"), model.Standing{})
		require.NoError(t, err)
		require.Equal(t, model.Pending, c.State, c.Message)
		look()
		open(t, cb, 1, grpcNode("grpc-1"), "m1.prod")
		assert.Equal(t, []string{"prod/m1"}, look(), "m3 still waits for a second client")
		open(t, cb, 2, grpcNode("grpc-2"), "m2.prod")
		assert.Equal(t, []string{"prod/m2", "prod/m3"}, look(), "m3 has its two clients")
		cb.OnStreamClosed(2, nil)
		assert.Equal(t, []string{"prod/m0", "prod/m1", "prod/m2", "prod/m3"}, look(), "every map of the flavour has one client, fewer than 2")
	})
}
