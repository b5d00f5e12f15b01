package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// A drain applied while the publisher is down: after the restart the map's xDS content
// changed since before the start, so with no client connected yet it is not Published
// ("no xds client is connected" would be a lie: the old client still routes by its last
// configuration while it reconnects). Published turns True only once the reconnect grace
// has passed and the reconnected real gRPC client has ACKed the drained weights, and the
// RPCs taken right after that go to the drained cluster not at all.
func TestXDSReconnectGraceAfterRestart(t *testing.T) {
	const grace = 8 * time.Second
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 70, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 30, Healthy: true},
	})
	bothSinks := func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck = []string{publish.SinkHTTPRoute, publish.SinkXDS}, "127.0.0.1:0", true
		c.XDSReconnectGrace = grace
	}
	pub := f.startPublisher(bothSinks)
	client := xdsClient(t, pub.xdsAddr, "grpc-client-1", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	f.waitPublishedWith("ACKed by 1/1 clients; weights worker-a=70, worker-b=30")
	got := spread(t, client, 200)
	require.Positive(t, got["worker-a"], "worker-a takes traffic before the drain: %v", got)

	addr := pub.xdsAddr.String()
	pub.stop(t)
	f.drain(seedDrain)
	stale := published(f.getMap())
	require.Equal(t, metav1.ConditionTrue, stale.Status, "nothing updates the condition while the publisher is down")
	require.Contains(t, stale.Message, "worker-a=70")

	w := f.watchPublished()
	started := time.Now()
	f.startPublisher(bothSinks, func(c *publish.Config) { c.XDSAddress = addr })
	tm := f.waitPublishedWith("ACKed by 1/1 clients; weights worker-a=0 (drained by maintenance-a), worker-b=30")
	assert.Equal(t, map[string]int{"worker-b": 100}, spread(t, client, 100), "right after Published=True")
	assert.GreaterOrEqual(t, time.Since(started), grace, "not Published before the grace ended")

	requireFalseBeforeTrue(t, w, tm.Generation)
	var waited bool
	for _, tr := range w.transitions() {
		if tr.Status == metav1.ConditionTrue {
			assert.Contains(t, tr.Message, "ACKed by 1/1 clients; weights worker-a=0 (drained by maintenance-a)", "every True after the restart: %v", tr)
		}
		reconnect := containsAll(tr.Message, "waiting for xds clients to reconnect", "--xds-reconnect-grace 8s")
		if strings.Contains(tr.Message, "no xds client is connected") {
			assert.True(t, reconnect, "no client connected right after the restart is a wait, not a confirmation: %v", tr)
		}
		waited = waited || reconnect
	}
	assert.True(t, waited, "the condition said it waits for clients to reconnect")
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// reconciles is how many reconciles the publisher registered with reg has finished.
func reconciles(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range families {
		if mf.GetName() == "trafficmap_publisher_reconciles_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// With --sinks xds alone there is no route to prove what was published before a restart:
// the record ConfigMap does (its content digest is written only after the change was
// announced). A plain restart keeps an unchanged map's condition as it was, through the
// whole reconnect grace; a drain applied while the publisher was down is held by the grace.
func TestXDSOnlyRestartKeepsUnchangedMaps(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 70, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 30, Healthy: true},
	})
	xdsOnly := func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkXDS}, "127.0.0.1:0", true, 1
		c.XDSReconnectGrace = 10 * time.Minute // longer than the test: any hold shows
	}
	// The first start has no window: the new map waits for its first client (min-clients
	// 1), which would make it a map with a condition that the window holds.
	pub := f.startPublisher(xdsOnly, func(c *publish.Config) { c.XDSReconnectGrace = 0 })
	client := xdsClient(t, pub.xdsAddr, "grpc-client-1", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	before := published(f.waitPublishedWith("ACKed by 1/1 clients; weights worker-a=70, worker-b=30"))

	addr := pub.xdsAddr.String()
	pub.stop(t)
	reg := prometheus.NewRegistry()
	restarted := f.startPublisher(xdsOnly, func(c *publish.Config) { c.XDSAddress, c.Registerer = addr, reg })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Positive(c, reconciles(t, reg), "the map was reconciled after the restart")
	}, waitTimeout, tick)
	after := published(f.getMap())
	assert.Equal(t, *before, *after, "a plain restart leaves an unchanged map's condition alone")
	got := spread(t, client, 50)
	assert.True(t, got["worker-a"] > 0 && got["worker-b"] > 0, "both clusters still served: %v", got)

	restarted.stop(t)
	f.drain(seedDrain)
	f.startPublisher(xdsOnly, func(c *publish.Config) { c.XDSAddress = addr })
	// Not True: it waits for the client to reconnect (--xds-min-clients) and then for the
	// window (--xds-reconnect-grace), whichever the reconcile meets first.
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients")
}
