package integration

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// xdsClient is a real proxyless gRPC client resolving target through the publisher's xDS
// server with grpc-go's xDS resolver.
func xdsClient(t *testing.T, server net.Addr, nodeID, target string) testgrpc.TestServiceClient {
	t.Helper()
	return testgrpc.NewTestServiceClient(xdsConn(t, server, nodeID, target))
}

// xdsConn is xdsClient's channel, with its own xDS client (and so its own ADS stream); it
// subscribes once it connects (on the first RPC or Connect).
func xdsConn(t *testing.T, server net.Addr, nodeID, target string) *grpc.ClientConn {
	t.Helper()
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting(grpcBootstrap(t, server, nodeID))
	require.NoError(t, err)
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// grpcBootstrap is the repository's gRPC bootstrap, examples/bootstrap/grpc-bootstrap.json,
// as a user would deploy it, with its server address and node id replaced.
func grpcBootstrap(t *testing.T, server net.Addr, nodeID string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "bootstrap", "grpc-bootstrap.json"))
	require.NoError(t, err)
	var b map[string]any
	require.NoError(t, json.Unmarshal(raw, &b))
	servers, _ := b["xds_servers"].([]any)
	require.Len(t, servers, 1)
	servers[0].(map[string]any)["server_uri"] = server.String()
	b["node"].(map[string]any)["id"] = nodeID
	out, err := json.Marshal(b)
	require.NoError(t, err)
	return out
}

// allDrainedGRPCMessage is the status message a grpc-go client with node id nodeID gets for
// an RPC to a map with no positive weight, as docs/concepts/xds.md ("Drained and empty
// maps") names it.
func allDrainedGRPCMessage(nodeID string) string {
	return "[xDS node id: " + nodeID + "]: rpc error: code = Unavailable desc = matched route does not have a supported route action type"
}

func call(client testgrpc.TestServiceClient) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	return resp.GetHostname(), err
}

func spread(t *testing.T, client testgrpc.TestServiceClient, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		host, err := call(client)
		require.NoError(t, err)
		got[host]++
	}
	return got
}

// routeVersion waits until the publisher's one xDS client has ACKed a route configuration
// with no NACK, and returns that version.
func routeVersion(t *testing.T, r *runningPublisher) string {
	t.Helper()
	var v string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := r.pub.XDSClients()
		require.Len(c, clients, 1)
		assert.Empty(c, clients[0].Nacked)
		v = clients[0].Acked[resource.RouteType]
		assert.NotEmpty(c, v)
	}, waitTimeout, tick)
	return v
}

// The publisher as a standalone xDS endpoint (no HTTPRoute sink) for a real proxyless gRPC
// client: Published waits for the client's ACK of the drained weights, a drain moves every
// later RPC, draining everything gives UNAVAILABLE, and a publisher restart neither
// interrupts RPCs nor sends the client a new version.
func TestXDSProxylessGRPCClient(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 70},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 30},
	})
	xdsOnly := func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkXDS}, "127.0.0.1:0", true, 1
	}
	pub := f.startPublisher(xdsOnly)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected, --xds-min-clients is 1")

	client := xdsClient(t, pub.xdsAddr, "grpc-client-1", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	tm := f.waitPublishedWith("ACKed by 1/1 clients")
	assert.Nil(t, tm.Status.GatewayRef, "no HTTPRoute sink")
	// 70/30 within a chi-square test at alpha 1e-6 (1 degree of freedom: critical value 23.93).
	const n = 2000
	got := spread(t, client, n)
	chi2 := 0.0
	for cluster, share := range map[string]float64{"worker-a": 0.7, "worker-b": 0.3} {
		d := float64(got[cluster]) - share*n
		chi2 += d * d / (share * n)
	}
	assert.Less(t, chi2, 23.93, "observed %v", got)

	// The seed's drain: Published False until the client ACKed, then every RPC to worker-b.
	w := f.watchPublished()
	f.drain(seedDrain)
	f.waitPublishedWith("ACKed by 1/1 clients; weights worker-a=0 (drained by maintenance-a), worker-b=30")
	requireFalseBeforeTrue(t, w, tm.Generation)
	assert.Equal(t, map[string]int{"worker-b": 100}, spread(t, client, 100))

	// Draining everything: the route is a fixed response (direct_response), which grpc-go
	// ACKs but cannot serve: every RPC fails with UNAVAILABLE and grpc-go's own text, as
	// docs/concepts/xds.md names it (issue 44: not the response body's "no routable cluster").
	f.drain(`{"all-a":{"cluster":"worker-a","reason":"dc move"},"all-b":{"cluster":"worker-b","reason":"dc move"}}`)
	f.waitPublishedWith("every effective weight is 0")
	_, err = call(client)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Equal(t, allDrainedGRPCMessage("grpc-client-1"), status.Convert(err).Message())

	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=30")

	// Restart: RPCs go on while the publisher is away (the client keeps its configuration),
	// and the new process serves the same content under the same version.
	acked := routeVersion(t, pub)
	before := published(f.getMap()).Message
	pub.stop(t)
	assert.Equal(t, map[string]int{"worker-b": 50}, spread(t, client, 50), "no interruption while the publisher is down")
	addr := pub.xdsAddr.String()
	restarted := f.startPublisher(xdsOnly, func(c *publish.Config) { c.XDSAddress = addr })
	assert.Equal(t, acked, routeVersion(t, restarted), "the new process serves the same version: the client got nothing new")
	assert.Equal(t, map[string]int{"worker-b": 50}, spread(t, client, 50))
	assert.Contains(t, before, "xds version "+acked+" ACKed by 1/1 clients")
	f.waitPublishedWith("xds version " + acked + " ACKed by 1/1 clients")

	for _, tr := range w.transitions() {
		assert.NotEqual(t, string(model.ReasonXDSRejected), tr.Reason, "no NACK: %v", tr)
	}
}
