package httproute_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

// A cache that keeps only the labels and annotations the package reads still holds every
// one Build sets for every backend kind (Matches compares them all: a key the cache drops
// would make every Sync write the route again), the ownership labels and OME's.
func TestReadKeysCoverWhatBuildSets(t *testing.T) {
	for _, kind := range httproute.BackendKinds {
		if kind == httproute.BackendAuto {
			continue // never built: auto picks one of the others
		}
		t.Run(string(kind), func(t *testing.T) {
			desired, err := httproute.Build(prodConfig, prodSource, compute(t, drainA, seed()...), httproute.Inputs{Generation: 4, Drains: drainA,
				Taints: map[string][]weights.Taint{"worker-a": nil}, Tolerations: []weights.Toleration{},
				Backends: httproute.Backends{Kind: kind, Addresses: map[string][]netip.Addr{
					"chat.worker-a.example.com": {netip.MustParseAddr("198.18.0.1")},
					"chat.worker-b.example.com": {netip.MustParseAddr("198.18.0.2")},
				}}})
			require.NoError(t, err)
			labels := []map[string]string{desired.Route.Labels}
			for _, svc := range desired.Services {
				labels = append(labels, svc.Labels)
				assert.Empty(t, svc.Annotations, "no Service annotation is read")
			}
			for _, set := range labels {
				for k := range set {
					assert.True(t, httproute.ReadsLabel(k), "label %s", k)
				}
			}
			require.GreaterOrEqual(t, len(desired.Route.Annotations), 4)
			for k := range desired.Route.Annotations {
				assert.True(t, httproute.ReadsAnnotation(k), "annotation %s", k)
			}
		})
	}
	for _, k := range []string{httproute.LabelOMEManagedBy, httproute.LabelOMESourceName, httproute.LabelOMESourceNS, httproute.LabelOMEPlacementCluster} {
		assert.True(t, httproute.ReadsLabel(k), "OME label %s", k)
	}
	assert.False(t, httproute.ReadsLabel("app.kubernetes.io/name"))
	assert.False(t, httproute.ReadsAnnotation("kubectl.kubernetes.io/last-applied-configuration"))
}

// RouteMapName derives the map name back from a route name exactly when RouteName only
// appended "-global".
func TestRouteMapName(t *testing.T) {
	long := strings.Repeat("x", 60)
	tests := []struct {
		route string
		name  string
		ok    bool
	}{
		{route: httproute.RouteName("chat"), name: "chat", ok: true},
		{route: httproute.RouteName("svc-00001"), name: "svc-00001", ok: true},
		{route: httproute.RouteName(long)},  // bounded
		{route: httproute.RouteName("a.b")}, // sanitized
		{route: "chat"},
		{route: "chat-global-x"},
	}
	for _, tc := range tests {
		name, ok := httproute.RouteMapName(tc.route)
		assert.Equal(t, tc.ok, ok, tc.route)
		assert.Equal(t, tc.name, name, tc.route)
	}
}
