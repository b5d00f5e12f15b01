package xds

import (
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A panic in a stream's handler (here the tracker's metrics hook, reached from the request
// callback with the tracker's lock held) ends that stream with Internal, is logged with
// structured fields and counted; the process and the tracker go on: a second stream on
// the same connection is tracked and ACKs.
func TestHandlerPanicEndsOnlyItsStream(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	s := NewServer(ServerConfig{Log: zap.New(core)})
	var panicked atomic.Bool
	observe := s.tracker.observe
	s.tracker.observe = func(typeURL string, nack bool) {
		if panicked.CompareAndSwap(false, true) {
			panic("boom\nwith a newline")
		}
		observe(typeURL, nack)
	}
	ctx := t.Context()
	ads, _ := ServeLoopback(t, s)
	ack := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.ClusterType, VersionInfo: "v1"}

	first, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, first.Send(ack))
	_, err = first.Recv()
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.metrics.panics))
	entries := logs.FilterMessage("xds handler panicked; its stream is closed, the server goes on").All()
	require.Len(t, entries, 1)
	fields := entries[0].ContextMap()
	assert.Equal(t, "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", fields["method"])
	assert.Equal(t, `"boom\nwith a newline"`, fields["panic"])
	assert.NotEmpty(t, fields["peer"])
	assert.NotEmpty(t, fields["stack"])

	second, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, second.Send(ack))
	require.Eventually(t, func() bool {
		clients := s.Tracker().Clients() // takes the tracker's lock: the panic released it
		return len(clients) == 1 && clients[0].Acked[resource.ClusterType] == "v1"
	}, 10*time.Second, time.Millisecond, "the second stream is tracked, the first is gone")
}
