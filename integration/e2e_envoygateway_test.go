//go:build e2e

package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// The Envoy Gateway controller judges the publisher's routes of each backend kind, one
// namespace and publisher per kind: envoy-gateway-backend, endpointslice and auto (which
// picks endpointslice for Envoy Gateway's controllerName) are accepted with ResolvedRefs
// True and the map says Published True; for service-externalname Envoy Gateway refuses the
// backend (ResolvedRefs False, UnsupportedValue) and the map stays not Published, its
// message carrying Envoy Gateway's reason and text.
func TestE2EEnvoyGatewayBackendKinds(t *testing.T) {
	fqdn := []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 3, Healthy: true},
	}
	// Addresses of 198.18.0.0/15 no backend listens on: only the route status is judged.
	ips := []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "http://198.18.0.10:8080", Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: "http://198.18.0.11:8080", Weight: 3, Healthy: true},
	}
	cases := []struct {
		kind    httproute.BackendKind
		entries []v1beta1.TrafficMapEntry
		refused bool
	}{
		{httproute.BackendEnvoyGateway, fqdn, false},
		{httproute.BackendEndpointSlice, ips, false},
		{httproute.BackendAuto, ips, false},
		{httproute.BackendExternalName, fqdn, true},
	}
	fixtures := make([]*fixture, len(cases))
	var nss []string
	for i := range cases {
		fixtures[i] = newE2EFixture(t)
		nss = append(nss, fixtures[i].ns)
	}
	egGateway(t, gatewayName, nss...)

	for i, c := range cases {
		f := fixtures[i]
		f.createMap(c.entries)
		// Each publisher keeps its claim records in its own namespace: publishers sharing a
		// claim namespace enqueue each other's maps, and (on branch kinds at 3140dcb) the
		// delete of a map outside the publisher's namespaces removes that map's
		// EndpointSlices and Backends through live API calls.
		f.startPublisher(withBackendKind(c.kind), func(cfg *publish.Config) { cfg.ClaimNamespace = f.ns })
	}
	for i, c := range cases {
		f := fixtures[i]
		t.Run(string(c.kind), func(t *testing.T) {
			f.t = t
			if c.refused {
				tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonRouteNotAccepted), "UnsupportedValue", "ExternalName")
				t.Logf("%s: Published %s/%s: %s", c.kind, published(tm).Status, published(tm).Reason, published(tm).Message)
				assert.Contains(t, published(tm).Message, egController, "the message names the controller")
				assert.False(t, tm.Status.Published)
				return
			}
			tm := f.waitPublished()
			t.Logf("%s: Published True: %s", c.kind, published(tm).Message)
			r := f.route()
			require.NotNil(t, r)
			cond := routeParentCondition(t, f.ns, r.Name, gatewayName, egController, string(gwapiv1.RouteConditionResolvedRefs))
			assert.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
			assert.Contains(t, published(tm).Message, egController, "the message names the controller")
		})
	}
}

// Published's reading of route status (httproute.Config.Acceptance, what the route sink
// decides Published with) on what the real controllers write, on one route with two parents:
// a Traefik Gateway and an Envoy Gateway Gateway. Each controller writes a status.parents
// entry for its Gateway (its controllerName, conditions at the route's generation);
// Acceptance must read, for the configured parent, the verdict of that Gateway's controller:
// Accepted for both while the
// backend is a selector-less Service with an EndpointSlice, then Rejected for both, each with
// its own reason, once the route's next generation points at an ExternalName Service.
// Traefik v3.6.12 also writes an entry, with its own controllerName, for every other parent
// of a route it serves (pkg/provider/kubernetes/gateway/httproute.go), here via-eg: a reader
// that takes the first entry naming the parent reads Traefik's word on Envoy Gateway's
// Gateway.
func TestE2EPublishedReadsControllerStatus(t *testing.T) {
	ns := newNamespace(t)
	b := startBackends(t, "worker-a")
	tr := startTraefik(t, ns)
	createGatewayClass(t, "traefik-"+ns, traefikController)
	createGateway(t, ns, "via-traefik", "traefik-"+ns, tr.Port)
	egGateway(t, "via-eg", ns)
	waitGatewayCondition(t, ns, "via-traefik", string(gwapiv1.GatewayConditionProgrammed))

	backendService(t, ns, "sliced", b.Addrs["worker-a"])
	_, err := kube.CoreV1().Services(ns).Create(ctxFor(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "chat.worker-a.example.com",
			Ports: []corev1.ServicePort{{Name: backendPortName, Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	createRoute(t, ns, "both", "both."+ns+".example.com", []string{"via-traefik", "via-eg"}, weightedRef("sliced", 1))

	viaTraefik := httproute.Config{Gateway: types.NamespacedName{Namespace: ns, Name: "via-traefik"}}
	viaEG := httproute.Config{Gateway: types.NamespacedName{Namespace: ns, Name: "via-eg"}}
	verdicts := func(want httproute.Verdict) (httproute.Acceptance, httproute.Acceptance) {
		t.Helper()
		var a, e httproute.Acceptance
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r, err := gw.GatewayV1().HTTPRoutes(ns).Get(context.Background(), "both", metav1.GetOptions{})
			require.NoError(c, err)
			// Each parent's verdict by its own controller (the GatewayClass's controllerName, as
			// the sink reads it): Traefik writes an entry for via-eg too, which is not EG's.
			a, e = viaTraefik.AcceptanceBy(r, traefikController), viaEG.AcceptanceBy(r, egController)
			assert.Equal(c, want, a.Verdict, "via Traefik: %s", a.Message)
			assert.Equal(c, want, e.Verdict, "via Envoy Gateway: %s", e.Message)
			for parent, controller := range map[string]string{"via-traefik": traefikController, "via-eg": egController} {
				found := false
				for _, p := range r.Status.Parents {
					found = found || string(p.ParentRef.Name) == parent && string(p.ControllerName) == controller
				}
				assert.True(c, found, "an entry for parent %s by %s: %+v", parent, controller, r.Status.Parents)
			}
		}, 2*waitTimeout, tick)
		return a, e
	}
	a, e := verdicts(httproute.Accepted)
	t.Logf("accepted:\n  %s\n  %s", a.Message, e.Message)
	assert.Contains(t, a.Message, traefikController)
	assert.Contains(t, e.Message, egController)

	// A merge patch (the controllers write status all the time: no resourceVersion to race).
	_, err = gw.GatewayV1().HTTPRoutes(ns).Patch(ctxFor(t), "both", types.MergePatchType,
		[]byte(`{"spec":{"rules":[{"backendRefs":[{"name":"external","port":80,"weight":1}]}]}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	a, e = verdicts(httproute.Rejected)
	t.Logf("rejected:\n  %s\n  %s", a.Message, e.Message)
	assert.Contains(t, a.Message, "ExternalName is not supported")
	assert.Contains(t, e.Message, "UnsupportedValue")
	assert.Contains(t, a.Message, "generation 2")
	assert.Contains(t, e.Message, "generation 2")
}
