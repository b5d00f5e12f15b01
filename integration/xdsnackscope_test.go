package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds"
)

// D10 (issue 44) with real grpc-go clients: maps A and B (two namespaces) are served on ONE
// ADS stream (the stand-in adsMux carries two real grpc-go channels, one per map, as one
// edge client), and the real client of A rejects A's changed cluster. A is False with the
// rejection while B's later drain (a route-only change) goes True once the client ACKs it,
// and B's RPCs follow the drained weights: a NACK holds only what it rejected.
func TestXDSNackHoldsOnlyWhatItRejectedRealClient(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	departedMap(t, a)
	departedMap(t, b)
	pub := a.startPublisher(func(c *publish.Config) {
		c.Namespaces = []string{a.ns, b.ns}
		c.Sinks, c.XDSAddress, c.RequireXDSAck = []string{publish.SinkXDS}, "127.0.0.1:0", true
	})
	mux := startADSMux(t, pub.xdsAddr)
	clientA := xdsClient(t, mux.addr(), "grpc-edge", service+"."+a.ns)
	clientB := xdsClient(t, mux.addr(), "grpc-edge", service+"."+b.ns)
	for _, c := range []struct {
		f    *fixture
		call func() (string, error)
	}{{a, func() (string, error) { return call(clientA) }}, {b, func() (string, error) { return call(clientB) }}} {
		_, err := c.call()
		require.NoError(t, err)
		c.f.waitPublishedWith("weights worker-a=1, worker-b=1")
	}
	require.Eventually(t, func() bool { return len(pub.pub.XDSClients()) == 1 }, waitTimeout, tick, "one stream holds both maps")
	require.Positive(t, spread(t, clientB, 40)["worker-a"], "B's worker-a takes traffic before the drain")

	// A's cluster for worker-b changes (a new endpoint); the stand-in makes it one grpc-go
	// rejects, and the real client NACKs the version.
	mux.corrupt(xds.ClusterName(a.ns, service, ""))
	a.updateMap(func(spec *v1beta1.TrafficMapSpec) { spec.Entries[1].Endpoint = localBackend(t, "worker-b") })
	a.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), `xds client node "grpc-edge" rejected version`,
		"(Cluster)", "unsupported cluster type")

	// B drains: route-only, ACKed by the same stream that rejected A's cluster.
	w := b.watchPublished()
	b.drain(seedDrain)
	tm := b.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
	requireFalseBeforeTrue(t, w, tm.Generation)
	got := spread(t, clientB, 40)
	assert.Zero(t, got["worker-a"], "B's RPCs follow the drained weights: %v", got)
	assert.Positive(t, got["worker-b"], "B's RPCs follow the drained weights: %v", got)

	tmA := a.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), "unsupported cluster type")
	assert.False(t, tmA.Status.Published, "A stays not published while its cluster is rejected")
	_, err := call(clientA)
	assert.NoError(t, err, "A's client goes on with the cluster it had")
}
