package httproute

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ErrBackendAPIMissing marks a map whose backend kind is envoy-gateway-backend while the API
// server does not serve Envoy Gateway's Backend API.
var ErrBackendAPIMissing = errors.New("envoy gateway's Backend API is not installed/enabled")

// kindObjects writes, reads and deletes the backend objects of the kinds beyond Services:
// EndpointSlices and Envoy Gateway Backends. They are read through the API (a List by the
// map's ownership labels), and only for a map whose desired or stored route uses the kind,
// or on Delete; a map of service-externalname costs no extra read.
type kindObjects struct {
	kube         kubernetes.Interface
	fieldManager string
	dyn          dynamic.Interface // nil: Envoy Gateway Backends cannot be written or listed
	// sweepBackends reports that the API server serves Envoy Gateway's Backend API, so a
	// map may have Backends left from a kind it used before; they are looked for once the
	// gateway settled. nil: never.
	sweepBackends func() bool
	// settled reports whether the gateway serves the stored route at its generation: only
	// then do the backend objects of a kind the route no longer uses go.
	settled func(*gwapiv1.HTTPRoute) bool
}

// WithBackendKinds returns a copy of w that also writes the EndpointSlices and (with dyn)
// the Envoy Gateway Backends of Desired, and moves a map between kinds without a gap: the
// objects of a kind the route no longer uses are deleted only once settled reports that the
// gateway accepted the route at the generation that uses the new kind (nil: at once).
// sweepBackends says whether the Backend API is served: a settled map is then checked for Backends
// left from a kind it used before (one List per such Sync), and Delete removes them.
func (w *Writer) WithBackendKinds(dyn dynamic.Interface, sweepBackends func() bool, settled func(*gwapiv1.HTTPRoute) bool) *Writer {
	c := *w
	c.kinds = &kindObjects{kube: w.kube, fieldManager: w.fieldManager, dyn: dyn, sweepBackends: sweepBackends, settled: settled}
	return &c
}

// routeKind is the backend kind a stored route uses (AnnotationBackendKind; absent:
// service-externalname).
func routeKind(route *gwapiv1.HTTPRoute) BackendKind {
	if route == nil {
		return ""
	}
	if k := route.Annotations[AnnotationBackendKind]; k != "" {
		return BackendKind(k)
	}
	return BackendExternalName
}

// settledOn reports whether old-kind objects may go now that route is stored.
func (w *kindObjects) settledOn(route *gwapiv1.HTTPRoute) bool {
	return w.settled == nil || w.settled(route)
}

// staleServiceKept reports whether the stale Service svc stays for now: it is of another
// type than the desired Services (a kind switch) and the gateway has not settled on the
// route without it.
func (w *kindObjects) staleServiceKept(svc *corev1.Service, desired *Desired, route *gwapiv1.HTTPRoute) bool {
	want := corev1.ServiceTypeExternalName
	if desired.Kind == BackendEndpointSlice {
		want = corev1.ServiceTypeClusterIP
	}
	if desired.Kind == BackendEnvoyGateway {
		want = ""
	}
	return svc.Spec.Type != want && !w.settledOn(route)
}

func (w *kindObjects) applyOptions(force bool) metav1.ApplyOptions {
	return metav1.ApplyOptions{FieldManager: w.fieldManager, Force: force}
}

// ownerSelector selects src's objects by its ownership labels.
func ownerSelector(src Source) string {
	return labels.SelectorFromSet(ownerLabels(src)).String()
}

// syncSlices applies the desired EndpointSlices that differ from the stored ones and, when
// prune, deletes src's slices not desired. It returns the API writes made.
func (w *kindObjects) syncSlices(ctx context.Context, src Source, want []*discoveryv1.EndpointSlice, prune bool) (int, error) {
	client := w.kube.DiscoveryV1().EndpointSlices(src.Namespace)
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: ownerSelector(src)})
	if apierrors.IsForbidden(err) && len(want) == 0 {
		// A publisher without the endpointslices rule (an older chart) never wrote any;
		// those of an earlier one go with the TrafficMap through their ownerReferences.
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list endpointslices of trafficmap %s: %w", src.Key(), err)
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}
	writes := 0
	for _, s := range want {
		cur := have[s.Name]
		delete(have, s.Name)
		if cur != nil && endpointSliceMatches(s, cur) {
			continue
		}
		uid := endpointSliceUID(cur)
		if _, err := client.Apply(ctx, endpointSliceApply(s, uid), w.applyOptions(cur != nil)); err != nil {
			if apierrors.IsConflict(err) && cur == nil {
				return writes, conflict("endpointslice", s.Namespace, s.Name)
			}
			return writes, fmt.Errorf("apply endpointslice %s/%s: %w", s.Namespace, s.Name, err)
		}
		writes++
	}
	if !prune {
		return writes, nil
	}
	for _, name := range sortedKeys(have) {
		s := have[name]
		err := client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return writes, fmt.Errorf("delete endpointslice %s/%s: %w", s.Namespace, name, err)
		}
		writes++
	}
	return writes, nil
}

func endpointSliceUID(s *discoveryv1.EndpointSlice) (uid types.UID) {
	if s != nil {
		uid = s.UID
	}
	return uid
}

// endpointSliceMatches reports whether cached holds what desired sets: its labels and
// ownerReferences, address type, endpoints (addresses and ready) and ports.
func endpointSliceMatches(desired, cached *discoveryv1.EndpointSlice) bool {
	if !subset(desired.Labels, cached.Labels) || !hasOwnerReferences(desired.OwnerReferences, cached.OwnerReferences) ||
		desired.AddressType != cached.AddressType || len(desired.Endpoints) != len(cached.Endpoints) ||
		!equality.Semantic.DeepEqual(desired.Ports, cached.Ports) {
		return false
	}
	for i, e := range desired.Endpoints {
		c := cached.Endpoints[i]
		if !slices.Equal(e.Addresses, c.Addresses) || !equality.Semantic.DeepEqual(e.Conditions.Ready, c.Conditions.Ready) {
			return false
		}
	}
	return true
}

// syncEnvoyBackends applies the desired Envoy Gateway Backends that differ from the stored
// ones and, when prune, deletes src's Backends not desired. A Backend API the API server
// does not serve is ErrBackendAPIMissing when Backends are desired, and nothing to prune
// otherwise.
func (w *kindObjects) syncEnvoyBackends(ctx context.Context, src Source, want []*unstructured.Unstructured, prune bool) (int, error) {
	if w.dyn == nil {
		if len(want) > 0 {
			return 0, fmt.Errorf("%w: the publisher has no client for it", ErrBackendAPIMissing)
		}
		return 0, nil
	}
	client := w.dyn.Resource(EnvoyBackendGVR).Namespace(src.Namespace)
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: ownerSelector(src)})
	if apierrors.IsForbidden(err) && len(want) == 0 {
		// The RBAC rule for Backends is only granted with --backend-kind
		// envoy-gateway-backend (chart); Backends left from it go with the TrafficMap
		// through their ownerReferences.
		return 0, nil
	}
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		if len(want) > 0 {
			return 0, fmt.Errorf("%w: the API server does not serve %s (install Envoy Gateway's CRDs and enable its Backend API with extensionApis.enableBackend: true, or use --backend-kind endpointslice)",
				ErrBackendAPIMissing, EnvoyBackendGVR.GroupResource())
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list envoy gateway backends of trafficmap %s: %w", src.Key(), err)
	}
	have := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		have[list.Items[i].GetName()] = &list.Items[i]
	}
	writes := 0
	for _, b := range want {
		cur := have[b.GetName()]
		delete(have, b.GetName())
		if cur != nil && envoyBackendMatches(b, cur) {
			continue
		}
		apply := b.DeepCopy()
		if cur != nil {
			apply.SetUID(cur.GetUID())
		}
		if _, err := client.Apply(ctx, b.GetName(), apply, w.applyOptions(cur != nil)); err != nil {
			if apierrors.IsConflict(err) && cur == nil {
				return writes, conflict("backend", b.GetNamespace(), b.GetName())
			}
			return writes, fmt.Errorf("apply envoy gateway backend %s/%s: %w", b.GetNamespace(), b.GetName(), err)
		}
		writes++
	}
	if !prune {
		return writes, nil
	}
	for _, name := range sortedKeys(have) {
		uid := have[name].GetUID()
		err := client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return writes, fmt.Errorf("delete envoy gateway backend %s/%s: %w", src.Namespace, name, err)
		}
		writes++
	}
	return writes, nil
}

// envoyBackendMatches reports whether cached holds desired's labels, ownerReferences and
// spec.endpoints (the fields the publisher sets; Envoy Gateway's CRD defaults others).
func envoyBackendMatches(desired, cached *unstructured.Unstructured) bool {
	want, _, _ := unstructured.NestedSlice(desired.Object, "spec", "endpoints")
	have, _, _ := unstructured.NestedSlice(cached.Object, "spec", "endpoints")
	return subset(desired.GetLabels(), cached.GetLabels()) &&
		hasOwnerReferences(desired.GetOwnerReferences(), cached.GetOwnerReferences()) &&
		equality.Semantic.DeepEqual(want, have)
}

// syncKinds writes the desired EndpointSlices and Backends (before the route) when the
// desired route uses their kind; it prunes none (pruneKinds does, after).
func (w *kindObjects) syncKinds(ctx context.Context, src Source, desired *Desired) (int, error) {
	writes := 0
	if desired.Kind == BackendEndpointSlice {
		n, err := w.syncSlices(ctx, src, desired.EndpointSlices, false)
		if writes += n; err != nil {
			return writes, err
		}
	}
	if desired.Kind == BackendEnvoyGateway {
		n, err := w.syncEnvoyBackends(ctx, src, desired.Backends, false)
		if writes += n; err != nil {
			return writes, err
		}
	}
	return writes, nil
}

// pruneKinds deletes src's EndpointSlices and Backends that desired does not hold. Of the
// desired kind they go at once (as stale Services do). Of another kind they go only once
// the gateway settled on the stored route (settledOn): EndpointSlices when src still owns a
// selector-less Service (the sign that slices may be left; the Services go after the
// slices, so a failed delete is retried) or the stored route used them before (previous),
// Backends when the stored route used them before or the Backend API is served
// (sweepBackends).
func (w *kindObjects) pruneKinds(ctx context.Context, src Source, desired *Desired, previous BackendKind, owned []*corev1.Service, route *gwapiv1.HTTPRoute) (int, error) {
	writes := 0
	settled := w.settledOn(route)
	slicesLeft := previous == BackendEndpointSlice || slices.ContainsFunc(owned, func(s *corev1.Service) bool {
		return s.Spec.Type == corev1.ServiceTypeClusterIP
	})
	if desired.Kind == BackendEndpointSlice || settled && slicesLeft {
		n, err := w.syncSlices(ctx, src, desired.EndpointSlices, true)
		if writes += n; err != nil {
			return writes, err
		}
	}
	backendsLeft := previous == BackendEnvoyGateway || w.dyn != nil && w.sweepBackends != nil && w.sweepBackends()
	if desired.Kind == BackendEnvoyGateway || settled && backendsLeft {
		n, err := w.syncEnvoyBackends(ctx, src, desired.Backends, true)
		if writes += n; err != nil {
			return writes, err
		}
	}
	return writes, nil
}

// deleteKinds deletes every EndpointSlice of src and, when the writer may hold them,
// every Envoy Gateway Backend of src.
func (w *kindObjects) deleteKinds(ctx context.Context, src Source) (int, error) {
	n, err := w.syncSlices(ctx, src, nil, true)
	if err != nil || w.dyn == nil {
		return n, err
	}
	m, err := w.syncEnvoyBackends(ctx, src, nil, true)
	return n + m, err
}
