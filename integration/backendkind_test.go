package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/publish"
)

// ipEntries are two entries at IP endpoints (198.18.0.0/15: the API server refuses loopback
// addresses in EndpointSlices), which need no DNS.
func ipEntries() []v1beta1.TrafficMapEntry {
	return []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "http://198.18.0.1:8080", Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: "http://198.18.0.2:8080", Weight: 3, Healthy: true},
	}
}

// startKindPublisher runs the publisher with kind, as the chart's ServiceAccount with the
// chart's RBAC rendered with set.
func (f *fixture) startKindPublisher(t *testing.T, kind httproute.BackendKind, set ...string) {
	t.Helper()
	release := "kind-" + f.ns
	apply(t, chartRBAC(t, release, f.ns, set...))
	cfg := f.publisherConfig(func(c *publish.Config) { c.BackendKind, c.ClaimNamespace = kind, f.ns })
	f.pub = startPublisherWith(t, cfg, asServiceAccount(f.ns, release+"-trafficmap-publisher"), zaptest.NewLogger(t))
}

// endpointslice: with the chart's RBAC, the map is published with selector-less Services
// and ready EndpointSlices holding the endpoint IPs, the route points at those Services, and
// deleting the map removes every one of them.
func TestBackendKindEndpointSlice(t *testing.T) {
	f := newFixture(t)
	f.createMap(ipEntries())
	f.startKindPublisher(t, httproute.BackendEndpointSlice)
	tm := f.waitPublished()
	assert.Contains(t, published(tm).Message, "backends: endpointslice (--backend-kind)")

	route := f.route()
	assert.Equal(t, "endpointslice", route.Annotations[httproute.AnnotationBackendKind])
	services := f.ownedServices()
	require.Len(t, services, 2)
	for i, cluster := range []string{"worker-a", "worker-b"} {
		svc := services[slices.IndexFunc(services, func(s corev1.Service) bool { return s.Labels[httproute.LabelCluster] == cluster })]
		assert.Equal(t, corev1.ServiceTypeClusterIP, svc.Spec.Type)
		assert.Empty(t, svc.Spec.Selector)
		assert.Equal(t, httproute.SelectorlessServiceName(f.ns, service, cluster), svc.Name)
		assert.Equal(t, "Service/"+svc.Name, string(*route.Spec.Rules[0].BackendRefs[i].Kind)+"/"+string(route.Spec.Rules[0].BackendRefs[i].Name))

		slicesOf, err := kube.DiscoveryV1().EndpointSlices(f.ns).List(ctxFor(t), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		require.NoError(t, err)
		require.Len(t, slicesOf.Items, 1)
		s := slicesOf.Items[0]
		assert.Equal(t, discoveryv1.AddressTypeIPv4, s.AddressType)
		require.Len(t, s.Endpoints, 1)
		assert.Equal(t, []string{"198.18.0." + string(rune('1'+i))}, s.Endpoints[0].Addresses)
		assert.True(t, *s.Endpoints[0].Conditions.Ready)
		require.Len(t, s.Ports, 1)
		assert.Equal(t, svc.Spec.Ports[0].Name, *s.Ports[0].Name, "the slice port is named as the Service port")
		assert.Equal(t, int32(8080), *s.Ports[0].Port)
		assert.Equal(t, httproute.EndpointSliceManagedByValue, s.Labels[discoveryv1.LabelManagedBy])
	}

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.waitMapGone()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		left, err := kube.DiscoveryV1().EndpointSlices(f.ns).List(context.Background(), metav1.ListOptions{})
		assert.NoError(c, err)
		assert.Empty(c, left.Items)
		assert.Empty(c, f.ownedServices())
	}, waitTimeout, tick)
}

// installEnvoyBackendCRD installs envoyBackendCRD for the test; its cleanup uninstalls it
// and waits until the API server has dropped it. A CRD's deletion finishes asynchronously,
// and the next test's install would otherwise update the terminating CRD and then find it
// gone ("not found", a flake of make test).
func installEnvoyBackendCRD(t *testing.T) {
	t.Helper()
	crds, err := envtest.InstallCRDs(restCfg, envoyBackendCRD())
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, envtest.UninstallCRDs(restCfg, envoyBackendCRD()))
		ext, err := apiextensionsclient.NewForConfig(restCfg)
		require.NoError(t, err)
		for _, crd := range crds {
			require.Eventually(t, func() bool {
				_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crd.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}, waitTimeout, tick, "CRD %s deleted", crd.Name)
		}
	})
}

// envoyBackendCRD is Envoy Gateway's Backend CRD (v1.9.1), checked in as an API schema.
func envoyBackendCRD() envtest.CRDInstallOptions {
	return envtest.CRDInstallOptions{Paths: []string{filepath.Join(repoRoot(), "integration", "testdata", "envoy-gateway", "gateway.envoyproxy.io_backends.yaml")},
		ErrorIfPathMissing: true}
}

// envoy-gateway-backend: without the Backend API the map says so (BackendAPIMissing) and no
// route is written; with it and the chart's RBAC for that kind, each cluster is a Backend
// with an IP endpoint the route refers to by group and kind, and deleting the map removes
// them.
func TestBackendKindEnvoyGatewayBackend(t *testing.T) {
	f := newFixture(t)
	f.createMap(ipEntries())
	f.startKindPublisher(t, httproute.BackendEnvoyGateway, "publisher.backendKind=envoy-gateway-backend")
	f.waitCondition(metav1.ConditionFalse, "BackendAPIMissing", "Backend API is not installed/enabled")

	installEnvoyBackendCRD(t)
	f.pub.stop(t) // the next reconcile finds the API (the resync would too, within a minute)
	f.startKindPublisher2(t, httproute.BackendEnvoyGateway)
	f.waitPublished()

	route := f.route()
	refs := route.Spec.Rules[0].BackendRefs
	require.Len(t, refs, 2)
	backends := dyn.Resource(httproute.EnvoyBackendGVR).Namespace(f.ns)
	for i, ref := range refs {
		assert.Equal(t, "gateway.envoyproxy.io", string(*ref.Group))
		assert.Equal(t, "Backend", string(*ref.Kind))
		b, err := backends.Get(ctxFor(t), string(ref.Name), metav1.GetOptions{})
		require.NoError(t, err)
		eps, _, _ := unstructured.NestedSlice(b.Object, "spec", "endpoints")
		require.Len(t, eps, 1)
		assert.Equal(t, map[string]any{"ip": map[string]any{"address": "198.18.0." + string(rune('1'+i)), "port": int64(8080)}}, eps[0])
	}
	assert.Empty(t, f.ownedServices(), "no Service for this kind")

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.waitMapGone()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		left, err := backends.List(context.Background(), metav1.ListOptions{})
		assert.NoError(c, err)
		assert.Empty(c, left.Items)
	}, waitTimeout, tick)
}

// startKindPublisher2 starts another publisher as the ServiceAccount startKindPublisher
// bound (its RBAC is in place).
func (f *fixture) startKindPublisher2(t *testing.T, kind httproute.BackendKind) {
	t.Helper()
	cfg := f.publisherConfig(func(c *publish.Config) { c.BackendKind, c.ClaimNamespace = kind, f.ns })
	f.pub = startPublisherWith(t, cfg, asServiceAccount(f.ns, "kind-"+f.ns+"-trafficmap-publisher"), zaptest.NewLogger(t))
}

// Changing the kind from envoy-gateway-backend to endpointslice (a restart with another
// --backend-kind): the map is published with the new kind's objects and, once the gateway
// accepted the route with them, the old kind's Backends are gone.
func TestBackendKindSwitch(t *testing.T) {
	installEnvoyBackendCRD(t)
	f := newFixture(t)
	f.createMap(ipEntries())
	f.startKindPublisher(t, httproute.BackendEnvoyGateway, "publisher.backendKind=envoy-gateway-backend")
	f.waitPublished()
	backends := dyn.Resource(httproute.EnvoyBackendGVR).Namespace(f.ns)
	before, err := backends.List(ctxFor(t), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, before.Items, 2)
	f.pub.stop(t)

	f.startKindPublisher2(t, httproute.BackendEndpointSlice)
	f.waitPublishedWith("backends: endpointslice (--backend-kind)")
	assert.Equal(t, "endpointslice", f.route().Annotations[httproute.AnnotationBackendKind])
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		left, err := backends.List(context.Background(), metav1.ListOptions{})
		assert.NoError(c, err)
		assert.Empty(c, left.Items, "the old kind's Backends go once the route with the new kind is accepted")
		slicesLeft, err := kube.DiscoveryV1().EndpointSlices(f.ns).List(context.Background(), metav1.ListOptions{})
		assert.NoError(c, err)
		assert.Len(c, slicesLeft.Items, 2)
		assert.Len(c, f.ownedServices(), 2)
	}, waitTimeout, tick)
}

// A published map of a kind beyond Services whose input does not change is written once:
// reconciles forced by route updates of another writer (as a gateway's status writes
// are) make no API write. A write on each would start a loop with a gateway that
// rewrites the route's status after every write (Traefik).
func TestBackendKindSteadyMapWritesNothing(t *testing.T) {
	installEnvoyBackendCRD(t)
	for _, tc := range []struct {
		kind httproute.BackendKind
		set  []string
	}{
		{kind: httproute.BackendEndpointSlice},
		{kind: httproute.BackendEnvoyGateway, set: []string{"publisher.backendKind=envoy-gateway-backend"}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			f := newFixture(t)
			f.createMap(ipEntries())
			release := "kind-" + f.ns
			apply(t, chartRBAC(t, release, f.ns, tc.set...))
			cfg := f.publisherConfig(func(c *publish.Config) {
				c.BackendKind, c.ClaimNamespace, c.HTTPAddress = tc.kind, f.ns, "127.0.0.1:0"
			})
			pub := startPublisherWith(t, cfg, asServiceAccount(f.ns, release+"-trafficmap-publisher"), zaptest.NewLogger(t))
			f.pub = pub
			f.waitPublished()
			metric := func(name, labels string) float64 {
				v, _ := metricValue(get(t, pub, "/metrics"), name, labels)
				return v
			}
			writes := metric("trafficmap_publisher_route_writes_total", "")
			require.Positive(t, writes)
			for i := range 3 {
				reconciles := metric("trafficmap_publisher_reconciles_total", `result="ok"`)
				f.touchRoute(strconv.Itoa(i))
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					assert.Greater(c, metric("trafficmap_publisher_reconciles_total", `result="ok"`), reconciles, "reconciled again")
				}, waitTimeout, tick)
				assert.Equal(t, writes, metric("trafficmap_publisher_route_writes_total", ""), "no write for a map that did not change (touch %d)", i)
			}
		})
	}
}

// touchRoute sets an annotation of another field manager on the map's route, as a
// gateway's status write would change the route without changing what the publisher owns.
func (f *fixture) touchRoute(value string) {
	f.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/touched":%q}}}`, value)
	_, err := gw.GatewayV1().HTTPRoutes(f.ns).Patch(ctxFor(f.t), httproute.RouteName(service), types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "someone-else"})
	require.NoError(f.t, err)
}
