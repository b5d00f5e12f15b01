package xds_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/xds"
)

func nameList(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// D4: a stream subscribes to at most MaxNames names per type. A state-of-the-world request
// naming more, or a delta request after which the subscription would hold more, ends the
// stream with ResourceExhausted naming the field and the flag; a subscription at the limit
// is kept.
func TestSubscriptionLimit(t *testing.T) {
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Limits: xds.Limits{MaxNames: 3}})
	cb := s.Tracker().Callbacks()
	ctx := context.Background()
	node := &corev3.Node{Id: "a", UserAgentName: "gRPC Go"}

	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNames: nameList("c", 3)}))
	err := cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.ListenerType, ResourceNames: nameList("l", 4)})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "resource_names: 4 names, at most 3 per type and stream (--xds-max-names)")

	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: nameList("c", 2)}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"c-0", "x"}}))
	err = cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"y"}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "the stream would subscribe to 4 names of Cluster, at most 3")
	var delta xds.ClientState
	for _, c := range s.Tracker().Clients() {
		if c.Stream == "delta-1" {
			delta = c
		}
	}
	assert.Len(t, delta.Subscribed[resource.ClusterType].Names, 3, "the refused request changed nothing")

	err = cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{string(make([]byte, 2000))}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "a name of 2,000 bytes: %v", err)
}

// A delta stream's initial_resource_versions are bounded by the request's size, not by
// MaxNames: an Envoy reconnecting declares every cluster it holds by wildcard, the whole
// fleet's (80,000 at 10,000 maps of 8 clusters), and was refused with MaxNames (10,000)
// until 2026-12-08, so it could not reconnect to a restarted publisher. A request above
// MaxRequestBytes ends its stream with ResourceExhausted.
func TestDeclarationBoundedBySize(t *testing.T) {
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Limits: xds.Limits{MaxNames: 3, MaxRequestBytes: 64 << 10}})
	ads, _ := xds.ServeLoopback(t, s)
	node := &corev3.Node{Id: "envoy-1"}

	declared := map[string]string{}
	for _, n := range nameList("bench/svc-00001/worker", 1000) {
		declared[n] = "0123456789abcdef"
	}
	st, err := ads.DeltaAggregatedResources(t.Context())
	require.NoError(t, err)
	require.NoError(t, st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, InitialResourceVersions: declared}))
	require.Eventually(t, func() bool {
		for _, c := range s.Tracker().Clients() {
			if c.NodeID == "envoy-1" && c.Subscribed[resource.ClusterType].Wildcard {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "1,000 declared names, above MaxNames 3: the stream is kept")

	big, err := ads.DeltaAggregatedResources(t.Context())
	require.NoError(t, err)
	for _, n := range nameList("bench/svc-00002/worker", 3000) {
		declared[n] = "0123456789abcdef"
	}
	require.NoError(t, big.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "envoy-2"}, TypeUrl: resource.ClusterType, InitialResourceVersions: declared}))
	_, err = big.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "a request above 64 KiB: %v", err)
}

// D4: a client (here its IP address: no TLS) has at most MaxConnectionsPerClient
// connections with open streams; a stream on one more is refused with ResourceExhausted,
// and is accepted once a connection's streams ended. Streams on a counted connection are
// not refused.
func TestConnectionsPerClientLimit(t *testing.T) {
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Limits: xds.Limits{MaxConnectionsPerClient: 1}})
	ctx := t.Context()
	_, addr := xds.ServeLoopback(t, s)
	dial := func() discoveryv3.AggregatedDiscoveryServiceClient { return xds.DialADS(t, addr) }
	open := func(ads discoveryv3.AggregatedDiscoveryServiceClient, id string) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, context.CancelFunc) {
		sctx, stop := context.WithCancel(ctx)
		st, err := ads.StreamAggregatedResources(sctx)
		require.NoError(t, err)
		// A refused stream may end before the request is sent (io.EOF): its status comes
		// with Recv; the accepted ones are counted by the tracker below.
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: resource.ClusterType}); !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		return st, stop
	}
	streams := func() int { return len(s.Tracker().Clients()) }

	first := dial()
	_, stop1 := open(first, "a")
	_, stop2 := open(first, "b")
	require.Eventually(t, func() bool { return streams() == 2 }, 10*time.Second, time.Millisecond, "two streams on one connection")

	refused, stop3 := open(dial(), "c")
	defer stop3()
	_, err := refused.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "client address 127.0.0.1 has 1 connections with open streams, at most 1 (--xds-max-connections-per-client)")

	stop1()
	stop2()
	require.Eventually(t, func() bool { return streams() == 0 }, 10*time.Second, time.Millisecond)
	_, stop4 := open(dial(), "d")
	defer stop4()
	require.Eventually(t, func() bool { return streams() == 1 }, 10*time.Second, time.Millisecond, "accepted once the other connection has no stream")
}

// D4: at most MaxStreamsPerConnection streams of one connection are served at once; the
// client holds the others until one ends.
func TestStreamsPerConnectionLimit(t *testing.T) {
	s := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Limits: xds.Limits{MaxStreamsPerConnection: 2}})
	ctx := t.Context()
	ads, _ := xds.ServeLoopback(t, s)

	stops := make([]context.CancelFunc, 3)
	opened := make(chan int, 3)
	for i := range 3 {
		sctx, stop := context.WithCancel(ctx)
		stops[i] = stop
		go func() {
			st, err := ads.StreamAggregatedResources(sctx) // the third waits for the server's quota
			if err == nil && st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: fmt.Sprint(i)}, TypeUrl: resource.ClusterType}) == nil {
				opened <- i
			}
		}()
	}
	streams := func() int { return len(s.Tracker().Clients()) }
	require.Eventually(t, func() bool { return len(opened) == 2 && streams() == 2 }, 10*time.Second, time.Millisecond)
	never := assert.Never(t, func() bool { return streams() > 2 }, 300*time.Millisecond, 10*time.Millisecond, "a third stream is not served")
	require.True(t, never)
	stops[<-opened]()
	require.Eventually(t, func() bool { return len(opened) == 2 && streams() == 2 }, 10*time.Second, time.Millisecond, "the third is served once one ended")
	for _, stop := range stops {
		stop()
	}
}

// BenchmarkDeltaRequestAtSubscription measures one delta request (an ACK-like request
// naming nothing, and one that subscribes one more name) on a stream that subscribes to n
// names, through the server's request callback. The work under the tracker's lock does
// not walk the subscription for a request that does not change it; one that does copies
// it, at most --xds-max-names names.
func BenchmarkDeltaRequestAtSubscription(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, kind := range []string{"ack", "subscribe-one"} {
			b.Run(fmt.Sprintf("%s/names=%d", kind, n), func(b *testing.B) {
				s := xds.NewServer(xds.ServerConfig{Limits: xds.Limits{MaxNames: 2 * n}})
				cb := s.Tracker().Callbacks()
				require.NoError(b, cb.OnDeltaStreamOpen(context.Background(), 1, resource.AnyType))
				require.NoError(b, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.ClusterType,
					ResourceNamesSubscribe: nameList("c", n)}))
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType}
					if kind == "subscribe-one" {
						if i%2 == 0 {
							req.ResourceNamesSubscribe = []string{"extra"}
						} else {
							req.ResourceNamesUnsubscribe = []string{"extra"}
						}
					}
					if err := cb.OnStreamDeltaRequest(1, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkLockWaitDuringSubscribe measures what one stream's subscription changes cost
// every other user of the tracker's lock: the time of a Demand call (it takes the lock)
// while another goroutine sends delta requests that each subscribe or unsubscribe one name
// on a stream subscribed to n names.
func BenchmarkLockWaitDuringSubscribe(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			s := xds.NewServer(xds.ServerConfig{Limits: xds.Limits{MaxNames: 2 * n}})
			tr := s.Tracker()
			cb := tr.Callbacks()
			require.NoError(b, cb.OnDeltaStreamOpen(context.Background(), 1, resource.AnyType))
			require.NoError(b, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.ClusterType,
				ResourceNamesSubscribe: nameList("c", n)}))
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"extra"}}
					if i%2 == 1 {
						req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResourceNamesUnsubscribe: []string{"extra"}}
					}
					_ = cb.OnStreamDeltaRequest(1, req)
				}
			}()
			b.ResetTimer()
			for b.Loop() {
				tr.Demand(xds.FlavourGRPC)
			}
			b.StopTimer()
			close(stop)
			<-done
		})
	}
}
