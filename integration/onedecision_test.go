package integration

import (
	"fmt"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// One decision for all sinks, with both sinks on and a real proxyless gRPC client: a map
// grown to 17 entries (more than an HTTPRoute rule holds) is refused by the HTTPRoute sink,
// so neither sink changes: the route keeps its last weights, the xDS client keeps being
// served the last good weights, and Published False names the refusing sink. Another map
// published meanwhile is not held by the refusal.
func TestOneDecisionForAllSinks(t *testing.T) {
	f := newFixture(t)
	entries := []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 70, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 30, Healthy: true},
	}
	f.createMap(entries)
	f.drain(seedDrain)
	pub := f.startPublisher(func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkHTTPRoute, publish.SinkXDS}, "127.0.0.1:0", true, 1
	})
	client := xdsClient(t, pub.xdsAddr, "grpc-client-1", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=30")
	assert.Equal(t, map[string]int{"worker-b": 100}, spread(t, client, 100))
	routeBefore := f.routeWeights("worker-a", "worker-b")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 30}, routeBefore)

	// 17 entries: the 15 new ones would take traffic (and fail it: nothing listens there)
	// if the xDS sink served them.
	f.updateMap(func(s *v1beta1.TrafficMapSpec) {
		s.Entries = append([]v1beta1.TrafficMapEntry(nil), entries...)
		for i := range 15 {
			s.Entries = append(s.Entries, v1beta1.TrafficMapEntry{Cluster: fmt.Sprintf("worker-c%d", i),
				Endpoint: "http://localhost:1", Weight: 10, Healthy: true})
		}
	})
	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonRouteRefused), "httproute sink cannot publish trafficmap "+f.ns+"/chat", "has 17 entries")
	assert.False(t, tm.Status.Published)

	// A barrier for the xDS rebuild loop: a second map created after the update is served
	// to a second client only by a rebuild that has read the 17-entry plan too. Once the
	// first client has ACKed that rebuild's route configuration, what it routes by is what
	// the xDS sink serves for chat after the refusal.
	f.createISVC("other", nil)
	_, err = tmc.OmeV1beta1().TrafficMaps(f.ns).Create(ctxFor(t), &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: f.ns},
		Spec: v1beta1.TrafficMapSpec{Service: "other", Mode: "All", ObservedISVCGeneration: 1, Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1, Healthy: true}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	other := xdsClient(t, pub.xdsAddr, "grpc-client-2", "other."+f.ns)
	_, err = call(other)
	require.NoError(t, err, "the refusal of chat does not hold another map")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := pub.pub.XDSClients()
		require.Len(c, clients, 2)
		versions := map[string]bool{}
		for _, cl := range clients {
			assert.Empty(c, cl.Nacked)
			versions[cl.Acked[resource.RouteType]] = true
		}
		assert.Len(c, versions, 1, "both clients ACKed the same route configuration version")
	}, waitTimeout, tick)

	assert.Equal(t, map[string]int{"worker-b": 100}, spread(t, client, 100), "the xDS client keeps the last good weights")
	assert.Equal(t, routeBefore, f.routeWeights("worker-a", "worker-b"), "the route keeps its last weights")
	route := f.route()
	require.NotNil(t, route)
	require.Len(t, route.Spec.Rules, 1)
	assert.Len(t, route.Spec.Rules[0].BackendRefs, 2, "no backend of the refused entries")
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonRouteRefused), "httproute sink cannot publish trafficmap "+f.ns+"/chat",
		"the httproute sink refuses these weights, so no sink publishes them and each keeps what it published before")
}
