// Package routesink is the HTTPRoute sink: it realizes a plan as a Gateway API HTTPRoute
// with one backend Service per entry (package httproute builds and writes them) and
// confirms it once the parent Gateway has accepted the route's current generation (or at
// once when acceptance is not required). It reads the stored objects through an
// httproute.Store backed by the publisher's informer caches.
//
// Its only state is per-map expectations, as a ReplicaSet controller keeps them: the route
// as the sink last wrote it, until the cache holds that route at least as new (by
// resourceVersion). Until then the sink judges from its own last write instead of the
// older cached route, and reads the route through the API when the cache cannot be
// compared with it (no cached route, another UID, or resourceVersions that do not
// compare). So what Apply compares, writes over and judges acceptance from is never older
// than the sink's last write. Expectations are dropped once met and when the map is deleted.
package routesink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/publish/sink"
)

// Name is the sink's name in --sinks.
const Name = "httproute"

// Reasons of the Published condition this sink reports.
const (
	// ReasonConflict: a foreign object holds the route's or a Service's name.
	ReasonConflict = "RouteConflict"
	// ReasonRefused: the plan cannot be written as a route (for example too many entries).
	ReasonRefused = "RouteRefused"
	// ReasonNotAccepted: the parent Gateway did not accept the route.
	ReasonNotAccepted = "RouteNotAccepted"
	// ReasonLastPositiveRetained: every weight is 0 and the policy keeps the last positive
	// weights on the route.
	ReasonLastPositiveRetained = "LastPositiveRetained"
	// ReasonWaiting: the route is stored and the gateway has not decided yet.
	ReasonWaiting = "Publishing"
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
	expected map[types.NamespacedName]*gwapiv1.HTTPRoute // a map's route as last written, until the cache catches up
}

var (
	_ sink.Sink    = (*Sink)(nil)
	_ sink.Durable = (*Sink)(nil)
)

// Durable implements sink.Durable: the route outlives the publisher, so its Carries right
// after a start tells what was published before.
func (s *Sink) Durable() {}

// New returns the sink writing with writer and reading stored objects from store.
func New(cfg Config, writer *httproute.Writer, store httproute.Store) *Sink {
	return &Sink{cfg: cfg, writer: writer, store: store, expected: map[types.NamespacedName]*gwapiv1.HTTPRoute{}}
}

// Name implements sink.Sink.
func (s *Sink) Name() string { return Name }

func source(p *sink.Plan) httproute.Source {
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
	written, ok := s.expected[key]
	if !ok {
		return cached, false, nil
	}
	if cached == nil || cached.UID != written.UID {
		return written, true, nil
	}
	cmp, err := resourceversion.CompareResourceVersion(cached.ResourceVersion, written.ResourceVersion)
	if err != nil {
		return written, true, nil
	}
	if cmp >= 0 {
		delete(s.expected, key)
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
	if route == nil {
		delete(s.expected, mapKey(namespace, name))
		return
	}
	s.expected[mapKey(namespace, name)] = route
}

// forget drops the expectation of map namespace/name.
func (s *Sink) forget(namespace, name string) { s.expect(namespace, name, nil) }

// owned returns route when it is the publisher's route of the plan's map, nil otherwise.
func owned(p *sink.Plan, route *gwapiv1.HTTPRoute) *gwapiv1.HTTPRoute {
	if route != nil && !httproute.Owned(route.Labels, source(p)) {
		return nil
	}
	return route
}

// pinned is a Store whose route at namespace/name is route (the sink's current view).
type pinned struct {
	httproute.Store
	namespace, name string
	route           *gwapiv1.HTTPRoute
}

// Route implements httproute.Store.
func (p pinned) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	if namespace == p.namespace && name == p.name {
		return p.route, nil
	}
	return p.Store.Route(namespace, name)
}

func (s *Sink) pin(namespace, name string, route *gwapiv1.HTTPRoute) httproute.Store {
	return pinned{Store: s.store, namespace: namespace, name: httproute.RouteName(name), route: route}
}

func (s *Sink) build(p *sink.Plan) (*httproute.Desired, error) {
	return httproute.Build(s.cfg.Route, source(p), p.Result, httproute.Inputs{Generation: p.Generation, Drains: p.Drains,
		Taints: p.Taints, Tolerations: p.Tolerations})
}

// retains reports whether the policy keeps route's last positive weights for p.
func (s *Sink) retains(p *sink.Plan, route *gwapiv1.HTTPRoute) bool {
	if !s.cfg.RetainLastPositive || !p.Result.AllZero() || route == nil {
		return false
	}
	_, positive := httproute.RouteWeights(route)
	return positive
}

// contested returns the route's hostname when another claim holds it (Plan.Conflicts).
func (s *Sink) contested(p *sink.Plan) (string, bool) {
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

// Carries implements sink.Sink: the stored route holds exactly the plan's route (a plan
// the policy answers by keeping the stored weights changes nothing either). A plan whose
// hostname is contested is carried once no route of the map lists that hostname. The
// stored route is the cached one or, while the cache is older than the sink's last write,
// that write (see view; Carries makes no API read).
func (s *Sink) Carries(p *sink.Plan) bool {
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

// Check implements sink.Sink: a plan that cannot be built as a route (for example more
// entries than httproute.MaxBackends) is Refused with ReasonRefused. A plan whose hostname
// is contested passes: Apply handles it without writing its content.
func (s *Sink) Check(p *sink.Plan) *sink.Confirmation {
	if _, ok := s.contested(p); ok {
		return nil
	}
	if _, err := s.build(p); err != nil {
		return &sink.Confirmation{Sink: Name, State: sink.Refused, Reason: ReasonRefused, Message: refusedMessage(p, err)}
	}
	return nil
}

func refusedMessage(p *sink.Plan, err error) string {
	return fmt.Sprintf("httproute sink cannot publish trafficmap %s: %s", p.Key(), err)
}

// Apply implements sink.Sink: it stores the route and its Services (only what differs)
// and reads the gateway's verdict. When the route's hostname is held by another claim the
// route is neither written nor updated (Refused, sink.ReasonHostnameConflict); a stored
// route of the map that lists that hostname is removed with its Services, so the gateway
// never holds two of the publisher's routes for one hostname. The route it compares with,
// writes over and reads the verdict from is at least as new as its own last write of it
// (see the package doc).
func (s *Sink) Apply(ctx context.Context, p *sink.Plan) (sink.Confirmation, error) {
	c := sink.Confirmation{Sink: Name}
	if host, ok := s.contested(p); ok {
		return s.refuseContested(ctx, p, host)
	}
	desired, err := s.build(p)
	if err != nil {
		c.State, c.Reason = sink.Refused, ReasonRefused
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
		c.State, c.Reason, c.GatewayRef = sink.Refused, ReasonLastPositiveRetained, GatewayRef(route)
		c.Message = fmt.Sprintf("every effective weight is 0; --no-positive-policy RetainLastPositive keeps the last positive weights on route %s/%s (%s)",
			route.Namespace, route.Name, describe(kept))
		return c, nil
	}
	synced, err := s.writer.Sync(ctx, source(p), desired, s.pin(p.Namespace, p.Name, live))
	c.Writes = synced.Writes
	if synced.RouteWritten {
		s.expect(p.Namespace, p.Name, synced.Route)
	}
	if errors.Is(err, httproute.ErrConflict) {
		c.State, c.Reason, c.Message = sink.Refused, ReasonConflict, err.Error()
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("sync httproute: %w", err)
	}
	c.GatewayRef = GatewayRef(synced.Route)
	if !s.cfg.RequireAccepted {
		c.State = sink.InPlace
		c.Message = "route " + synced.Route.Namespace + "/" + synced.Route.Name + " stored (gateway acceptance not required)"
		return c, nil
	}
	acc := s.cfg.Route.Acceptance(synced.Route)
	c.Message = acc.Message
	switch acc.Verdict {
	case httproute.Pending:
		c.State, c.Reason = sink.Pending, ReasonWaiting
	case httproute.Rejected:
		c.State, c.Reason = sink.Rejected, ReasonNotAccepted
	default:
		c.State = sink.InPlace
	}
	return c, nil
}

func (s *Sink) refuseContested(ctx context.Context, p *sink.Plan, host string) (sink.Confirmation, error) {
	c := sink.Confirmation{Sink: Name, State: sink.Refused, Reason: sink.ReasonHostnameConflict}
	live, err := s.current(ctx, p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	route := owned(p, live)
	name := p.Namespace + "/" + httproute.RouteName(p.Name)
	if carriesHost(route, host) {
		n, err := s.writer.Delete(ctx, source(p), s.pin(p.Namespace, p.Name, live))
		c.Writes = n
		if err != nil {
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

// Delete implements sink.Sink: the map's route and Services go (the route the sink last
// wrote too, when the cache does not hold it yet); once they are gone the map's expectation
// is forgotten.
func (s *Sink) Delete(ctx context.Context, namespace, name string) (int, error) {
	live, err := s.current(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	n, err := s.writer.Delete(ctx, httproute.Source{Namespace: namespace, Name: name}, s.pin(namespace, name, live))
	if err == nil {
		s.forget(namespace, name)
	}
	return n, err
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
