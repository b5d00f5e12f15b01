package xds_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// A fenced server ends every stream (a real grpc-go client's among them, which keeps its
// last configuration and goes on reaching its backends), refuses new streams with
// Unavailable while fenced, and accepts them again once unfenced.
func TestFenceClosesAndRefusesStreams(t *testing.T) {
	server := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })

	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1}}})
	require.NoError(t, err)
	r, err := xds.TranslateGRPC([]xds.Service{{Namespace: "prod", Name: "chat", Service: "chat", Result: res}})
	require.NoError(t, err)
	_, err = server.SetResources(ctx, xds.FlavourGRPC, r)
	require.NoError(t, err)

	client := xdstest.GRPCClient(t, lis.Addr().String(), "grpc-client-1", "chat.prod")
	call := func() (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		resp, err := client.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		return resp.GetHostname(), err
	}
	host, err := call()
	require.NoError(t, err)
	require.Equal(t, "worker-a", host)
	require.Len(t, server.Tracker().Clients(), 1)

	server.Fence("report lease not renewed")
	assert.True(t, server.Fenced())
	require.Eventually(t, func() bool { return len(server.Tracker().Clients()) == 0 }, 10*time.Second, time.Millisecond,
		"the client's stream is closed")
	host, err = call()
	require.NoError(t, err, "the client keeps its last configuration")
	assert.Equal(t, "worker-a", host)

	raw, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(raw).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	_ = ads.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-1"}, TypeUrl: resource.ClusterType})
	_, err = ads.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "a new stream is refused while fenced: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "report lease not renewed")
	assert.Empty(t, server.Tracker().Clients())

	server.Unfence()
	assert.False(t, server.Fenced())
	require.Eventually(t, func() bool { return len(server.Tracker().Clients()) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the client reconnects once unfenced")
}
