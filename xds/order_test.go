package xds

import (
	"context"
	"net"
	"slices"
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

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// set is one per-type snapshot SetResources set, with the names it served.
type set struct {
	typ   string
	names []string
}

// chatService is prod/chat with one equally weighted https entry per cluster.
func chatService(t *testing.T, hostnames []string, clusters ...string) Service {
	t.Helper()
	var entries []weights.Entry
	for _, c := range clusters {
		entries = append(entries, weights.Entry{Cluster: c, Endpoint: "https://chat." + c + ".example.com", Weight: 1})
	}
	res, err := weights.Compute(weights.Input{Entries: entries})
	require.NoError(t, err)
	return Service{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: hostnames, Result: res}
}

func grpcResources(t *testing.T, clusters ...string) Resources {
	t.Helper()
	r, err := TranslateGRPC([]Service{chatService(t, nil, clusters...)})
	require.NoError(t, err)
	return r
}

// Make before break: clusters a snapshot adds are set before the routes that use them;
// clusters it removes are removed only after the routes stop using them; a snapshot that
// does both first serves the union of the old and new clusters, then the routes, then the
// new clusters alone.
func TestSetResourcesMakeBeforeBreak(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	var sets []set
	srv.onSet = func(_ Flavour, typ, _ string, names []string) {
		slices.Sort(names)
		sets = append(sets, set{typ, names})
	}
	apply := func(clusters ...string) []set {
		sets = nil
		_, err := srv.SetResources(context.Background(), FlavourGRPC, grpcResources(t, clusters...))
		require.NoError(t, err)
		return sets
	}
	cds, rds := resource.ClusterType, resource.RouteType
	typesOf := func(sets []set) []string {
		var out []string
		for _, s := range sets {
			out = append(out, s.typ)
		}
		return out
	}

	first := apply("worker-a", "worker-b")
	assert.Equal(t, []string{cds, resource.ListenerType, rds}, typesOf(first), "first snapshot: clusters before the listener and route using them")

	added := apply("worker-a", "worker-b", "worker-c")
	assert.Equal(t, []set{
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-b", "prod/chat/worker-c"}},
		{rds, []string{"prod/chat"}},
	}, added, "a cluster is added before the route uses it")

	removed := apply("worker-a", "worker-c")
	assert.Equal(t, []set{
		{rds, []string{"prod/chat"}},
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-c"}},
	}, removed, "a cluster is removed after the route stops using it")

	both := apply("worker-c", "worker-d")
	assert.Equal(t, []set{
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-c", "prod/chat/worker-d"}},
		{rds, []string{"prod/chat"}},
		{cds, []string{"prod/chat/worker-c", "prod/chat/worker-d"}},
	}, both, "added and removed: the union first, the new clusters after the route")

	assert.Empty(t, apply("worker-c", "worker-d"), "the same content sets nothing")
}

// On the wire: a state-of-the-world ADS client watching clusters and routes is sent a
// change that removes a cluster as the route first, then the clusters, and a change that
// adds one as the clusters first, then the route.
func TestADSClientSeesMakeBeforeBreak(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	ctx, ads := serveADS(t, srv)
	_, err := srv.SetResources(ctx, FlavourGRPC, grpcResources(t, "worker-a", "worker-b"))
	require.NoError(t, err)

	node := &corev3.Node{Id: "grpc-1", UserAgentName: "gRPC Go"}
	stream, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	watched := map[string][]string{resource.ClusterType: nil, resource.RouteType: {"prod/chat"}}
	for _, typ := range []string{resource.ClusterType, resource.RouteType} {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: watched[typ]}))
	}
	// next receives n responses, ACKs each, and returns their types in order.
	next := func(n int) []string {
		var got []string
		for range n {
			r, ok := xdstest.Next(responses, 10*time.Second)
			require.True(t, ok)
			got = append(got, r.GetTypeUrl())
			require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: r.GetTypeUrl(),
				ResourceNames: watched[r.GetTypeUrl()], VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}))
		}
		return got
	}
	assert.ElementsMatch(t, []string{resource.ClusterType, resource.RouteType}, next(2))
	waitAcked := func() {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			clients := srv.Tracker().Clients()
			require.Len(c, clients, 1)
			for typ := range watched {
				assert.Equal(c, srv.cache.version(string(FlavourGRPC), typ), clients[0].Acked[typ])
			}
		}, 10*time.Second, 10*time.Millisecond)
	}
	waitAcked()

	_, err = srv.SetResources(ctx, FlavourGRPC, grpcResources(t, "worker-a"))
	require.NoError(t, err)
	assert.Equal(t, []string{resource.RouteType, resource.ClusterType}, next(2), "removed: the route first")
	waitAcked()

	_, err = srv.SetResources(ctx, FlavourGRPC, grpcResources(t, "worker-a", "worker-c"))
	require.NoError(t, err)
	assert.Equal(t, []string{resource.ClusterType, resource.RouteType}, next(2), "added: the clusters first")
}

// serveADS serves srv on a loopback port until the test ends and returns a context that
// lasts as long and an ADS client of it.
func serveADS(t *testing.T, srv *Server) (context.Context, discoveryv3.AggregatedDiscoveryServiceClient) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(); cancel(); <-done })
	return ctx, discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}
