package xds

import (
	"context"
	"net"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// Decoded is r with the route configuration and clusters a Translator holds encoded (its
// Envoy flavour) decoded into messages; r as it is otherwise.
func Decoded(t testing.TB, r Resources) Resources {
	t.Helper()
	if r.envoy == nil {
		return r
	}
	b, err := (&envoyRoute{shell: r.envoy.route, vhosts: r.envoy.vhosts}).encoding()
	require.NoError(t, err)
	rc := &routev3.RouteConfiguration{}
	require.NoError(t, proto.Unmarshal(b, rc))
	out := Resources{Listeners: r.Listeners, Routes: []*routev3.RouteConfiguration{rc}}
	for _, m := range r.envoy.clusters {
		c := &clusterv3.Cluster{}
		require.NoError(t, proto.Unmarshal(m.enc, c))
		out.Clusters = append(out.Clusters, c)
	}
	return out
}

// HeldVirtualHosts and HeldClusters are the encoded virtual hosts and clusters of a
// Translator's Envoy flavour, to compare by identity.
func HeldVirtualHosts(r Resources) []any { return heldAny(r.envoy.vhosts) }

// HeldClusters: see HeldVirtualHosts.
func HeldClusters(r Resources) []any { return heldAny(r.envoy.clusters) }

func heldAny(ms []*encodedMsg) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// ServeLoopback serves s on a loopback port until the test ends (then checks Serve
// returned no error) and returns an ADS client over a plaintext connection to it, and
// the port's address for more connections.
func ServeLoopback(t *testing.T, s *Server) (discoveryv3.AggregatedDiscoveryServiceClient, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	return DialADS(t, lis.Addr().String()), lis.Addr().String()
}

// DialADS returns an ADS client over a new plaintext connection to addr, closed when the
// test ends.
func DialADS(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}
