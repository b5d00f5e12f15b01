package integration

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds"
)

// nackKind is one kind of resource of map A that the real client rejects: how A changes it
// (the stand-in corrupts it first, so the client NACKs the version carrying it) and what
// the NACK says, and B's later change of another type that must still go True.
type nackKind struct {
	typeURL, typeName, rejection string
	// corrupted is the name prefix of A's resources of typeURL the stand-in corrupts.
	corrupted func(a *fixture) string
	// changeA changes A's resources of typeURL over the stand-in mux.
	changeA func(t *testing.T, a *fixture, mux *adsMux)
	// changeB changes B, returning what B's Published message then says and the backends
	// B's RPCs must reach (positive) and avoid (zero).
	changeB func(t *testing.T, b *fixture) (want, reach, avoid string)
}

// drainB drains B's worker-a: a change of route configurations only.
func drainB(_ *testing.T, b *fixture) (string, string, string) {
	b.drain(seedDrain)
	return "weights worker-a=0 (drained by maintenance-a), worker-b=1", "worker-b", "worker-a"
}

func nackKinds() map[string]nackKind {
	return map[string]nackKind{
		// A's worker-b moves (a new endpoint): a changed cluster.
		"cluster": {typeURL: resource.ClusterType, typeName: "Cluster", rejection: "unsupported cluster type",
			corrupted: func(a *fixture) string { return xds.ClusterName(a.ns, service, "") },
			changeA: func(t *testing.T, a *fixture, _ *adsMux) {
				a.updateMap(func(spec *v1beta1.TrafficMapSpec) { spec.Entries[1].Endpoint = localBackend(t, "worker-b") })
			},
			changeB: drainB},
		// A is drained: a changed route configuration. B's change must not be of route
		// configurations: the client rejects every later version of the type while A's
		// rejected route configuration is in it, so B's worker-b moves (a cluster change).
		"route": {typeURL: resource.RouteType, typeName: "RouteConfiguration",
			rejection: "has no valid cluster in WeightedCluster action",
			corrupted: func(a *fixture) string { return a.ns + "/" + service },
			changeA:   func(_ *testing.T, a *fixture, _ *adsMux) { a.drain(seedDrain) },
			changeB: func(t *testing.T, b *fixture) (string, string, string) {
				b.updateMap(func(spec *v1beta1.TrafficMapSpec) { spec.Entries[1].Endpoint = localBackend(t, "worker-b-moved") })
				return "weights worker-a=1, worker-b=1", "worker-b-moved", "worker-b"
			}},
		// A gets a new hostname: a new listener, which a third real channel dials.
		"listener": {typeURL: resource.ListenerType, typeName: "Listener", rejection: "no RouteSpecifier",
			corrupted: func(a *fixture) string { return service + "." + a.ns + ".shared.example.com" },
			changeA: func(t *testing.T, a *fixture, mux *adsMux) {
				host := service + "." + a.ns + ".shared.example.com"
				a.setAnnotation(service, v1beta1.AnnotationGlobalHost, host, false)
				xdsConn(t, mux.addr(), "grpc-edge", host).Connect()
			},
			changeB: drainB},
	}
}

// D10 (issue 44) with real grpc-go clients: maps A and B (two namespaces) are served on ONE
// ADS stream (the stand-in adsMux carries the real grpc-go channels, one per map, as one
// edge client), and a real client of A rejects A's changed cluster, route configuration or
// listener (each map has its own in the gRPC flavour). A is False with the rejection while
// B's later change of another type goes True once the client ACKs it, and B's RPCs follow
// it: a NACK holds only what it rejected.
func TestXDSNackHoldsOnlyWhatItRejectedRealClient(t *testing.T) {
	for name, kind := range nackKinds() {
		t.Run(name, func(t *testing.T) { testNackHoldsOnlyWhatItRejected(t, kind) })
	}
}

func testNackHoldsOnlyWhatItRejected(t *testing.T, kind nackKind) {
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
	require.Positive(t, spread(t, clientB, 40)["worker-a"], "B's worker-a takes traffic before B's change")

	// A changes; the stand-in makes the changed resource one grpc-go rejects, and the real
	// client NACKs the version.
	mux.corrupt(kind.typeURL, kind.corrupted(a))
	kind.changeA(t, a, mux)
	a.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), `xds client node "grpc-edge" rejected version`,
		"("+kind.typeName+")", kind.rejection)

	// B changes another type, ACKed by the same stream that rejected A's resource.
	w := b.watchPublished()
	want, reach, avoid := kind.changeB(t, b)
	tm := b.waitPublishedWith(want)
	requireFalseBeforeTrue(t, w, tm.Generation)
	got := spread(t, clientB, 40)
	assert.Zero(t, got[avoid], "B's RPCs follow B's change: %v", got)
	assert.Positive(t, got[reach], "B's RPCs follow B's change: %v", got)

	tmA := a.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), kind.rejection)
	assert.False(t, tmA.Status.Published, "A stays not published while its resource is rejected")
	_, err := call(clientA)
	assert.NoError(t, err, "A's client goes on with what it had")
}
