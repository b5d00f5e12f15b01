package httproute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
}

// Writer stores desired objects. It is safe for concurrent use on different sources.
type Writer struct {
	kube         kubernetes.Interface
	gateway      gwclient.Interface
	fieldManager string
}

// NewWriter returns a Writer that writes with the given clients under fieldManager.
func NewWriter(kube kubernetes.Interface, gateway gwclient.Interface, fieldManager string) *Writer {
	return &Writer{kube: kube, gateway: gateway, fieldManager: fieldManager}
}

// SyncResult reports what Sync stored.
type SyncResult struct {
	// Route is the route as stored after Sync.
	Route *gwapiv1.HTTPRoute
	// Writes counts the API writes Sync made (0 when everything already matched).
	Writes int
}

// Sync makes the stored objects for src equal to desired: backend Services first, then the
// route, then it prunes Services no longer referenced, so the route never points at a
// missing Service. It writes only objects that differ and refuses (ErrConflict) any object at
// a needed name that src does not own. On error, objects already written stay written and a
// retry converges.
func (w *Writer) Sync(ctx context.Context, src Source, desired *Desired, store Store) (SyncResult, error) {
	var res SyncResult
	current, err := store.Route(desired.Route.Namespace, desired.Route.Name)
	if err != nil {
		return res, fmt.Errorf("read httproute: %w", err)
	}
	if current != nil && !Owned(current.Labels, src) {
		return res, conflict("httproute", current.Namespace, current.Name)
	}
	owned, err := store.Services(src)
	if err != nil {
		return res, fmt.Errorf("read services: %w", err)
	}
	byName := make(map[string]*corev1.Service, len(owned))
	for _, s := range owned {
		byName[s.Name] = s
	}

	// The backend Services are independent of one another: write them at once (a new map's
	// eight cost one round trip, not eight), all before the route that refers to them.
	wrote := make([]int, len(desired.Services))
	errs := make([]error, len(desired.Services))
	var wg sync.WaitGroup
	for i, want := range desired.Services {
		wg.Go(func() { wrote[i], errs[i] = w.syncService(ctx, src, want, byName[want.Name]) })
	}
	wg.Wait()
	for i, want := range desired.Services {
		res.Writes += wrote[i]
		delete(byName, want.Name)
	}
	for _, err := range errs {
		if err != nil { // the first in desired order, so the error is deterministic
			return res, err
		}
	}

	res.Route = current
	switch {
	case current == nil:
		created, err := w.gateway.GatewayV1().HTTPRoutes(desired.Route.Namespace).Create(ctx, desired.Route, metav1.CreateOptions{FieldManager: w.fieldManager})
		if apierrors.IsAlreadyExists(err) {
			return res, w.explainExisting(ctx, src, desired.Route.Namespace, desired.Route.Name)
		}
		if err != nil {
			return res, fmt.Errorf("create httproute %s/%s: %w", desired.Route.Namespace, desired.Route.Name, err)
		}
		res.Route, res.Writes = created, res.Writes+1
	case !Matches(desired.Route, current):
		next := current.DeepCopy()
		next.Labels = merged(next.Labels, desired.Route.Labels)
		next.Annotations = merged(next.Annotations, desired.Route.Annotations)
		next.Spec = desired.Route.Spec
		updated, err := w.gateway.GatewayV1().HTTPRoutes(next.Namespace).Update(ctx, next, metav1.UpdateOptions{FieldManager: w.fieldManager})
		if err != nil {
			return res, fmt.Errorf("update httproute %s/%s: %w", next.Namespace, next.Name, err)
		}
		res.Route, res.Writes = updated, res.Writes+1
	}

	for _, stale := range sortedServices(byName) {
		if err := w.deleteService(ctx, stale); err != nil {
			return res, err
		}
		res.Writes++
	}
	return res, nil
}

// Delete removes every object the publisher stored for src. It is idempotent: objects
// already gone are not an error, and objects src does not own are never touched.
func (w *Writer) Delete(ctx context.Context, src Source, store Store) (deleted int, err error) {
	route, err := store.Route(src.Namespace, RouteName(src.Name))
	if err != nil {
		return 0, fmt.Errorf("read httproute: %w", err)
	}
	if route != nil && Owned(route.Labels, src) {
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
	for _, svc := range services {
		if err := w.deleteService(ctx, svc); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

func (w *Writer) syncService(ctx context.Context, src Source, want, current *corev1.Service) (int, error) {
	client := w.kube.CoreV1().Services(want.Namespace)
	if current == nil {
		_, err := client.Create(ctx, want, metav1.CreateOptions{FieldManager: w.fieldManager})
		if apierrors.IsAlreadyExists(err) {
			return 0, w.explainExisting(ctx, src, want.Namespace, want.Name)
		}
		if err != nil {
			return 0, fmt.Errorf("create service %s/%s: %w", want.Namespace, want.Name, err)
		}
		return 1, nil
	}
	if serviceMatches(want, current) {
		return 0, nil
	}
	next := current.DeepCopy()
	next.Labels = merged(next.Labels, want.Labels)
	next.Spec.Type = want.Spec.Type
	next.Spec.ExternalName = want.Spec.ExternalName
	next.Spec.Ports = want.Spec.Ports
	if _, err := client.Update(ctx, next, metav1.UpdateOptions{FieldManager: w.fieldManager}); err != nil {
		return 0, fmt.Errorf("update service %s/%s: %w", next.Namespace, next.Name, err)
	}
	return 1, nil
}

func (w *Writer) deleteService(ctx context.Context, svc *corev1.Service) error {
	err := w.kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &svc.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// explainExisting is called when a create found an object the cache did not show: it is
// either someone else's (a conflict) or the cache is behind (a transient error).
func (w *Writer) explainExisting(ctx context.Context, src Source, namespace, name string) error {
	var labels map[string]string
	kind := "httproute"
	if name == RouteName(src.Name) && namespace == src.Namespace {
		obj, err := w.gateway.GatewayV1().HTTPRoutes(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read existing httproute %s/%s: %w", namespace, name, err)
		}
		labels = obj.Labels
	} else {
		kind = "service"
		obj, err := w.kube.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read existing service %s/%s: %w", namespace, name, err)
		}
		labels = obj.Labels
	}
	if !Owned(labels, src) {
		return conflict(kind, namespace, name)
	}
	return fmt.Errorf("%s %s/%s exists but is not cached yet: %w", kind, namespace, name, errCacheBehind)
}

var errCacheBehind = errors.New("cache is behind the api server")

func conflict(kind, namespace, name string) error {
	return fmt.Errorf("%s %s/%s %w (labels %s=%s, %s and %s required); refusing to overwrite it",
		kind, namespace, name, ErrConflict, LabelManagedBy, ManagedByValue, LabelSourceNamespace, LabelSourceName)
}

// Matches reports whether the stored route current already holds everything desired sets;
// fields others added (labels, annotations, status) are ignored.
func Matches(desired, current *gwapiv1.HTTPRoute) bool {
	return subset(desired.Labels, current.Labels) &&
		subset(desired.Annotations, current.Annotations) &&
		equality.Semantic.DeepEqual(desired.Spec, current.Spec)
}

func serviceMatches(desired, current *corev1.Service) bool {
	if !subset(desired.Labels, current.Labels) ||
		desired.Spec.Type != current.Spec.Type ||
		desired.Spec.ExternalName != current.Spec.ExternalName ||
		len(desired.Spec.Ports) != len(current.Spec.Ports) {
		return false
	}
	for i, p := range desired.Spec.Ports {
		c := current.Spec.Ports[i]
		if p.Name != c.Name || p.Port != c.Port || p.Protocol != c.Protocol {
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

func merged(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	maps.Copy(out, base)
	maps.Copy(out, over)
	return out
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
