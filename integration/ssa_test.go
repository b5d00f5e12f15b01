package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapplyv1 "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/weights"
)

const foreignLabel = "team.example.com/owner"

// The publisher writes its route and Services by server-side apply under its field manager,
// and a label another field manager adds survives the publisher's next writes.
func TestServerSideApplyKeepsForeignFields(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	route := f.route()
	assertAppliedByPublisher(t, route.ManagedFields)
	svcName := httproute.ServiceName(f.ns, service, "worker-b")
	svc, err := kube.CoreV1().Services(f.ns).Get(ctxFor(t), svcName, metav1.GetOptions{})
	require.NoError(t, err)
	assertAppliedByPublisher(t, svc.ManagedFields)

	// Another field manager labels the route and a backend Service.
	_, err = gw.GatewayV1().HTTPRoutes(f.ns).Apply(ctxFor(t),
		gwapplyv1.HTTPRoute(route.Name, f.ns).WithLabels(map[string]string{foreignLabel: "someone-else"}),
		metav1.ApplyOptions{FieldManager: "someone-else"})
	require.NoError(t, err)
	_, err = kube.CoreV1().Services(f.ns).Apply(ctxFor(t),
		corev1ac.Service(svcName, f.ns).WithLabels(map[string]string{foreignLabel: "someone-else"}),
		metav1.ApplyOptions{FieldManager: "someone-else"})
	require.NoError(t, err)

	// A drain changes the weights: the publisher applies the route again.
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	route = f.route()
	assert.Equal(t, "someone-else", route.Labels[foreignLabel], "the foreign label survives the publisher's apply")
	assert.True(t, httproute.Owned(route.Labels, httproute.Source{Namespace: f.ns, Name: service}))
	assertAppliedByPublisher(t, route.ManagedFields)
	assert.True(t, hasManager(route.ManagedFields, "someone-else", metav1.ManagedFieldsOperationApply))

	// A new endpoint for worker-b changes its Service: applied again, foreign label kept.
	f.updateMap(func(spec *v1beta1.TrafficMapSpec) {
		for i := range spec.Entries {
			if spec.Entries[i].Cluster == "worker-b" {
				spec.Entries[i].Endpoint = "https://chat-v2.worker-b.example.com"
			}
		}
	})
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc, err := kube.CoreV1().Services(f.ns).Get(ctxFor(t), svcName, metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, "chat-v2.worker-b.example.com", svc.Spec.ExternalName)
		assert.Equal(c, "someone-else", svc.Labels[foreignLabel], "the foreign label survives the publisher's apply")
		assert.Equal(c, "worker-b", svc.Labels[httproute.LabelCluster])
	}, waitTimeout, tick)
}

// A Service at one of the publisher's backend names that it does not own is left untouched
// (server-side apply would otherwise take it over) and Published names it.
func TestForeignServiceIsNotOverwritten(t *testing.T) {
	f := newFixture(t)
	name := httproute.ServiceName(f.ns, service, "worker-a")
	foreign, err := kube.CoreV1().Services(f.ns).Create(ctxFor(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"team": "web"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "www.example.com",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.createMap(seedEntries())
	f.startPublisher()

	f.waitCondition(metav1.ConditionFalse, string(model.ReasonRouteConflict),
		"service "+f.ns+"/"+name+" exists and is not owned by the publisher", "refusing to overwrite it")
	after, err := kube.CoreV1().Services(f.ns).Get(ctxFor(t), name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, foreign.ResourceVersion, after.ResourceVersion, "foreign service untouched")
	assert.Nil(t, f.route(), "no route points at a service the publisher does not own")

	// Once the owner removes it, the map's next reconcile (here for a drain) takes the name.
	// The publisher watches only Services carrying its labels, so the removal alone does not
	// trigger one.
	require.NoError(t, kube.CoreV1().Services(f.ns).Delete(ctxFor(t), name, metav1.DeleteOptions{}))
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Len(t, f.ownedServices(), 2)
}

func assertAppliedByPublisher(t *testing.T, fields []metav1.ManagedFieldsEntry) {
	t.Helper()
	assert.True(t, hasManager(fields, publish.DefaultFieldManager, metav1.ManagedFieldsOperationApply),
		"managedFields has an Apply entry of %s: %+v", publish.DefaultFieldManager, fields)
	assert.False(t, hasManager(fields, publish.DefaultFieldManager, metav1.ManagedFieldsOperationUpdate),
		"the publisher never writes by update")
}

func hasManager(fields []metav1.ManagedFieldsEntry, manager string, op metav1.ManagedFieldsOperationType) bool {
	for _, e := range fields {
		if e.Manager == manager && e.Operation == op && e.Subresource == "" {
			return true
		}
	}
	return false
}

// staleStore is an httproute.Store whose cache is behind: it still shows a route that has
// since been deleted and replaced.
type staleStore struct{ route *gwapiv1.HTTPRoute }

func (s staleStore) Route(string, string) (*gwapiv1.HTTPRoute, error)     { return s.route, nil }
func (s staleStore) Services(httproute.Source) ([]*corev1.Service, error) { return nil, nil }
func (staleStore) RoutesSeen(string) string                               { return "" }
func (staleStore) ServicesSeen(string) string                             { return "" }

// An apply over a cached route names the cached route's UID: when the route was replaced
// behind the cache (here by a foreign one), the API server refuses the apply and the new
// route stays untouched.
func TestWriterRefusesRouteReplacedBehindCache(t *testing.T) {
	ns := newNamespace(t)
	src := httproute.Source{Namespace: ns, Name: service, Service: service, GlobalHost: "chat.example.com"}
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1}}})
	require.NoError(t, err)
	desired, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: gatewayName}}, src, res, httproute.Inputs{})
	require.NoError(t, err)
	w := httproute.NewWriter(kube, gw, publish.DefaultFieldManager)

	synced, err := w.Sync(ctxFor(t), src, desired, staleStore{})
	require.NoError(t, err)
	assert.Equal(t, 2, synced.Writes, "one Service and the route")
	cached := synced.Route

	require.NoError(t, gw.GatewayV1().HTTPRoutes(ns).Delete(ctxFor(t), cached.Name, metav1.DeleteOptions{}))
	replaced := desired.Route.DeepCopy()
	replaced.Labels = map[string]string{"team": "web"}
	replaced, err = gw.GatewayV1().HTTPRoutes(ns).Create(ctxFor(t), replaced, metav1.CreateOptions{})
	require.NoError(t, err)

	changed := desired.Route.DeepCopy()
	changed.Spec.Hostnames = []gwapiv1.Hostname{"other.example.com"}
	_, err = w.Sync(ctxFor(t), src, &httproute.Desired{Route: changed, Services: desired.Services}, staleStore{route: cached})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apply httproute "+ns+"/"+cached.Name)
	assert.Contains(t, err.Error(), "uid")
	after, err := gw.GatewayV1().HTTPRoutes(ns).Get(ctxFor(t), replaced.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, replaced.ResourceVersion, after.ResourceVersion, "replaced route untouched")
}
