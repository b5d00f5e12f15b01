//go:build e2e

package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The harness on hand-written objects, before the publisher writes any: Traefik resolves a
// route to two selector-less Services with EndpointSlices (weights 1 and 3) and splits real
// requests between the two backends within the binomial bound; it refuses an ExternalName
// Service (ResolvedRefs False) and answers that route's requests with HTTP 500.
func TestE2ETraefikHandWritten(t *testing.T) {
	ns := newNamespace(t)
	b := startBackends(t, "worker-a", "worker-b")
	tr := traefikGateway(t, ns)
	client := proxyClient()

	backendService(t, ns, "split-a", b.Addrs["worker-a"])
	backendService(t, ns, "split-b", b.Addrs["worker-b"])
	host := "split." + ns + ".example.com"
	createRoute(t, ns, "split", host, []string{gatewayName}, weightedRef("split-a", 1), weightedRef("split-b", 3))
	// Traefik may read the route before its informer holds split-b's EndpointSlice (False,
	// "endpointslices not found"); it reports again once it does.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cond := routeParentCondition(t, ns, "split", gatewayName, traefikController, string(gwapiv1.RouteConditionResolvedRefs))
		assert.Equal(c, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
	}, waitTimeout, tick)
	cond := routeParentCondition(t, ns, "split", gatewayName, traefikController, string(gwapiv1.RouteConditionAccepted))
	require.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)

	// Traefik loads the route a throttle interval after the status: wait for the first answer.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		who, err := getCluster(client, "http://"+tr.Addr+"/", host)
		require.NoError(c, err)
		assert.Contains(c, []string{"worker-a", "worker-b"}, who)
	}, waitTimeout, tick)
	const n = 400
	got := spreadHTTP(t, client, tr.Addr, host, n)
	t.Logf("Traefik %s, weights 1:3, %d requests: %v", traefikVersion, n, got)
	requireShares(t, got, map[string]int{"worker-a": 1, "worker-b": 3}, n)

	// An ExternalName Service: refused, and its requests get HTTP 500.
	_, err := kube.CoreV1().Services(ns).Create(ctxFor(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: backendPortName, Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	extHost := "external." + ns + ".example.com"
	createRoute(t, ns, "external", extHost, []string{gatewayName}, weightedRef("external", 1))
	cond = routeParentCondition(t, ns, "external", gatewayName, traefikController, string(gwapiv1.RouteConditionResolvedRefs))
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, "ExternalName is not supported")
	t.Logf("Traefik on an ExternalName backend: ResolvedRefs=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		who, err := getCluster(client, "http://"+tr.Addr+"/", extHost)
		require.NoError(c, err)
		assert.Equal(c, "HTTP 500", who)
	}, waitTimeout, tick)
}

// The Envoy Gateway controller on hand-written routes of each backend kind: an ExternalName
// Service is refused (ResolvedRefs False, UnsupportedValue), a selector-less Service with an
// EndpointSlice and an Envoy Gateway Backend with an FQDN endpoint resolve.
func TestE2EEnvoyGatewayHandWritten(t *testing.T) {
	ns := newNamespace(t)
	egGateway(t, gatewayName, ns)

	_, err := kube.CoreV1().Services(ns).Create(ctxFor(t), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "chat.worker-a.example.com",
			Ports: []corev1.ServicePort{{Name: backendPortName, Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	createRoute(t, ns, "external", "external."+ns+".example.com", []string{gatewayName}, weightedRef("external", 1))

	backendService(t, ns, "sliced", "198.18.0.2")
	createRoute(t, ns, "sliced", "sliced."+ns+".example.com", []string{gatewayName}, weightedRef("sliced", 1))

	createEGBackend(t, ns, "fqdn", "chat.worker-a.example.com", 443)
	ref := weightedRef("fqdn", 1)
	ref.Group = ptr.To(gwapiv1.Group("gateway.envoyproxy.io"))
	ref.Kind = ptr.To(gwapiv1.Kind("Backend"))
	ref.Port = ptr.To[gwapiv1.PortNumber](443)
	createRoute(t, ns, "fqdn", "fqdn."+ns+".example.com", []string{gatewayName}, ref)

	resolved := string(gwapiv1.RouteConditionResolvedRefs)
	cond := routeParentCondition(t, ns, "external", gatewayName, egController, resolved)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "UnsupportedValue", cond.Reason)
	assert.Contains(t, cond.Message, "ExternalName, which is not supported as a backend")
	t.Logf("Envoy Gateway on an ExternalName backend: ResolvedRefs=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	for _, route := range []string{"sliced", "fqdn"} {
		// Envoy Gateway may judge a route before its cache has the Backend it names
		// (BackendNotFound), then judges it again: wait for its settled verdict.
		require.Eventually(t, func() bool {
			return routeParentCondition(t, ns, route, gatewayName, egController, resolved).Status == metav1.ConditionTrue
		}, waitTimeout, tick, "%s: ResolvedRefs True", route)
		cond := routeParentCondition(t, ns, route, gatewayName, egController, resolved)
		assert.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s: %s", route, cond.Reason, cond.Message)
		cond = routeParentCondition(t, ns, route, gatewayName, egController, string(gwapiv1.RouteConditionAccepted))
		assert.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s: %s", route, cond.Reason, cond.Message)
	}
}
