package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The HTTPRoute and both backend Services the publisher writes carry an ownerReference to
// their TrafficMap, as the API server stores it (what kubectl get -o yaml shows): neither a
// controller reference nor one blocking the map's deletion. A route written before the
// reference existed (here: the reference removed behind the publisher's back) gets it again.
func TestRouteAndServicesOwnedByTrafficMap(t *testing.T) {
	f := newFixture(t)
	tm := f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	want := []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap", Name: tm.Name, UID: tm.UID}}
	assert.Equal(t, want, f.route().OwnerReferences)
	svcs := f.ownedServices()
	require.Len(t, svcs, 2)
	for _, svc := range svcs {
		assert.Equal(t, want, svc.OwnerReferences, svc.Name)
	}

	// The reference removed (as on a route an older publisher wrote): the route's change
	// makes the publisher reconcile, and it finds the route differs and restores it.
	route := f.route()
	route.OwnerReferences = nil
	_, err := gw.GatewayV1().HTTPRoutes(f.ns).Update(ctxFor(t), route, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, f.route().OwnerReferences)
	}, waitTimeout, tick)
}
