package integration

import (
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// Issue 43, D7 end to end: the publisher as it runs (xDS sink, metrics) gets, on a raw ADS
// stream, the request that crashed it (empty nonce, a version, a type URL whose last
// segment has no dot). That stream ends with InvalidArgument naming the field; the process
// goes on: a real grpc-go xDS client is served and the map is Published by its ACK, no
// made-up type becomes a metric label, and the refusal is counted. D11: a NACK whose node
// id and text carry newlines and quotes reaches the map's condition escaped.
func TestXDSSurvivesHostileRequests(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 70},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 30},
	})
	pub := f.startPublisher(func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.HTTPAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkXDS}, "127.0.0.1:0", "127.0.0.1:0", true, 1
	})
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected")

	ads := adsClient(t, pub)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, typ := range []string{"type.googleapis.com/evil", "x", "type.googleapis.com/made.up.v3.Thing/evil"} {
		evil, err := ads.StreamAggregatedResources(ctx)
		require.NoError(t, err)
		require.NoError(t, evil.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "evil"}, TypeUrl: typ, VersionInfo: "v1"}))
		_, err = evil.Recv()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%q: %v", typ, err)
		assert.Contains(t, status.Convert(err).Message(), "type_url")
	}

	client := xdsClient(t, pub.xdsAddr, "grpc-client-1", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err, "the publisher still serves xDS")
	f.waitPublishedWith("ACKed by 1/1 clients")
	metrics := get(t, pub, "/metrics")
	assert.Contains(t, metrics, `trafficmap_publisher_xds_refused_requests_total{reason="unknown_type"} 3`)
	assert.Contains(t, metrics, `trafficmap_publisher_xds_handler_panics_total 0`)
	assert.NotContains(t, metrics, "evil")
	assert.NotContains(t, metrics, "Thing")

	// D11: a client's NACK, with newlines and quotes in its node id and text.
	nacker, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	in := xdstest.Stream(nacker.Recv)
	node := &corev3.Node{Id: "evil\nStatus: True\n\"" + strings.Repeat("n", 4000), UserAgentName: "gRPC Go"}
	listener := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener", ResourceNames: []string{"chat." + f.ns}}
	require.NoError(t, nacker.Send(listener))
	first, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok)
	listener.ResponseNonce, listener.ErrorDetail = first.GetNonce(), &rpcstatus.Status{Message: "bad\nReason: Published\n" + strings.Repeat("m", 4000)}
	require.NoError(t, nacker.Send(listener))
	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), `xds client node "evil\nStatus: True\n\"nnn`)
	msg := published(tm).Message
	assert.NotContains(t, msg, "\n")
	assert.Contains(t, msg, `(Listener): "bad\nReason: Published\nmmm`)
	assert.Less(t, len(msg), 1024, "node id and NACK text are shortened")
	for _, e := range f.events() {
		assert.NotContains(t, e.Message, "\n", "no raw newline in an Event")
	}
	_, err = call(client)
	assert.NoError(t, err)
}
