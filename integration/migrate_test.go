package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// Issue 44: migrating from OME's publisher removes OME's tmb- Services only after the
// gateway accepted the route generation that no longer refers to them; a gateway still on
// the older generation would otherwise point at Services that are gone. The stand-in gateway
// is paused while the publisher adopts the route: OME's Services stay (and the route keeps
// OME's labels, marking the adoption unfinished) until it accepts, then they go.
func TestMigrateFromOMEKeepsServicesUntilAccepted(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	host := service + "." + f.ns + ".example.com"
	ome := standin.OMEPublisher{Kube: kube, Gateway: gw, Maps: tmc, GatewayNamespace: f.ns, GatewayName: gatewayName, Port: 443}
	omeRoute, err := ome.Publish(ctxFor(t), f.ns, service, host)
	require.NoError(t, err)
	omeServices := func() int {
		list, err := kube.CoreV1().Services(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: httproute.LabelOMEManagedBy})
		require.NoError(t, err)
		return len(list.Items)
	}
	require.Positive(t, omeServices())

	f.gw.Pause()
	f.startPublisher(func(c *publish.Config) { c.TakeOverFrom = model.OMEPublisherName })
	require.Eventually(t, func() bool {
		r := f.route()
		return r != nil && r.Generation > omeRoute.Generation && httproute.Owned(r.Labels, httproute.Source{Namespace: f.ns, Name: service})
	}, waitTimeout, tick, "the route is adopted: the publisher's content and labels")
	f.waitCondition(metav1.ConditionFalse, "Publishing", "waiting for gateway")
	assert.Positive(t, omeServices(), "OME's Services stay while the gateway has not accepted the adopted route")
	assert.Equal(t, httproute.OMEManagedByValue, f.route().Labels[httproute.LabelOMEManagedBy], "the adoption is unfinished")

	f.gw.Resume()
	f.waitPublishedWith("accepted by gateway")
	require.Eventually(t, func() bool { return omeServices() == 0 }, waitTimeout, tick, "OME's Services go once accepted")
	require.Eventually(t, func() bool {
		_, ok := f.route().Labels[httproute.LabelOMEManagedBy]
		return !ok
	}, waitTimeout, tick, "OME's labels leave the route")
}
