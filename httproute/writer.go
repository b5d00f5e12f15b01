package httproute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// ErrConflict marks an object at a name the publisher needs that the publisher does not own.
// It is a user error: the object is left untouched.
var ErrConflict = errors.New("exists and is not owned by the publisher")

// Store reads the objects currently stored; publish backs it with informer listers. Returned
// objects are shared cache copies and must not be modified.
type Store interface {
	// Route returns the HTTPRoute at namespace/name, or nil when there is none.
	Route(namespace, name string) (*gwapiv1.HTTPRoute, error)
	// Services returns the Services owned by src.
	Services(src Source) ([]*corev1.Service, error)
	// RoutesSeen and ServicesSeen return the resourceVersion up to which the route and the
	// Service cache of namespace have received the API server's events ("" when unknown). A
	// write at a newer resourceVersion has not reached the cache yet, so the cache's lack of
	// it says nothing: the sink judges from the write, without reading it back.
	RoutesSeen(namespace string) string
	ServicesSeen(namespace string) string
}

// Writer stores desired objects by server-side apply under its field manager, forcing
// conflicts: the publisher owns the labels and annotations it sets and the whole spec it
// sets, and leaves every other field (another manager's labels, annotations, status) alone.
// It is safe for concurrent use on different sources.
type Writer struct {
	kube         kubernetes.Interface
	gateway      gwclient.Interface
	fieldManager string
	// adoptOME: a route at a needed name that OME's publisher wrote for the map is adopted
	// (AdoptionOf, AdoptOME) instead of refused; accepted says when the gateway serves the
	// adopted route's stored generation (OME's Services may go then).
	adoptOME bool
	accepted func(*gwapiv1.HTTPRoute) bool
	// kinds writes the backend kinds beyond Services: EndpointSlices always, Envoy Gateway
	// Backends with WithBackendKinds.
	kinds *kindObjects
}

// NewWriter returns a Writer that applies with the given clients as fieldManager.
func NewWriter(kube kubernetes.Interface, gateway gwclient.Interface, fieldManager string) *Writer {
	return &Writer{kube: kube, gateway: gateway, fieldManager: fieldManager,
		kinds: &kindObjects{kube: kube, fieldManager: fieldManager}}
}

// AdoptingFromOME returns a copy of w that adopts what OME's built-in publisher wrote for a
// map (AdoptOME): its route at the map's route name is updated in place into the
// publisher's (the publisher's content and labels, OME's ownership labels removed; never
// deleted and created again), and OME's backend Services for the map are deleted once the
// stored route no longer refers to them and accepted reports that the gateway accepted
// that generation of it (a gateway still on an older one would point at Services that are
// gone); until then the route keeps OME's labels, which mark the adoption as unfinished.
// The publisher runs it only once a map was handed over from OME's publisher
// (--take-over-from gatewayapi), which by OME's rules then no longer writes the map.
func (w *Writer) AdoptingFromOME(accepted func(*gwapiv1.HTTPRoute) bool) *Writer {
	c := *w
	c.adoptOME, c.accepted = true, accepted
	return &c
}

// SyncResult reports what Sync stored.
type SyncResult struct {
	// Route is the route as stored after Sync.
	Route *gwapiv1.HTTPRoute
	// Writes counts the API writes Sync made (0 when everything already matched).
	Writes int
	// RouteWritten reports whether Sync applied the route (Route is then the API server's
	// answer to that apply).
	RouteWritten bool
	// Services are the backend Services Sync applied, each as the API server answered that
	// apply, in desired order (none when every Service already matched). On error they
	// still list every apply that succeeded.
	Services []*corev1.Service
	// Pruned are the Services Sync deleted because they are no longer desired, as store
	// returned them (shared copies: not to be modified), in name order.
	Pruned []*corev1.Service
}

// Sync makes the stored objects for src hold desired in the fields the publisher owns:
// backend Services first, then the route, then it prunes Services no longer referenced, so
// the route never points at a missing Service. It applies only objects whose cached copy
// differs in those fields (see Matches) and refuses (ErrConflict) any object at a needed
// name that src does not own; a name with no cached copy is applied without force, so an
// object someone else holds there conflicts instead of being taken over (see applyRoute).
// The route and the Services are compared with what store returns, so store must return
// each at least as new as the caller's last write of it, and no Service the caller has
// deleted since (the Sink keeps that promise with per-map expectations; SyncResult
// reports what Sync applied and deleted). On error, objects already written stay written
// and a retry converges.
func (w *Writer) Sync(ctx context.Context, src Source, desired *Desired, store Store) (SyncResult, error) {
	var res SyncResult
	current, err := store.Route(desired.Route.Namespace, desired.Route.Name)
	if err != nil {
		return res, fmt.Errorf("read httproute: %w", err)
	}
	adoption := AdoptOwned
	if current != nil {
		if adoption = AdoptionOf(current.Labels, src, w.adoptOME); adoption == AdoptNone {
			return res, conflict("httproute", current.Namespace, current.Name)
		}
	}
	owned, err := store.Services(src)
	if err != nil {
		return res, fmt.Errorf("read services: %w", err)
	}
	byName := make(map[string]*corev1.Service, len(owned))
	for _, s := range owned {
		byName[s.Name] = s
	}

	if err := w.syncServices(ctx, src, desired, byName, &res); err != nil {
		return res, err
	}
	n, err := w.kinds.syncKinds(ctx, src, desired)
	if res.Writes += n; err != nil {
		return res, err
	}

	res.Route = current
	if current == nil || !Matches(desired.Route, current) || adoption == AdoptOME && !Owned(current.Labels, src) {
		applied, err := w.applyRoute(ctx, src, desired.Route, current)
		if err != nil {
			return res, err
		}
		res.Route, res.Writes, res.RouteWritten = applied, res.Writes+1, true
	}
	if w.adoptOME && OMEOwned(res.Route.Labels, src) && w.accepted(res.Route) {
		// The route is the publisher's now, refers to its Services only, and the gateway
		// accepted that generation: OME's go, then OME's labels leave the route (they mark
		// the adoption as unfinished until then, so a step not done yet, or failed, is
		// done by a later Sync: the gateway's status update reconciles the map).
		if err := w.finishAdoption(ctx, src, &res); err != nil {
			return res, err
		}
	}

	n, err = w.kinds.pruneKinds(ctx, src, desired, routeKind(current), owned, res.Route)
	if res.Writes += n; err != nil {
		return res, err
	}
	for _, stale := range sortedServices(byName) {
		if w.kinds.staleServiceKept(stale, desired, res.Route) {
			continue // a kind switch: the old kind's Service serves until the gateway settled
		}
		if err := w.deleteService(ctx, stale); err != nil {
			return res, err
		}
		res.Pruned = append(res.Pruned, stale)
		res.Writes++
	}
	return res, nil
}

// syncServices applies the desired Services that differ from their stored copies in byName
// (removing each desired one from byName) and records the applies in res.
func (w *Writer) syncServices(ctx context.Context, src Source, desired *Desired, byName map[string]*corev1.Service, res *SyncResult) error {
	// The backend Services are independent of one another: write them at once (a new map's
	// eight cost one round trip, not eight), all before the route that refers to them.
	applied := make([]*corev1.Service, len(desired.Services))
	errs := make([]error, len(desired.Services))
	var wg sync.WaitGroup
	for i, want := range desired.Services {
		wg.Go(func() { applied[i], errs[i] = w.syncService(ctx, src, want, byName[want.Name]) })
	}
	wg.Wait()
	for i, want := range desired.Services {
		if applied[i] != nil {
			res.Services = append(res.Services, applied[i])
			res.Writes++
		}
		delete(byName, want.Name)
	}
	for _, err := range errs {
		if err != nil { // the first in desired order, so the error is deterministic
			return err
		}
	}
	return nil
}

// Delete removes every object the publisher stored for src. With adoption from OME on
// (AdoptingFromOME) what OME's publisher wrote for src's map counts as stored for it too
// (AdoptionOf, AdoptOME): its route and its backend Services go as well, so a map handed
// over and deleted before its route was adopted leaves no route holding its hostname. It
// is idempotent: objects already gone are not an error, and objects src does not own are
// never touched.
func (w *Writer) Delete(ctx context.Context, src Source, store Store) (deleted int, err error) {
	route, err := store.Route(src.Namespace, RouteName(src.Name))
	if err != nil {
		return 0, fmt.Errorf("read httproute: %w", err)
	}
	owned := route != nil && AdoptionOf(route.Labels, src, w.adoptOME) != AdoptNone
	if owned {
		err := w.gateway.GatewayV1().HTTPRoutes(route.Namespace).Delete(ctx, route.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &route.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("delete httproute %s/%s: %w", route.Namespace, route.Name, err)
		}
		deleted++
	}
	services, err := store.Services(src)
	if err != nil {
		return deleted, fmt.Errorf("read services: %w", err)
	}
	// EndpointSlices and Backends are listed from the API, not the store: only for a map
	// whose route or Services the store holds (a namespace this publisher serves), so a map
	// of another publisher's namespace never loses them (a delete cut short after the route
	// and Services went leaves them to the TrafficMap's ownerReference).
	if owned || len(services) > 0 {
		n, err := w.kinds.deleteKinds(ctx, src)
		if deleted += n; err != nil {
			return deleted, err
		}
	}
	for _, svc := range services {
		if err := w.deleteService(ctx, svc); err != nil {
			return deleted, err
		}
		deleted++
	}
	if w.adoptOME {
		n, err := w.deleteOMEServices(ctx, src)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// Route reads the HTTPRoute at namespace/name through the API (not a cache); nil when
// there is none.
func (w *Writer) Route(ctx context.Context, namespace, name string) (*gwapiv1.HTTPRoute, error) {
	route, err := w.gateway.GatewayV1().HTTPRoutes(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read httproute %s/%s: %w", namespace, name, err)
	}
	return route, nil
}

// Service reads the Service at namespace/name through the API (not a cache); nil when
// there is none.
func (w *Writer) Service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	svc, err := w.kube.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read service %s/%s: %w", namespace, name, err)
	}
	return svc, nil
}

// applyRoute applies want. With a cached copy (ours) the apply forces ownership and names
// the copy's UID, so a route that was replaced behind the cache is refused by the API
// server rather than taken over. Without one the apply does not force: it creates the
// route when the name is free, and a route someone else holds at the name (its fields owned
// by another manager) makes it conflict; only then is the route read, and applied with
// force if it is the publisher's after all (a cache behind, or a route an older publisher
// version wrote with an update), refused with ErrConflict otherwise. Creating costs one
// request, as a create did.
func (w *Writer) applyRoute(ctx context.Context, src Source, want, current *gwapiv1.HTTPRoute) (*gwapiv1.HTTPRoute, error) {
	client := w.gateway.GatewayV1().HTTPRoutes(want.Namespace)
	var uid types.UID
	if current != nil {
		uid = current.UID
	} else {
		applied, err := client.Apply(ctx, routeApply(want, ""), w.applyOptions(false))
		if !apierrors.IsConflict(err) {
			if err != nil {
				return nil, fmt.Errorf("apply httproute %s/%s: %w", want.Namespace, want.Name, err)
			}
			return applied, nil
		}
		live, err := client.Get(ctx, want.Name, metav1.GetOptions{})
		if err := claimable(src, "httproute", want.Namespace, want.Name, live, err, w.adoptOME); err != nil {
			return nil, err
		}
		if live != nil {
			uid = live.UID
		}
	}
	applied, err := client.Apply(ctx, routeApply(want, uid), w.applyOptions(true))
	if err != nil {
		return nil, fmt.Errorf("apply httproute %s/%s: %w", want.Namespace, want.Name, err)
	}
	return applied, nil
}

// syncService applies want unless current, its cached copy, already matches, and returns
// the API server's answer (nil when nothing was applied); see applyRoute for how an object
// not in the cache is treated.
func (w *Writer) syncService(ctx context.Context, src Source, want, current *corev1.Service) (*corev1.Service, error) {
	if current != nil && serviceMatches(want, current) {
		return nil, nil
	}
	client := w.kube.CoreV1().Services(want.Namespace)
	var uid types.UID
	if current != nil {
		uid = current.UID
	} else {
		applied, err := client.Apply(ctx, serviceApply(want, ""), w.applyOptions(false))
		if !apierrors.IsConflict(err) {
			if err != nil {
				return nil, fmt.Errorf("apply service %s/%s: %w", want.Namespace, want.Name, err)
			}
			return applied, nil
		}
		live, err := client.Get(ctx, want.Name, metav1.GetOptions{})
		if err := claimable(src, "service", want.Namespace, want.Name, live, err, false); err != nil {
			return nil, err
		}
		if live != nil {
			uid = live.UID
		}
	}
	applied, err := client.Apply(ctx, serviceApply(want, uid), w.applyOptions(true))
	if err != nil {
		return nil, fmt.Errorf("apply service %s/%s: %w", want.Namespace, want.Name, err)
	}
	return applied, nil
}

func (w *Writer) applyOptions(force bool) metav1.ApplyOptions {
	return metav1.ApplyOptions{FieldManager: w.fieldManager, Force: force}
}

func (w *Writer) deleteService(ctx context.Context, svc *corev1.Service) error {
	err := w.kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &svc.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// claimable reports whether the publisher may apply at namespace/name for src, given what a
// read of that name returned: yes when nothing is there or the object there is src's (the
// cache was behind) or, with fromOME, OME's for src's map (AdoptionOf), ErrConflict when it
// belongs to someone else.
func claimable[T metav1.Object](src Source, kind, namespace, name string, live T, err error, fromOME bool) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s %s/%s: %w", kind, namespace, name, err)
	}
	if AdoptionOf(live.GetLabels(), src, fromOME) == AdoptNone {
		return conflict(kind, namespace, name)
	}
	return nil
}

func conflict(kind, namespace, name string) error {
	return fmt.Errorf("%s %s/%s %w (labels %s=%s, %s and %s required); refusing to overwrite it",
		kind, namespace, name, ErrConflict, LabelManagedBy, ManagedByValue, LabelSourceNamespace, LabelSourceName)
}

// Matches reports whether cached holds exactly the desired content in the fields the
// publisher owns: every label and annotation desired sets, with its value, every
// ownerReference it sets (see hasOwnerReferences), and the
// parentRefs, hostnames and rules (atomic lists in Gateway API, so an apply owns each one
// whole). Labels, annotations, spec fields and status that other field managers set are
// theirs and never count as a difference.
func Matches(desired, cached *gwapiv1.HTTPRoute) bool {
	return subset(desired.Labels, cached.Labels) &&
		subset(desired.Annotations, cached.Annotations) &&
		hasOwnerReferences(desired.OwnerReferences, cached.OwnerReferences) &&
		equality.Semantic.DeepEqual(desired.Spec.ParentRefs, cached.Spec.ParentRefs) &&
		equality.Semantic.DeepEqual(desired.Spec.Hostnames, cached.Spec.Hostnames) &&
		equality.Semantic.DeepEqual(desired.Spec.Rules, cached.Spec.Rules)
}

// serviceMatches is Matches for a backend Service: the labels and ownerReferences desired
// sets, the type, the
// external name and the ports (name, port and protocol; the API server defaults the rest).
func serviceMatches(desired, cached *corev1.Service) bool {
	if !subset(desired.Labels, cached.Labels) ||
		!hasOwnerReferences(desired.OwnerReferences, cached.OwnerReferences) ||
		desired.Spec.Type != cached.Spec.Type ||
		desired.Spec.ExternalName != cached.Spec.ExternalName ||
		len(desired.Spec.Ports) != len(cached.Spec.Ports) {
		return false
	}
	for i, p := range desired.Spec.Ports {
		c := cached.Spec.Ports[i]
		if p.Name != c.Name || p.Port != c.Port || p.Protocol != c.Protocol {
			return false
		}
	}
	return true
}

// hasOwnerReferences reports whether have holds every reference of want, equal in every
// field (references other managers added are theirs).
func hasOwnerReferences(want, have []metav1.OwnerReference) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h metav1.OwnerReference) bool { return equality.Semantic.DeepEqual(w, h) }) {
			return false
		}
	}
	return true
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func sortedServices(m map[string]*corev1.Service) []*corev1.Service {
	out := make([]*corev1.Service, 0, len(m))
	for _, name := range sortedKeys(m) {
		out = append(out, m[name])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
