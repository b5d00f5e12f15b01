// Package routesink is the HTTPRoute sink: it realizes a plan as a Gateway API HTTPRoute
// with one backend Service per entry (package httproute builds and writes them) and
// confirms it once the parent Gateway has accepted the route's current generation (or at
// once when acceptance is not required). It reads the stored objects through an
// httproute.Store backed by the publisher's informer caches.
//
// Its only state is per-map expectations, as a ReplicaSet controller keeps them: the route
// and each backend Service as the sink last wrote it, each until the cache holds that
// object at least as new (by resourceVersion), and each Service it pruned, until the cache
// no longer holds it. Until then the sink judges from its own last write instead of the
// older cached object, and reads the object through the API when the cache cannot be
// compared with it (not cached, another UID, or resourceVersions that do not compare); the
// answer becomes the expectation. So what Apply compares, writes over and judges acceptance
// from is never older than the sink's last write, a Service the informer has not delivered
// yet is not applied again, and a Service the sink pruned is not seen (and deleted) again.
// Expectations are dropped once met and when the map is deleted.
package routesink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// Name is the sink's name in --sinks.
const Name = "httproute"

// Reasons of the Published condition this sink reports (model.Reason constants).
const (
	// ReasonConflict: a foreign object holds the route's or a Service's name.
	ReasonConflict = model.ReasonRouteConflict
	// ReasonRefused: the plan cannot be written as a route (for example too many entries).
	ReasonRefused = model.ReasonRouteRefused
	// ReasonNotAccepted: the parent Gateway did not accept the route.
	ReasonNotAccepted = model.ReasonRouteNotAccepted
	// ReasonLastPositiveRetained: every weight is 0 and the policy keeps the last positive
	// weights on the route.
	ReasonLastPositiveRetained = model.ReasonLastPositiveRetained
	// ReasonWaiting: the route is stored and the gateway has not decided yet.
	ReasonWaiting = model.ReasonPublishing
)

// Config configures the sink.
type Config struct {
	// Route says how routes are built (parent Gateway, host template, rewrite).
	Route httproute.Config
	// RequireAccepted makes a plan Pending until the Gateway accepts the route.
	RequireAccepted bool
	// RetainLastPositive keeps the last positive weights on the route when every
	// effective weight is 0.
	RetainLastPositive bool
}

// Sink is the HTTPRoute sink. It is safe for concurrent use on different maps.
type Sink struct {
	cfg    Config
	writer *httproute.Writer
	store  httproute.Store

	mu       sync.Mutex
	expected map[types.NamespacedName]*expectations // by map; an entry with nothing expected is removed
}

// expectations is what the sink knows of one map's stored objects that its cache may not
// show yet.
type expectations struct {
	route    *gwapiv1.HTTPRoute            // the route as last written (or read), nil: none
	services map[string]serviceExpectation // by Service name
}

// serviceExpectation is a backend Service as the sink last wrote (or read) it or, when
// deleted is set, the Service the sink deleted.
type serviceExpectation struct {
	svc     *corev1.Service
	deleted bool
}

func (e *expectations) empty() bool { return e.route == nil && len(e.services) == 0 }

var (
	_ model.Sink    = (*Sink)(nil)
	_ model.Durable = (*Sink)(nil)
)

// Durable implements model.Durable: the route outlives the publisher, so its Carries right
// after a start tells what was published before.
func (s *Sink) Durable() {}

// New returns the sink writing with writer and reading stored objects from store.
func New(cfg Config, writer *httproute.Writer, store httproute.Store) *Sink {
	return &Sink{cfg: cfg, writer: writer, store: store, expected: map[types.NamespacedName]*expectations{}}
}

// Name implements model.Sink.
func (s *Sink) Name() string { return Name }

func source(p *model.Plan) httproute.Source {
	return httproute.Source{Namespace: p.Namespace, Name: p.Name, Service: p.Service, GlobalHost: p.GlobalHost, UID: types.UID(p.UID)}
}

func mapKey(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// view returns the newest route of map namespace/name known without an API read: the
// cached one when it is at least as new as the sink's last write (the expectation is then
// met and dropped), the last write otherwise. readThrough reports that the cache cannot be
// compared with the last write (no cached route, a route with another UID, resourceVersions
// that do not compare): the route may have been deleted or replaced since, and only a read
// through the API tells.
func (s *Sink) view(namespace, name string) (route *gwapiv1.HTTPRoute, readThrough bool, err error) {
	cached, err := s.store.Route(namespace, httproute.RouteName(name))
	if err != nil {
		return nil, false, fmt.Errorf("read cached httproute: %w", err)
	}
	key := mapKey(namespace, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.expected[key]
	if e == nil || e.route == nil {
		return cached, false, nil
	}
	written := e.route
	if cached == nil || cached.UID != written.UID {
		return written, true, nil
	}
	cmp, err := resourceversion.CompareResourceVersion(cached.ResourceVersion, written.ResourceVersion)
	if err != nil {
		return written, true, nil
	}
	if cmp >= 0 {
		s.expectLocked(key, func(e *expectations) { e.route = nil })
		return cached, false, nil
	}
	return written, false, nil
}

// current is view, reading the route through the API when view cannot tell; the answer of
// that read becomes the expectation (or drops it when there is no route).
func (s *Sink) current(ctx context.Context, namespace, name string) (*gwapiv1.HTTPRoute, error) {
	route, readThrough, err := s.view(namespace, name)
	if err != nil || !readThrough {
		return route, err
	}
	live, err := s.writer.Route(ctx, namespace, httproute.RouteName(name))
	if err != nil {
		return nil, err
	}
	s.expect(namespace, name, live)
	return live, nil
}

// expect records route (nil: none) as the newest the sink knows of map namespace/name.
func (s *Sink) expect(namespace, name string, route *gwapiv1.HTTPRoute) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expectLocked(mapKey(namespace, name), func(e *expectations) { e.route = route })
}

// expectLocked applies change to the expectations of map key, creating them when missing
// and removing them when nothing is left to expect. s.mu must be held.
func (s *Sink) expectLocked(key types.NamespacedName, change func(*expectations)) {
	e := s.expected[key]
	if e == nil {
		e = &expectations{services: map[string]serviceExpectation{}}
	}
	change(e)
	if e.empty() {
		delete(s.expected, key)
		return
	}
	s.expected[key] = e
}

// forget drops every expectation of map namespace/name.
func (s *Sink) forget(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expected, mapKey(namespace, name))
}

// forgetServices drops the Service expectations of map namespace/name, after a delete that
// failed part way: some Services the sink wrote may be gone, so its writes are no longer the
// newest it knows of; the cache's copies are judged from again (as before any write).
func (s *Sink) forgetServices(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expectLocked(mapKey(namespace, name), func(e *expectations) { clear(e.services) })
}

// serviceView returns src's owned Services, the newest known without an API read, by
// name: for each cached Service the sink has no expectation of, the cached one; for one
// it wrote, the cached one when it is at least as new as that write (the expectation is
// then met and dropped), the write otherwise; one it pruned is left out while the cache
// still holds it (and the expectation is dropped once the cache does not). readThrough
// lists, in name order, the Services whose cache cannot be compared with the expectation
// (a written Service not cached, a cached Service with another UID, resourceVersions that
// do not compare): only a read through the API tells what is stored. Cached objects are
// returned as they are, never modified.
func (s *Sink) serviceView(src httproute.Source) (known map[string]*corev1.Service, readThrough []string, err error) {
	cached, err := s.store.Services(src)
	if err != nil {
		return nil, nil, fmt.Errorf("read cached services: %w", err)
	}
	known = make(map[string]*corev1.Service, len(cached))
	for _, c := range cached {
		known[c.Name] = c
	}
	key := mapKey(src.Namespace, src.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.expected[key]
	if e == nil || len(e.services) == 0 {
		return known, nil, nil
	}
	s.expectLocked(key, func(e *expectations) {
		for name, x := range e.services {
			c, ok := known[name]
			switch {
			case !ok && x.deleted: // the cache shows the deletion
				delete(e.services, name)
			case !ok || c.UID != x.svc.UID:
				delete(known, name)
				readThrough = append(readThrough, name)
			case x.deleted: // the cache still holds the Service the sink deleted
				delete(known, name)
			default:
				cmp, err := resourceversion.CompareResourceVersion(c.ResourceVersion, x.svc.ResourceVersion)
				switch {
				case err != nil:
					delete(known, name)
					readThrough = append(readThrough, name)
				case cmp >= 0:
					delete(e.services, name)
				default:
					known[name] = x.svc
				}
			}
		}
	})
	slices.Sort(readThrough)
	return known, readThrough, nil
}

// currentServices is serviceView, reading through the API the Services it cannot tell
// about; each answer becomes that Service's expectation (or drops it when there is no
// Service or one src does not own). The Services come in name order.
func (s *Sink) currentServices(ctx context.Context, src httproute.Source) ([]*corev1.Service, error) {
	known, readThrough, err := s.serviceView(src)
	if err != nil {
		return nil, err
	}
	if len(readThrough) > 0 {
		lives := make([]*corev1.Service, len(readThrough))
		errs := make([]error, len(readThrough))
		var wg sync.WaitGroup
		for i, name := range readThrough {
			wg.Go(func() { lives[i], errs[i] = s.writer.Service(ctx, src.Namespace, name) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.expectLocked(mapKey(src.Namespace, src.Name), func(e *expectations) {
			for i, name := range readThrough {
				if live := lives[i]; live != nil && httproute.Owned(live.Labels, src) {
					e.services[name] = serviceExpectation{svc: live}
					known[name] = live
				} else {
					delete(e.services, name)
				}
			}
		})
		s.mu.Unlock()
	}
	out := make([]*corev1.Service, 0, len(known))
	for _, name := range slices.Sorted(maps.Keys(known)) {
		out = append(out, known[name])
	}
	return out, nil
}

// expectServices records what Sync did to map namespace/name's Services: applied as the
// API server answered, pruned as deleted.
func (s *Sink) expectServices(namespace, name string, applied, pruned []*corev1.Service) {
	if len(applied) == 0 && len(pruned) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expectLocked(mapKey(namespace, name), func(e *expectations) {
		for _, svc := range applied {
			e.services[svc.Name] = serviceExpectation{svc: svc}
		}
		for _, svc := range pruned {
			e.services[svc.Name] = serviceExpectation{svc: svc, deleted: true}
		}
	})
}

// owned returns route when it is the publisher's route of the plan's map, nil otherwise.
func owned(p *model.Plan, route *gwapiv1.HTTPRoute) *gwapiv1.HTTPRoute {
	if route != nil && !httproute.Owned(route.Labels, source(p)) {
		return nil
	}
	return route
}

// pinned is a Store whose route and Services of map namespace/name are route and services
// (the sink's current view).
type pinned struct {
	httproute.Store
	namespace, name string
	route           *gwapiv1.HTTPRoute
	services        []*corev1.Service
}

// Route implements httproute.Store.
func (p pinned) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	if namespace == p.namespace && name == httproute.RouteName(p.name) {
		return p.route, nil
	}
	return p.Store.Route(namespace, name)
}

// Services implements httproute.Store.
func (p pinned) Services(src httproute.Source) ([]*corev1.Service, error) {
	if src.Namespace == p.namespace && src.Name == p.name {
		return p.services, nil
	}
	return p.Store.Services(src)
}

// pin returns the Store holding route and services as map src's objects.
func (s *Sink) pin(src httproute.Source, route *gwapiv1.HTTPRoute, services []*corev1.Service) httproute.Store {
	return pinned{Store: s.store, namespace: src.Namespace, name: src.Name, route: route, services: services}
}

func (s *Sink) build(p *model.Plan) (*httproute.Desired, error) {
	return httproute.Build(s.cfg.Route, source(p), p.Result, httproute.Inputs{Generation: p.Generation, Drains: p.Drains,
		Taints: p.Taints, Tolerations: p.Tolerations})
}

// retains reports whether the policy keeps route's last positive weights for p.
func (s *Sink) retains(p *model.Plan, route *gwapiv1.HTTPRoute) bool {
	if !s.cfg.RetainLastPositive || !p.Result.AllZero() || route == nil {
		return false
	}
	_, positive := httproute.RouteWeights(route)
	return positive
}

// contested returns the route's hostname when another claim holds it (Plan.Conflicts).
func (s *Sink) contested(p *model.Plan) (string, bool) {
	host, err := s.cfg.Route.Hostname(source(p))
	if err != nil || !p.Withheld(host) {
		return "", false
	}
	return host, true
}

// carriesHost reports whether route lists host.
func carriesHost(route *gwapiv1.HTTPRoute, host string) bool {
	return route != nil && slices.Contains(route.Spec.Hostnames, gwapiv1.Hostname(host))
}

// Carries implements model.Sink: the stored route holds exactly the plan's route (a plan
// the policy answers by keeping the stored weights changes nothing either). A plan whose
// hostname is contested is carried once no route of the map lists that hostname. The
// stored route is the cached one or, while the cache is older than the sink's last write,
// that write (see view; Carries makes no API read).
func (s *Sink) Carries(p *model.Plan) bool {
	route, _, err := s.view(p.Namespace, p.Name)
	if err != nil {
		return false
	}
	route = owned(p, route)
	if host, ok := s.contested(p); ok {
		return !carriesHost(route, host)
	}
	if s.retains(p, route) {
		return true
	}
	desired, err := s.build(p)
	if err != nil {
		return true // refused: nothing will be written
	}
	return route != nil && httproute.Matches(desired.Route, route)
}

// Check implements model.Sink: a plan that cannot be built as a route (for example more
// entries than httproute.MaxBackends) is Refused with ReasonRefused. A plan whose hostname
// is contested passes: Apply handles it without writing its content.
func (s *Sink) Check(p *model.Plan) *model.Confirmation {
	if _, ok := s.contested(p); ok {
		return nil
	}
	if _, err := s.build(p); err != nil {
		return &model.Confirmation{Sink: Name, State: model.Refused, Reason: ReasonRefused, Message: refusedMessage(p, err)}
	}
	return nil
}

func refusedMessage(p *model.Plan, err error) string {
	return fmt.Sprintf("httproute sink cannot publish trafficmap %s: %s", p.Key(), err)
}

// Apply implements model.Sink: it stores the route and its Services (only what differs)
// and reads the gateway's verdict. When the route's hostname is held by another claim the
// route is neither written nor updated (Refused, model.ReasonHostnameConflict); a stored
// route of the map that lists that hostname is removed with its Services, so the gateway
// never holds two of the publisher's routes for one hostname. The route it compares with,
// writes over and reads the verdict from is at least as new as its own last write of it
// (see the package doc); so is each backend Service it compares and writes over, and a
// Service it pruned is not seen again.
func (s *Sink) Apply(ctx context.Context, p *model.Plan) (model.Confirmation, error) {
	c := model.Confirmation{Sink: Name}
	if host, ok := s.contested(p); ok {
		return s.refuseContested(ctx, p, host)
	}
	desired, err := s.build(p)
	if err != nil {
		c.State, c.Reason = model.Refused, ReasonRefused
		c.Message = refusedMessage(p, err)
		return c, nil
	}
	live, err := s.current(ctx, p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	route := owned(p, live)
	if s.retains(p, route) {
		kept, _ := httproute.RouteWeights(route)
		c.State, c.Reason, c.GatewayRef = model.Refused, ReasonLastPositiveRetained, GatewayRef(route)
		c.Message = fmt.Sprintf("every effective weight is 0; --no-positive-policy RetainLastPositive keeps the last positive weights on route %s/%s (%s)",
			route.Namespace, route.Name, describe(kept))
		return c, nil
	}
	services, err := s.currentServices(ctx, source(p))
	if err != nil {
		return c, err
	}
	synced, err := s.writer.Sync(ctx, source(p), desired, s.pin(source(p), live, services))
	c.Writes = synced.Writes
	if synced.RouteWritten {
		s.expect(p.Namespace, p.Name, synced.Route)
	}
	s.expectServices(p.Namespace, p.Name, synced.Services, synced.Pruned)
	if errors.Is(err, httproute.ErrConflict) {
		c.State, c.Reason, c.Message = model.Refused, ReasonConflict, err.Error()
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("sync httproute: %w", err)
	}
	c.GatewayRef = GatewayRef(synced.Route)
	if !s.cfg.RequireAccepted {
		c.State = model.InPlace
		c.Message = "route " + synced.Route.Namespace + "/" + synced.Route.Name + " stored (gateway acceptance not required)"
		return c, nil
	}
	acc := s.cfg.Route.Acceptance(synced.Route)
	c.Message = acc.Message
	switch acc.Verdict {
	case httproute.Pending:
		c.State, c.Reason = model.Pending, ReasonWaiting
	case httproute.Rejected:
		c.State, c.Reason = model.Rejected, ReasonNotAccepted
	default:
		c.State = model.InPlace
	}
	return c, nil
}

func (s *Sink) refuseContested(ctx context.Context, p *model.Plan, host string) (model.Confirmation, error) {
	c := model.Confirmation{Sink: Name, State: model.Refused, Reason: model.ReasonHostnameConflict}
	live, err := s.current(ctx, p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	route := owned(p, live)
	name := p.Namespace + "/" + httproute.RouteName(p.Name)
	if carriesHost(route, host) {
		services, err := s.currentServices(ctx, source(p))
		if err != nil {
			return c, err
		}
		n, err := s.writer.Delete(ctx, source(p), s.pin(source(p), live, services))
		c.Writes = n
		if err != nil {
			s.forgetServices(p.Namespace, p.Name)
			return c, fmt.Errorf("remove httproute with contested hostname: %w", err)
		}
		s.forget(p.Namespace, p.Name)
		c.Message = fmt.Sprintf("httproute %s listed the contested hostname %s and was removed with its services", name, host)
		return c, nil
	}
	c.GatewayRef = GatewayRef(route)
	if route != nil {
		c.Message = fmt.Sprintf("httproute %s is left as it was, not updated to the contested hostname %s", name, host)
	} else {
		c.Message = fmt.Sprintf("httproute %s is not written with the contested hostname %s", name, host)
	}
	return c, nil
}

// Delete implements model.Sink: the map's route and Services go (those the sink last wrote
// too, when the cache does not hold them yet); once they are gone the map's expectations
// are forgotten. When a delete fails, the Service expectations are dropped (some of those
// Services may be gone).
func (s *Sink) Delete(ctx context.Context, namespace, name string) (int, error) {
	live, err := s.current(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	src := httproute.Source{Namespace: namespace, Name: name}
	services, err := s.currentServices(ctx, src)
	if err != nil {
		return 0, err
	}
	n, err := s.writer.Delete(ctx, src, s.pin(src, live, services))
	if err != nil {
		s.forgetServices(namespace, name)
		return n, err
	}
	s.forget(namespace, name)
	return n, nil
}

// GatewayRef is the TrafficMap status reference to route, nil for nil.
func GatewayRef(route *gwapiv1.HTTPRoute) *v1beta1.TrafficMapGatewayRef {
	if route == nil {
		return nil
	}
	return &v1beta1.TrafficMapGatewayRef{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Name: route.Name, Namespace: route.Namespace}
}

func describe(w map[string]int32) string {
	parts := make([]string, 0, len(w))
	for _, name := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, w[name]))
	}
	return strings.Join(parts, ", ")
}
