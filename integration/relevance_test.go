package integration

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// xdsOnlyAck: the xDS sink alone on loopback (with the debug HTTP server), Published
// waiting for the ACKs of at least one connected client.
func xdsOnlyAck(c *publish.Config) {
	c.Sinks, c.XDSAddress, c.HTTPAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkXDS}, "127.0.0.1:0", "127.0.0.1:0", true, 1
}

// mapNames are the gRPC flavour's resource names of the fixture's map, as a proxyless
// client that dialed "chat.<namespace>" subscribes to them.
func mapNames(ns string) map[string][]string {
	return map[string][]string{
		resource.ListenerType: {service + "." + ns},
		resource.RouteType:    {ns + "/" + service},
		resource.ClusterType:  {xds.ClusterName(ns, service, "worker-a"), xds.ClusterName(ns, service, "worker-b")},
	}
}

// grpcNode is a gRPC-flavour node (by its user agent, as grpc-go sends it).
func grpcNode(id string) *corev3.Node { return &corev3.Node{Id: id, UserAgentName: "gRPC Go"} }

// frozenClient is a protocol-level state-of-the-world ADS client of the gRPC flavour that
// subscribes by name to names (as grpc-go does once it dialed a map) and ACKs every
// response, except while frozen: then it keeps the latest response of each type unanswered
// until thawed.
type frozenClient struct {
	mu       sync.Mutex
	stream   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	names    map[string][]string
	frozen   bool
	unacked  map[string]*discoveryv3.DiscoveryResponse
	received int
}

func startFrozenClient(t *testing.T, r *runningPublisher, node *corev3.Node, names map[string][]string) *frozenClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := adsClient(t, r).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	c := &frozenClient{stream: stream, node: node, names: names, unacked: map[string]*discoveryv3.DiscoveryResponse{}}
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names[typ]}))
	}
	responses := xdstest.Stream(stream.Recv)
	go func() {
		for resp := range responses {
			c.mu.Lock()
			c.received++
			if c.frozen {
				c.unacked[resp.GetTypeUrl()] = resp
			} else {
				_ = c.ack(resp) // fails only once the stream is gone
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// ack answers resp; c.mu must be held (a stream's Send is not safe for concurrent use).
func (c *frozenClient) ack(resp *discoveryv3.DiscoveryResponse) error {
	return c.stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resp.GetTypeUrl(),
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: c.names[resp.GetTypeUrl()]})
}

func (c *frozenClient) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

// responses counts the responses received so far.
func (c *frozenClient) responses() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.received
}

func (c *frozenClient) thaw(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = false
	for typ, resp := range c.unacked {
		require.NoError(t, c.ack(resp))
		delete(c.unacked, typ)
	}
}

// debugXDS reads the publisher's /debug/xds.
func debugXDS(t *testing.T, r *runningPublisher) xds.DebugState {
	t.Helper()
	var d xds.DebugState
	require.NoError(t, json.Unmarshal([]byte(get(t, r, "/debug/xds")), &d))
	return d
}

// A map's xDS confirmation counts exactly the streams subscribed to its resources, each
// stream on its own: a real proxyless client dialing a missing target blocks no map (and
// counts for none), and two clients sharing one node id are two: while one of them does
// not ACK a drain, Published waits.
func TestXDSRelevanceAndSharedNodeIDs(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 1},
	})
	pub := f.startPublisher(xdsOnlyAck)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected, --xds-min-clients is 1")

	// A mistyped target: the client subscribes to one listener nobody serves.
	typo := xdsConn(t, pub.xdsAddr, "grpc-typo", "chta."+f.ns)
	typo.Connect()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := pub.pub.XDSClients()
		require.Len(c, clients, 1)
		assert.Equal(c, []string{"chta." + f.ns}, clients[0].Subscribed[resource.ListenerType].SortedNames())
	}, waitTimeout, tick)
	f.waitPublishedWith("none of the 1 connected xds clients subscribes to its resources")

	// Two clients of one node id: a real proxyless client and a protocol-level one.
	shared := xdsClient(t, pub.xdsAddr, "shared-node", service+"."+f.ns)
	_, err := call(shared)
	require.NoError(t, err)
	frozen := startFrozenClient(t, pub, grpcNode("shared-node"), mapNames(f.ns))
	// A True message keeps the counts of its publication: the live ones are in /debug/xds.
	var d xds.DebugState
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d = debugXDS(t, pub)
		require.Len(c, d.Maps, 1)
		assert.Len(c, d.Maps[0].Acked, 2)
	}, waitTimeout, tick)
	f.waitPublished()
	assert.Equal(t, f.ns+"/"+service, d.Maps[0].Key)
	assert.Len(t, d.Maps[0].Relevant, 2, "the typo client is not relevant: %v", d.Maps[0].Relevant)
	assert.Equal(t, d.Maps[0].Relevant, d.Maps[0].Acked)
	for _, id := range d.Maps[0].Relevant {
		assert.Contains(t, id, "shared-node/sotw-")
	}

	// One of them stops ACKing: the drain reaches the real client, Published waits for the
	// other.
	frozen.freeze()
	before := frozen.responses()
	f.drain(seedDrain)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 1/2 ACKed a version with these weights")
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, shared, 20), "the real client has the drain")
	require.Eventually(t, func() bool { return frozen.responses() > before }, waitTimeout, tick, "the frozen client was sent the drain")
	d = debugXDS(t, pub)
	require.Len(t, d.Maps, 1)
	assert.Len(t, d.Maps[0].Relevant, 2)
	assert.Len(t, d.Maps[0].Acked, 1, "the frozen stream has not ACKed")

	frozen.thaw(t)
	f.waitPublishedWith("ACKed by 2/2 clients; weights worker-a=0 (drained by maintenance-a), worker-b=1")
}

// A delta client that reconnects declaring, in initial_resource_versions, the current
// version of everything it subscribes to gets nothing from the server, and counts as having
// ACKed it.
func TestXDSDeltaReconnectWithCurrentVersionsCounts(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(xdsOnlyAck)
	node := grpcNode("delta-client")
	names := mapNames(f.ns)
	types := []string{resource.ListenerType, resource.RouteType, resource.ClusterType}

	// First connection: subscribe by name, ACK everything, remember the versions.
	held := map[string]map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := adsClient(t, pub).DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	in := xdstest.Stream(stream.Recv)
	for _, typ := range types {
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: names[typ]}))
	}
	for len(held) < len(types) {
		resp, ok := xdstest.Next(in, waitTimeout)
		require.True(t, ok, "a response for every type")
		held[resp.GetTypeUrl()] = map[string]string{}
		for _, r := range resp.GetResources() {
			held[resp.GetTypeUrl()][r.GetName()] = r.GetVersion()
		}
		require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}))
	}
	f.waitPublishedWith("ACKed by 1/1 clients")

	// The client goes away: the map waits for a client.
	cancel()
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected, --xds-min-clients is 1")

	// It reconnects with what it holds, which is current: nothing is sent, and it counts.
	again, err := adsClient(t, pub).DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	in = xdstest.Stream(again.Recv)
	for _, typ := range types {
		require.NoError(t, again.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ,
			ResourceNamesSubscribe: names[typ], InitialResourceVersions: held[typ]}))
	}
	f.waitPublishedWith("ACKed by 1/1 clients")
	_, sent := xdstest.Next(in, 300*time.Millisecond) // a bounded look
	assert.False(t, sent, "the server sent nothing: there was nothing to ACK")
}
