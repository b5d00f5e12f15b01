package xds_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/xds"
)

// go-control-plane numbers state-of-the-world and delta streams with separate counters, so a
// mixed fleet has a SotW stream and a delta stream with the same id: both are tracked.
func TestTrackerKeepsSotWAndDeltaStreamsWithTheSameIDApart(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	ctx := context.Background()
	require.NoError(t, cb.OnStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sotw"}, TypeUrl: resource.RouteType}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "delta"}, TypeUrl: resource.RouteType}))

	cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", VersionInfo: "v-sotw"})
	cb.OnStreamDeltaResponse(1, nil, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", SystemVersionInfo: "v-delta"})
	require.NoError(t, cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: "1", VersionInfo: "v-sotw"}))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.RouteType, ResponseNonce: "1"}))

	clients := tr.Clients()
	require.Len(t, clients, 2)
	assert.Equal(t, "delta", clients[0].NodeID)
	assert.Equal(t, "v-delta", clients[0].Acked[resource.RouteType])
	assert.Equal(t, "sotw", clients[1].NodeID)
	assert.Equal(t, "v-sotw", clients[1].Acked[resource.RouteType])

	cb.OnStreamClosed(1, nil)
	require.Len(t, tr.Clients(), 1, "closing the SotW stream leaves the delta stream")
	assert.Equal(t, "delta", tr.Clients()[0].NodeID)
}

// Membership moves when a client makes itself known or a known stream closes, not on ACKs.
func TestTrackerMembership(t *testing.T) {
	tr := xds.NewTracker(nil)
	cb := tr.Callbacks()
	ctx := context.Background()
	m0 := tr.Membership()
	require.NoError(t, cb.OnDeltaStreamOpen(ctx, 1, resource.AnyType))
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.RouteType}))
	m1 := tr.Membership()
	assert.NotEqual(t, m0, m1, "a client made itself known")

	cb.OnStreamDeltaResponse(1, nil, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: resource.RouteType, Nonce: "1", SystemVersionInfo: "v1"})
	require.NoError(t, cb.OnStreamDeltaRequest(1, &discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: resource.RouteType, ResponseNonce: "1"}))
	assert.Equal(t, m1, tr.Membership(), "an ACK")

	cb.OnDeltaStreamClosed(1, nil)
	assert.NotEqual(t, m1, tr.Membership(), "a known stream closed")
}
