package xds_test

import (
	"context"
	"google.golang.org/protobuf/types/known/durationpb"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// The NACK guard judges the NACKing stream by what that stream was sent, never by another
// stream of the same node id (pods started from one bootstrap share it). A stream that
// NACKs an old version while its peers already hold a newer one is sent the newer one, and
// its ACK of it counts. Run over two rounds with many peers: keyed by node id, the guard
// took a peer's version as the rejected one (whichever stream it met first) and parked the
// stream, which then never got the new version.
func TestNackGuardIsPerStream(t *testing.T) {
	srv, ads := startServer(t)
	res := envoyResources(t, 1)
	vs, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, res)
	require.NoError(t, err)
	version := vs[resource.ClusterType]

	type sotw struct {
		stream    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
		responses <-chan *discoveryv3.DiscoveryResponse
	}
	open := func() (sotw, *discoveryv3.DiscoveryResponse) {
		t.Helper()
		stream, err := ads.StreamAggregatedResources(context.Background())
		require.NoError(t, err)
		s := sotw{stream: stream, responses: xdstest.Stream(stream.Recv)}
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
		first := recv(t, s.responses, 10*time.Second)
		require.NotNil(t, first)
		return s, *first
	}
	ack := func(s sotw, resp *discoveryv3.DiscoveryResponse) {
		t.Helper()
		require.NoError(t, s.stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}))
	}
	const peers = 24
	var others []sotw
	for range peers {
		s, first := open()
		ack(s, first)
		others = append(others, s)
	}
	for round := range 2 {
		// The NACKing stream gets the current version and has not answered yet.
		nacking, first := open()
		require.Equal(t, version, first.GetVersionInfo())

		// A new version reaches every peer (each waits with an open watch).
		res := envoyResources(t, 1) // new messages: the server skips the ones it serves
		res.Clusters[0].ConnectTimeout = &durationpb.Duration{Seconds: int64(30 + round)}
		vs, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, res)
		require.NoError(t, err)
		next := vs[resource.ClusterType]
		require.NotEqual(t, version, next)
		for _, s := range others {
			got := recv(t, s.responses, 10*time.Second)
			require.NotNil(t, got)
			require.Equal(t, next, (*got).GetVersionInfo())
			ack(s, *got)
		}

		// The stream rejects the version it was sent: the new one is sent to it.
		require.NoError(t, nacking.stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
			ResponseNonce: first.GetNonce(), ErrorDetail: &status.Status{Message: "rejected by test"}}))
		got := recv(t, nacking.responses, 10*time.Second)
		require.NotNil(t, got, "round %d: the stream that NACKed %s is sent %s", round, version, next)
		assert.Equal(t, next, (*got).GetVersionInfo())
		ack(nacking, *got)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			acked := 0
			for _, cl := range srv.Tracker().Clients() {
				if cl.Acked[resource.ClusterType] == next {
					acked++
				}
			}
			assert.Equal(c, len(others)+1, acked, "every peer and the stream that NACKed hold %s", next)
		}, 10*time.Second, 10*time.Millisecond)
		others = append(others, nacking)
		version = next
	}
}
