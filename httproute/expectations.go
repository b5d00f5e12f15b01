package httproute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// expectations is the Sink's only state, per map, as a ReplicaSet controller keeps it: the
// route and each backend Service as the sink last wrote it, each until the cache holds that
// object at least as new (by resourceVersion), and each Service it pruned, until the cache
// no longer holds it. Until then the sink judges from its own last write instead of the
// older cached object, and reads the object through the API when the cache cannot be
// compared with it (not cached, another UID, or resourceVersions that do not compare); the
// answer becomes the expectation. Expectations are dropped once met and when the map is
// deleted. mu guards byMap; it is safe for concurrent use.
type expectations struct {
	store Store   // the informer caches
	api   *Writer // reads through the API

	mu    sync.Mutex
	byMap map[types.NamespacedName]*mapExpectations // an entry with nothing expected is removed
}

// mapExpectations is what the sink knows of one map's stored objects that its cache may
// not show yet.
type mapExpectations struct {
	route    *gwapiv1.HTTPRoute            // the route as last written (or read), nil: none
	services map[string]serviceExpectation // by Service name
}

// serviceExpectation is a backend Service as the sink last wrote (or read) it or, when
// deleted is set, the Service the sink deleted.
type serviceExpectation struct {
	svc     *corev1.Service
	deleted bool
}

func (e *mapExpectations) empty() bool { return e.route == nil && len(e.services) == 0 }

func newExpectations(store Store, api *Writer) *expectations {
	return &expectations{store: store, api: api, byMap: map[types.NamespacedName]*mapExpectations{}}
}

func mapKey(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// routeView returns the newest route of map namespace/name known without an API read: the
// cached one when it is at least as new as the sink's last write (the expectation is then
// met and dropped), the last write otherwise. readThrough reports that the cache cannot be
// compared with the last write though it has received the API server's events past it (no
// cached route, a route with another UID, resourceVersions that do not compare): the route
// may have been deleted or replaced since, and only a read through the API tells. While the
// cache is behind the write (Store.RoutesSeen), its lack of the route says nothing and the
// write is the newest known: a cold start reads back none of the routes it creates.
func (x *expectations) routeView(namespace, name string) (route *gwapiv1.HTTPRoute, readThrough bool, err error) {
	cached, err := x.store.Route(namespace, RouteName(name))
	if err != nil {
		return nil, false, fmt.Errorf("read cached httproute: %w", err)
	}
	key := mapKey(namespace, name)
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byMap[key]
	if e == nil || e.route == nil {
		return cached, false, nil
	}
	written := e.route
	if cached == nil || cached.UID != written.UID {
		// The cache has not received the write yet (it is behind it), or it has and the
		// route went or was replaced since: only then does a read tell.
		return written, !behind(x.store.RoutesSeen(namespace), written.ResourceVersion), nil
	}
	cmp, err := resourceversion.CompareResourceVersion(cached.ResourceVersion, written.ResourceVersion)
	if err != nil {
		return written, true, nil
	}
	if cmp >= 0 {
		x.changeLocked(key, func(e *mapExpectations) { e.route = nil })
		return cached, false, nil
	}
	return written, false, nil
}

// route is routeView, reading the route through the API when routeView cannot tell; the
// answer of that read becomes the expectation (or drops it when there is no route).
func (x *expectations) route(ctx context.Context, namespace, name string) (*gwapiv1.HTTPRoute, error) {
	route, readThrough, err := x.routeView(namespace, name)
	if err != nil || !readThrough {
		return route, err
	}
	live, err := x.api.Route(ctx, namespace, RouteName(name))
	if err != nil {
		return nil, err
	}
	x.expectRoute(namespace, name, live)
	return live, nil
}

// expectRoute records route (nil: none) as the newest the sink knows of map namespace/name.
func (x *expectations) expectRoute(namespace, name string, route *gwapiv1.HTTPRoute) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.changeLocked(mapKey(namespace, name), func(e *mapExpectations) { e.route = route })
}

// changeLocked applies change to the expectations of map key, creating them when missing
// and removing them when nothing is left to expect. x.mu must be held.
func (x *expectations) changeLocked(key types.NamespacedName, change func(*mapExpectations)) {
	e := x.byMap[key]
	if e == nil {
		e = &mapExpectations{services: map[string]serviceExpectation{}}
	}
	change(e)
	if e.empty() {
		delete(x.byMap, key)
		return
	}
	x.byMap[key] = e
}

// forget drops every expectation of map namespace/name.
func (x *expectations) forget(namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byMap, mapKey(namespace, name))
}

// forgetServices drops the Service expectations of map namespace/name, after a delete that
// failed part way: some Services the sink wrote may be gone, so its writes are no longer the
// newest it knows of; the cache's copies are judged from again (as before any write).
func (x *expectations) forgetServices(namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.changeLocked(mapKey(namespace, name), func(e *mapExpectations) { clear(e.services) })
}

// serviceView returns src's owned Services, the newest known without an API read, by
// name: for each cached Service the sink has no expectation of, the cached one; for one
// it wrote, the cached one when it is at least as new as that write (the expectation is
// then met and dropped), the write otherwise; one it pruned is left out while the cache
// still holds it (and the expectation is dropped once the cache does not). A written
// Service the cache does not hold (or holds with another UID) while it is behind the write
// (Store.ServicesSeen) is known as written. readThrough lists, in name order, the Services
// whose cache cannot be compared with the expectation though it has received events past it
// (a written Service not cached, a cached Service with another UID, resourceVersions that do
// not compare): only a read through the API tells what is stored. Cached objects are
// returned as they are, never modified.
func (x *expectations) serviceView(src Source) (known map[string]*corev1.Service, readThrough []string, err error) {
	cached, err := x.store.Services(src)
	if err != nil {
		return nil, nil, fmt.Errorf("read cached services: %w", err)
	}
	known = make(map[string]*corev1.Service, len(cached))
	for _, c := range cached {
		known[c.Name] = c
	}
	key := mapKey(src.Namespace, src.Name)
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byMap[key]
	if e == nil || len(e.services) == 0 {
		return known, nil, nil
	}
	seen := x.store.ServicesSeen(src.Namespace)
	x.changeLocked(key, func(e *mapExpectations) {
		for name, exp := range e.services {
			if judgeService(e, known, name, exp, seen) {
				readThrough = append(readThrough, name)
			}
		}
	})
	slices.Sort(readThrough)
	return known, readThrough, nil
}

// judgeService settles the expectation exp of Service name against the cached Services
// known, whose cache has received events up to seen (see serviceView): it drops a met
// expectation from e, replaces or removes the cached Service in known, and reports whether
// only a read through the API tells what is stored.
func judgeService(e *mapExpectations, known map[string]*corev1.Service, name string, exp serviceExpectation, seen string) (readThrough bool) {
	c, ok := known[name]
	switch {
	case !ok && exp.deleted: // the cache shows the deletion
		delete(e.services, name)
	case (!ok || c.UID != exp.svc.UID) && !exp.deleted && behind(seen, exp.svc.ResourceVersion):
		known[name] = exp.svc // the cache has not received the write yet
	case !ok || c.UID != exp.svc.UID:
		delete(known, name)
		return true
	case exp.deleted: // the cache still holds the Service the sink deleted
		delete(known, name)
	default:
		cmp, err := resourceversion.CompareResourceVersion(c.ResourceVersion, exp.svc.ResourceVersion)
		switch {
		case err != nil:
			delete(known, name)
			return true
		case cmp >= 0:
			delete(e.services, name)
		default:
			known[name] = exp.svc
		}
	}
	return false
}

// behind reports whether a cache that has received events up to seen has not received a
// write at written yet; false when either is unknown or they do not compare.
func behind(seen, written string) bool {
	cmp, err := resourceversion.CompareResourceVersion(seen, written)
	return err == nil && cmp < 0
}

// services is serviceView, reading through the API the Services it cannot tell about;
// each answer becomes that Service's expectation (or drops it when there is no Service or
// one src does not own). The Services come in name order.
func (x *expectations) services(ctx context.Context, src Source) ([]*corev1.Service, error) {
	known, readThrough, err := x.serviceView(src)
	if err != nil {
		return nil, err
	}
	if len(readThrough) > 0 {
		if err := x.readServices(ctx, src, readThrough, known); err != nil {
			return nil, err
		}
	}
	out := make([]*corev1.Service, 0, len(known))
	for _, name := range slices.Sorted(maps.Keys(known)) {
		out = append(out, known[name])
	}
	return out, nil
}

// readServices reads the Services names of src through the API, in parallel, and records
// each answer as that Service's expectation and in known (an absent Service, or one src
// does not own, drops the expectation).
func (x *expectations) readServices(ctx context.Context, src Source, names []string, known map[string]*corev1.Service) error {
	lives := make([]*corev1.Service, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { lives[i], errs[i] = x.api.Service(ctx, src.Namespace, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.changeLocked(mapKey(src.Namespace, src.Name), func(e *mapExpectations) {
		for i, name := range names {
			if live := lives[i]; live != nil && Owned(live.Labels, src) {
				e.services[name] = serviceExpectation{svc: live}
				known[name] = live
			} else {
				delete(e.services, name)
			}
		}
	})
	return nil
}

// expectServices records what Sync did to map namespace/name's Services: applied as the
// API server answered, pruned as deleted.
func (x *expectations) expectServices(namespace, name string, applied, pruned []*corev1.Service) {
	if len(applied) == 0 && len(pruned) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.changeLocked(mapKey(namespace, name), func(e *mapExpectations) {
		for _, svc := range applied {
			e.services[svc.Name] = serviceExpectation{svc: svc}
		}
		for _, svc := range pruned {
			e.services[svc.Name] = serviceExpectation{svc: svc, deleted: true}
		}
	})
}

// pin returns the Store holding route and services as map src's objects (the newest known,
// from route and services), for Sync and Delete to compare with and write over.
func (x *expectations) pin(src Source, route *gwapiv1.HTTPRoute, services []*corev1.Service) Store {
	return pinned{Store: x.store, namespace: src.Namespace, name: src.Name, route: route, services: services}
}

// pinned is a Store whose route and Services of map namespace/name are route and services
// (the sink's current view).
type pinned struct {
	Store
	namespace, name string
	route           *gwapiv1.HTTPRoute
	services        []*corev1.Service
}

// Route implements Store.
func (p pinned) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	if namespace == p.namespace && name == RouteName(p.name) {
		return p.route, nil
	}
	return p.Store.Route(namespace, name)
}

// Services implements Store.
func (p pinned) Services(src Source) ([]*corev1.Service, error) {
	if src.Namespace == p.namespace && src.Name == p.name {
		return p.services, nil
	}
	return p.Store.Services(src)
}
