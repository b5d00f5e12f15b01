package httproute

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/weights"
)

// MaxBackends is Gateway API's limit on backendRefs in one HTTPRoute rule.
const MaxBackends = 16

// Errors that make a TrafficMap unpublishable through this sink. They are user errors: the
// route already stored stays as it is.
var (
	ErrTooManyEntries  = errors.New("gateway api httproute rules support at most 16 backendRefs")
	ErrNoHostname      = errors.New("no hostname")
	ErrInvalidHostname = errors.New("invalid hostname")
	ErrInvalidBackend  = errors.New("invalid backend")
	ErrInvalidSource   = errors.New("invalid source")
)

// Config is the sink's static configuration, fixed at start-up.
type Config struct {
	// Gateway is the parent Gateway; an empty Namespace means the route's namespace.
	Gateway types.NamespacedName
	// GatewaySection is the optional listener name on the parent Gateway.
	GatewaySection string
	// HostTemplate renders the hostname when the source has no ome.io/global-host
	// annotation; it sees {{.Namespace}} and {{.Service}}. Nil means no template.
	HostTemplate *template.Template
	// RewriteHostname adds a per-backend URLRewrite filter setting Host to the endpoint host.
	RewriteHostname bool
}

// Source identifies the TrafficMap a route is built for.
type Source struct {
	Namespace string
	Name      string // the TrafficMap name
	Service   string // spec.service, the InferenceService name
	// GlobalHost is the source's ome.io/global-host annotation, "" when absent.
	GlobalHost string
	// UID is the TrafficMap's metadata.uid. When set, the route and every Service carry an
	// ownerReference to the TrafficMap (see OwnerReference), so Kubernetes' garbage
	// collector deletes them with the map; "" writes none.
	UID types.UID
}

// OwnerReference returns the reference to src's TrafficMap that the route and Services
// carry: apiVersion ome.io/v1beta1, kind TrafficMap, its name and UID. It is not a
// controller reference and does not block the owner's deletion: the publisher, not the
// TrafficMap's controller, writes these objects, and blockOwnerDeletion would need update
// on trafficmaps/finalizers. ok is false when src has no UID.
func OwnerReference(src Source) (ref metav1.OwnerReference, ok bool) {
	if src.UID == "" {
		return metav1.OwnerReference{}, false
	}
	return metav1.OwnerReference{APIVersion: OwnerAPIVersion, Kind: OwnerKind, Name: src.Name, UID: src.UID}, true
}

// The TrafficMap's group version and kind, as its ownerReferences name them.
const (
	OwnerAPIVersion = "ome.io/v1beta1"
	OwnerKind       = "TrafficMap"
)

func ownerReferences(src Source) []metav1.OwnerReference {
	if ref, ok := OwnerReference(src); ok {
		return []metav1.OwnerReference{ref}
	}
	return nil
}

// Key returns the source's namespace/name.
func (s Source) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
}

// Desired is everything the sink stores for one TrafficMap.
type Desired struct {
	Route *gwapiv1.HTTPRoute
	// Kind is the backend kind the route's backendRefs point at.
	Kind BackendKind
	// Services are the backend Services (ExternalName or selector-less), sorted by cluster;
	// none for BackendEnvoyGateway.
	Services []*corev1.Service
	// EndpointSlices are the selector-less Services' slices (BackendEndpointSlice), by
	// cluster, then IPv4 before IPv6.
	EndpointSlices []*discoveryv1.EndpointSlice
	// Backends are Envoy Gateway Backends (BackendEnvoyGateway), sorted by cluster.
	Backends []*unstructured.Unstructured
}

// Inputs is what the route records about how it was built.
type Inputs struct {
	// Generation is the TrafficMap generation.
	Generation int64
	// Drains is the drain set the weights were computed with.
	Drains []weights.Drain
	// Taints are the NoExecute taints of each entry cluster the weights were computed with,
	// recorded as AnnotationClusterTaints; nil records nothing.
	Taints map[string][]weights.Taint
	// Tolerations are the service tolerations the weights were computed with, recorded as
	// AnnotationServiceTolerations; nil records nothing.
	Tolerations []weights.Toleration
	// Backends says which backend kind to build and with which resolved addresses.
	Backends Backends
}

// hostData is what HostTemplate sees.
type hostData struct{ Namespace, Service string }

// Hostname returns the published hostname for src: the annotation wins, then the template.
func (c Config) Hostname(src Source) (string, error) {
	host := src.GlobalHost
	if host == "" && c.HostTemplate != nil {
		var buf bytes.Buffer
		if err := c.HostTemplate.Execute(&buf, hostData{Namespace: src.Namespace, Service: src.Service}); err != nil {
			return "", fmt.Errorf("render --host-template: %w", err)
		}
		host = buf.String()
	}
	if host == "" {
		return "", fmt.Errorf("%w: inferenceservice %s/%s has no %s annotation and no --host-template is set",
			ErrNoHostname, src.Namespace, src.Service, "ome.io/global-host")
	}
	if net.ParseIP(host) != nil {
		return "", fmt.Errorf("%w %q: an IP address is not allowed", ErrInvalidHostname, host)
	}
	check := host
	if len(check) > 2 && check[:2] == "*." {
		check = check[2:]
	}
	if errs := validation.IsDNS1123Subdomain(check); len(errs) > 0 {
		return "", fmt.Errorf("%w %q: %s", ErrInvalidHostname, host, errs[0])
	}
	return host, nil
}

// Build returns the route and Services for src at the effective weights in res. It is pure
// and deterministic; every field the API server would default is set explicitly so that a
// stored object can be compared with the desired one.
func Build(cfg Config, src Source, res weights.Result, in Inputs) (*Desired, error) {
	for _, v := range []string{src.Namespace, src.Name} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("%w: trafficmap %s: %q cannot be used as a label value: %s", ErrInvalidSource, src.Key(), v, errs[0])
		}
	}
	if n := len(res.Entries); n > MaxBackends {
		return nil, fmt.Errorf("%w: trafficmap %s has %d entries (spec.entries)", ErrTooManyEntries, src.Key(), n)
	}
	host, err := cfg.Hostname(src)
	if err != nil {
		return nil, err
	}
	if lieplant.On && lieplant.Is(lieplant.KindRivalName) {
		host = lieplant.RivalName(host)
	}
	drains := weights.EncodeDrains(in.Drains)

	route := &gwapiv1.HTTPRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: gwapiv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            RouteName(src.Name),
			Namespace:       src.Namespace,
			Labels:          ownerLabels(src),
			OwnerReferences: ownerReferences(src),
			Annotations: map[string]string{
				AnnotationDrains:               drains,
				AnnotationTrafficMapGeneration: strconv.FormatInt(in.Generation, 10),
			},
		},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{cfg.parentRef()}},
			Hostnames:       []gwapiv1.Hostname{gwapiv1.Hostname(host)},
			Rules: []gwapiv1.HTTPRouteRule{{
				Matches: []gwapiv1.HTTPRouteMatch{{Path: &gwapiv1.HTTPPathMatch{
					Type:  ptr(gwapiv1.PathMatchPathPrefix),
					Value: ptr("/"),
				}}},
			}},
		},
	}

	if kind := in.Backends.kind(); kind != BackendExternalName {
		// Absent means service-externalname, so routes built before kinds existed stay as
		// they are (no rewrite of every route on upgrade).
		route.Annotations[AnnotationBackendKind] = string(kind)
	}
	if in.Taints != nil {
		route.Annotations[AnnotationClusterTaints] = weights.EncodeClusterTaints(in.Taints)
	}
	if in.Tolerations != nil {
		route.Annotations[AnnotationServiceTolerations] = weights.EncodeTolerations(in.Tolerations)
	}

	d := &Desired{Route: route, Services: make([]*corev1.Service, 0, len(res.Entries))}
	for _, e := range res.Entries {
		if errs := validation.IsValidLabelValue(e.Cluster); len(errs) > 0 {
			return nil, fmt.Errorf("%w: trafficmap %s entry %q: cluster cannot be used as a label value: %s", ErrInvalidBackend, src.Key(), e.Cluster, errs[0])
		}
		obj, err := d.addBackend(src, e, in.Backends)
		if err != nil {
			return nil, err
		}
		ref := gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{BackendObjectReference: obj, Weight: ptr(e.Effective)}}
		if cfg.RewriteHostname {
			ref.Filters = []gwapiv1.HTTPRouteFilter{{
				Type:       gwapiv1.HTTPRouteFilterURLRewrite,
				URLRewrite: &gwapiv1.HTTPURLRewriteFilter{Hostname: ptr(gwapiv1.PreciseHostname(e.Endpoint.Host))},
			}}
		}
		route.Spec.Rules[0].BackendRefs = append(route.Spec.Rules[0].BackendRefs, ref)
	}
	return d, nil
}

func buildService(src Source, e weights.EffectiveEntry) *corev1.Service {
	labels := ownerLabels(src)
	labels[LabelCluster] = e.Cluster
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            ServiceName(src.Namespace, src.Name, e.Cluster),
			Namespace:       src.Namespace,
			Labels:          labels,
			OwnerReferences: ownerReferences(src),
		},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: e.Endpoint.Host,
			Ports: []corev1.ServicePort{{
				Name:     e.Endpoint.Scheme,
				Protocol: corev1.ProtocolTCP,
				Port:     e.Endpoint.Port,
			}},
		},
	}
}

// parentRef returns the route's parentRef with every defaulted field set.
func (c Config) parentRef() gwapiv1.ParentReference {
	ref := gwapiv1.ParentReference{
		Group: ptr(gwapiv1.Group(gwapiv1.GroupName)),
		Kind:  ptr(gwapiv1.Kind("Gateway")),
		Name:  gwapiv1.ObjectName(c.Gateway.Name),
	}
	if c.Gateway.Namespace != "" {
		ref.Namespace = ptr(gwapiv1.Namespace(c.Gateway.Namespace))
	}
	if c.GatewaySection != "" {
		ref.SectionName = ptr(gwapiv1.SectionName(c.GatewaySection))
	}
	return ref
}

// OwnerLabels returns the labels that mark an object as the publisher's, for src.
func OwnerLabels(src Source) map[string]string { return ownerLabels(src) }

func ownerLabels(src Source) map[string]string {
	return map[string]string{
		LabelManagedBy:       ManagedByValue,
		LabelSourceNamespace: src.Namespace,
		LabelSourceName:      src.Name,
	}
}

// Owned reports whether an object with these labels belongs to the publisher for src.
func Owned(labels map[string]string, src Source) bool {
	return labels[LabelManagedBy] == ManagedByValue &&
		labels[LabelSourceNamespace] == src.Namespace &&
		labels[LabelSourceName] == src.Name
}

// SourceOf returns the TrafficMap namespace/name an owned object was created for.
func SourceOf(labels map[string]string) (types.NamespacedName, bool) {
	if labels[LabelManagedBy] != ManagedByValue || labels[LabelSourceNamespace] == "" || labels[LabelSourceName] == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: labels[LabelSourceNamespace], Name: labels[LabelSourceName]}, true
}

// RecordedDrains returns the drain set stored on a route built by Build, and whether the
// route carried one. The record is parsed with the same strict parser as the annotation.
func RecordedDrains(route *gwapiv1.HTTPRoute) ([]weights.Drain, bool) {
	if route == nil {
		return nil, false
	}
	v, ok := route.Annotations[AnnotationDrains]
	if !ok {
		return nil, false
	}
	drains, err := weights.ParseDrains(v)
	if err != nil {
		return nil, false
	}
	return drains, true
}

// RouteWeights returns the backend weights stored on a route built by Build, keyed by
// cluster (read from the backend Service names), and whether any of them is positive.
func RouteWeights(route *gwapiv1.HTTPRoute) (weightsByBackend map[string]int32, positive bool) {
	weightsByBackend = map[string]int32{}
	if route == nil {
		return weightsByBackend, false
	}
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			w := int32(1)
			if ref.Weight != nil {
				w = *ref.Weight
			}
			weightsByBackend[string(ref.Name)] = w
			if w > 0 {
				positive = true
			}
		}
	}
	return weightsByBackend, positive
}

func ptr[T any](v T) *T { return &v }
