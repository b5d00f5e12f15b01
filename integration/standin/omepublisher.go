package standin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// OMEFieldManager is the field manager of OME's publisher writes.
const OMEFieldManager = "ome-trafficmap-publisher"

// OMEPublisher stands in for OME's built-in Gateway API publisher (`gatewayapi`, reference
// section 5.8) at the moment a migration starts: it has published a map once, and writes
// what it would have: one ExternalName Service `tmb-<digest>` per entry, the HTTPRoute
// `<name>-global` in the map's namespace, all with OME's ownership labels, then the map's
// claim journal (publisherName gatewayapi, claim `v1:httproute:<ns>/<name>-global`) and its
// Published condition. It runs no loop: by OME's rules its publisher refuses a map whose
// journal names another publisher, so once the map is handed over it writes nothing more.
type OMEPublisher struct {
	Kube    kubernetes.Interface
	Gateway gwclient.Interface
	Maps    omeclient.Interface
	// GatewayRef is the parent Gateway (namespace/name); Port the backend port.
	GatewayNamespace, GatewayName string
	Port                          int32
}

// OMEServiceName is OME's backend Service name for cluster of map ns/name.
func OMEServiceName(ns, name, cluster string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{"gateway-api-trafficmap-backend/v2", ns, name, cluster}, "\x00")))
	return "tmb-" + hex.EncodeToString(sum[:])[:52]
}

// omeLabels are OME's ownership labels for the InferenceService ns/name.
func omeLabels(ns, name string) map[string]string {
	return map[string]string{"ome.io/managed-by": "placement-endpoint", "ome.io/placement-endpoint-isvc": name,
		"ome.io/placement-endpoint-isvc-namespace": ns}
}

// Publish writes the map ns/name as OME's publisher would, with host as the route's
// hostname, and returns the route as stored.
func (o OMEPublisher) Publish(ctx context.Context, ns, name, host string) (*gwapiv1.HTTPRoute, error) {
	tm, err := o.Maps.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read trafficmap %s/%s: %w", ns, name, err)
	}
	create := metav1.CreateOptions{FieldManager: OMEFieldManager}
	rule := gwapiv1.HTTPRouteRule{Matches: []gwapiv1.HTTPRouteMatch{{Path: &gwapiv1.HTTPPathMatch{
		Type: ptr.To(gwapiv1.PathMatchPathPrefix), Value: ptr.To("/")}}}}
	for _, e := range tm.Spec.Entries {
		u, err := url.Parse(e.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("entry %s endpoint: %w", e.Cluster, err)
		}
		labels := omeLabels(ns, name)
		labels["ome.io/placement-cluster"] = e.Cluster
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: OMEServiceName(ns, name, e.Cluster), Namespace: ns, Labels: labels},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: u.Hostname(),
				Ports: []corev1.ServicePort{{Name: "http", Port: o.Port, Protocol: corev1.ProtocolTCP}}}}
		if _, err := o.Kube.CoreV1().Services(ns).Create(ctx, svc, create); err != nil {
			return nil, fmt.Errorf("create service %s: %w", svc.Name, err)
		}
		rule.BackendRefs = append(rule.BackendRefs, gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{
			BackendObjectReference: gwapiv1.BackendObjectReference{Kind: ptr.To(gwapiv1.Kind("Service")), Name: gwapiv1.ObjectName(svc.Name),
				Namespace: ptr.To(gwapiv1.Namespace(ns)), Port: ptr.To(o.Port)},
			Weight: ptr.To(e.Weight)}})
	}
	route := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: name + "-global", Namespace: ns, Labels: omeLabels(ns, name)},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Group: ptr.To(gwapiv1.Group(gwapiv1.GroupName)),
				Kind: ptr.To(gwapiv1.Kind("Gateway")), Namespace: ptr.To(gwapiv1.Namespace(o.GatewayNamespace)), Name: gwapiv1.ObjectName(o.GatewayName)}}},
			Hostnames: []gwapiv1.Hostname{gwapiv1.Hostname(host)},
			Rules:     []gwapiv1.HTTPRouteRule{rule}}}
	stored, err := o.Gateway.GatewayV1().HTTPRoutes(ns).Create(ctx, route, create)
	if err != nil {
		return nil, fmt.Errorf("create httproute %s: %w", route.Name, err)
	}
	if _, err := o.Maps.OmeV1beta1().TrafficMaps(ns).ApplyStatus(ctx, omeStatus(tm, route.Name), metav1.ApplyOptions{FieldManager: OMEFieldManager, Force: true}); err != nil {
		return nil, fmt.Errorf("apply trafficmap %s/%s status: %w", ns, name, err)
	}
	return stored, nil
}

// omeStatus is the status OME's publisher writes for tm published as route: published, the
// Published condition True, the observed generation, the gateway reference and the claim
// journal, at tm's resourceVersion. It is built here rather than by the publisher's
// model/statusapply, so that the chaos harness, which imports this package, depends on no
// package of the publisher it checks (integration/chaos/deps_test.go).
func omeStatus(tm *v1beta1.TrafficMap, route string) *omeac.TrafficMapApplyConfiguration {
	cond := metav1ac.Condition().WithType(v1beta1.ConditionPublished).WithStatus(metav1.ConditionTrue).WithReason("Published").
		WithMessage(`TrafficMap is published by publisher "gatewayapi"`).WithObservedGeneration(tm.Generation).WithLastTransitionTime(metav1.Now())
	st := omeac.TrafficMapStatus().WithPublished(true).WithConditions(cond).WithObservedTrafficMapGeneration(tm.Generation).
		WithGatewayRef(omeac.TrafficMapGatewayRef().WithGroup(gwapiv1.GroupName).WithKind("HTTPRoute").WithNamespace(tm.Namespace).WithName(route)).
		WithPublisher(omeac.TrafficMapPublisherStatus().WithPublisherName("gatewayapi").
			WithClaimedTargets("v1:httproute:" + tm.Namespace + "/" + route).WithObservedOptionsDigest("sha256:" + strings.Repeat("0", 64)))
	ac := omeac.TrafficMap(tm.Name, tm.Namespace).WithStatus(st)
	if tm.ResourceVersion != "" {
		ac.WithResourceVersion(tm.ResourceVersion)
	}
	return ac
}
