package xds

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trafficmap/publisher/xds/xdstest"
)

func envoyClusters(t *testing.T, clusters ...string) Resources {
	t.Helper()
	r, err := TranslateEnvoy(DefaultEnvoyOptions, []Service{chatService(t, []string{"chat.example.com"}, clusters...)})
	require.NoError(t, err)
	return r
}

// The NACK guard's check-then-park race: a new snapshot set after the guard found the
// rejected version still served, but before it parked the watch, still reaches the client.
// The test hooks run the set exactly in that gap.
func TestNackGuardSetBetweenCheckAndPark(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	var armed atomic.Bool
	releasing, released := make(chan struct{}), make(chan struct{})
	setDone := make(chan error, 1)
	// Hooks are installed before Serve starts, so the stream goroutines see them. In the gap
	// between the check and the park, a new snapshot is set and its release goes as far as
	// it can: to its end when the guard does not hold its lock across the gap.
	srv.cache.checked = func() {
		armed.Store(true)
		go func() {
			_, err := srv.SetResources(ctx, FlavourEnvoy, envoyClusters(t, "worker-a", "worker-b", "worker-c"))
			setDone <- err
		}()
		<-releasing
		if srv.cache.mu.TryLock() { // the gap is not guarded: let the release finish first
			srv.cache.mu.Unlock()
			<-released
		}
	}
	srv.cache.releasing = func(typeURL string) {
		if armed.Load() && typeURL == resource.ClusterType {
			close(releasing)
		}
	}
	srv.cache.released = func(typeURL string) {
		if armed.Load() && typeURL == resource.ClusterType {
			close(released)
		}
	}
	v1s, err := srv.SetResources(ctx, FlavourEnvoy, envoyClusters(t, "worker-a", "worker-b"))
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(); cancel(); <-done })

	node := &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
	first, ok := xdstest.Next(responses, 10*time.Second)
	require.True(t, ok)
	require.Equal(t, v1s[resource.ClusterType], first.GetVersionInfo())

	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType,
		ResponseNonce: first.GetNonce(), ErrorDetail: &status.Status{Message: "rejected by test"}}))
	second, ok := xdstest.Next(responses, 10*time.Second)
	require.True(t, ok, "the snapshot set between the check and the park is sent")
	assert.NotEqual(t, v1s[resource.ClusterType], second.GetVersionInfo())
	assert.Len(t, second.GetResources(), 3)
	require.NoError(t, <-setDone)
}
