package httproute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/model"
)

// SinkName is the HTTPRoute sink's name in --sinks.
const SinkName = "httproute"

// The reasons of the Published condition this sink reports are model.Reason constants:
// ReasonRouteConflict, ReasonRouteRefused, ReasonRouteNotAccepted, model.ReasonLastPositiveRetained
// and, while the gateway has not decided, ReasonPublishing.

// SinkConfig configures the Sink.
type SinkConfig struct {
	// Route says how routes are built (parent Gateway, host template, rewrite).
	Route Config
	// RequireAccepted makes a plan Pending until the Gateway accepts the route.
	RequireAccepted bool
	// RetainLastPositive keeps the last positive weights on the route when every
	// effective weight is 0.
	RetainLastPositive bool
	// BackendKind is --backend-kind ("" is service-externalname; BackendAuto asks
	// ControllerNames).
	BackendKind BackendKind
	// ControllerNames gives the parent Gateway's GatewayClass controllerName for
	// BackendAuto; nil: every Gateway is unknown (service-externalname).
	ControllerNames ControllerNames
	// Resolver gives the addresses of endpoint hostnames for BackendEndpointSlice; nil: no
	// hostname resolves (IP endpoints still work).
	Resolver Resolver
	// Settle is how long after the sink wrote a route an acceptance of it still waits, for a
	// controller that writes route status before it serves the route (--route-settle): 0
	// takes each controller's from ControllerSettles, a negative value holds none.
	Settle time.Duration
}

// Sink is the HTTPRoute sink (model.Sink): it realizes a plan as the route and backend
// Services Build returns, written by a Writer, and confirms it once the parent Gateway has
// accepted the route's current generation (or at once when acceptance is not required). It
// reads the stored objects through a Store backed by the publisher's informer caches, and
// never from a cache older than its own last write (see expectations): so what Apply
// compares, writes over and judges acceptance from is never older than the sink's last
// write, a Service the informer has not delivered yet is not applied again, and a Service
// the sink pruned is not seen (and deleted) again. It is safe for concurrent use on
// different maps.
type Sink struct {
	cfg    SinkConfig
	writer *Writer
	known  *expectations
	// settles' Updates and Updated make the Sink a model.Updater: the maps whose settle ended.
	*settles
}

var (
	_ model.Sink     = (*Sink)(nil)
	_ model.Durable  = (*Sink)(nil)
	_ model.Retiring = (*Sink)(nil)
	_ model.Updater  = (*Sink)(nil)
)

// Durable implements model.Durable: the route outlives the publisher, so its Carries right
// after a start tells what was published before.
func (s *Sink) Durable() {}

// NewSink returns the sink writing with writer and reading stored objects from store.
func NewSink(cfg SinkConfig, writer *Writer, store Store) *Sink {
	s := &Sink{cfg: cfg, writer: writer, known: newExpectations(store, writer)}
	s.settles = newSettles()
	return s
}

// Name implements model.Sink.
func (s *Sink) Name() string { return SinkName }

// source is the Source of p's map.
func source(p *model.Plan) Source {
	return Source{Namespace: p.Namespace, Name: p.Name, Service: p.Service, GlobalHost: p.GlobalHost, UID: types.UID(p.UID)}
}

// ownedRoute returns route when it is the publisher's route of the plan's map, nil otherwise.
func ownedRoute(p *model.Plan, route *gwapiv1.HTTPRoute) *gwapiv1.HTTPRoute {
	if route != nil && !Owned(route.Labels, source(p)) {
		return nil
	}
	return route
}

// adopts reports whether live, the route stored at p's route name, is one OME's publisher
// wrote for p's map that the writer adopts (AdoptionOf, AdoptOME): a map being deleted
// then has it set to the plan's zeros in place, as its own route would be, before it is
// removed.
func (s *Sink) adopts(p *model.Plan, live *gwapiv1.HTTPRoute) bool {
	return live != nil && AdoptionOf(live.Labels, source(p), s.writer.adoptOME) == AdoptOME
}

// build is the route and backend objects of p, or why p cannot be written as a route.
func (s *Sink) build(p *model.Plan) (*Desired, error) {
	// Carries and Check have no context: a lookup the resolver has not finished yet is not
	// waited for long (Apply, with the reconcile's context, waits for it).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, _, err := buildChosen(ctx, s.cfg, p)
	return d, err
}

// buildChosen is the Sink's build with the backend choice it was built with.
func buildChosen(ctx context.Context, cfg SinkConfig, p *model.Plan) (*Desired, backendChoice, error) {
	c := chooseBackends(ctx, cfg, p)
	if c.err != nil {
		return nil, c, c.err
	}
	d, err := Build(cfg.Route, source(p), p.Result, Inputs{Generation: p.Generation, Drains: p.Drains,
		Taints: p.Taints, Tolerations: p.Tolerations, Backends: c.backends})
	return d, c, err
}

// retains reports whether the policy keeps route's last positive weights for p.
func (s *Sink) retains(p *model.Plan, route *gwapiv1.HTTPRoute) bool {
	if !s.cfg.RetainLastPositive || !p.Result.AllZero() || route == nil {
		return false
	}
	_, positive := RouteWeights(route)
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
// that write (see expectations.routeView; Carries makes no API read).
func (s *Sink) Carries(p *model.Plan) bool {
	route, _, err := s.known.routeView(p.Namespace, p.Name)
	if err != nil {
		return false
	}
	route = ownedRoute(p, route)
	if host, ok := s.contested(p); ok {
		return !carriesHost(route, host)
	}
	if s.retains(p, route) {
		return true
	}
	desired, err := s.build(p)
	if errors.Is(err, ErrUnresolved) || errors.Is(err, ErrKindUnknown) {
		return false // not written until its hostnames resolve (or its kind is known)
	}
	if err != nil {
		return true // refused: nothing will be written
	}
	return route != nil && Matches(desired.Route, route)
}

// Check implements model.Sink: a plan that cannot be built as a route (for example more
// entries than MaxBackends) is Refused with model.ReasonRouteRefused. A plan whose hostname
// is contested passes: Apply handles it without writing its content.
func (s *Sink) Check(p *model.Plan) *model.Confirmation {
	if _, ok := s.contested(p); ok {
		return nil
	}
	if _, err := s.build(p); err != nil && !errors.Is(err, ErrUnresolved) && !errors.Is(err, ErrKindUnknown) {
		return &model.Confirmation{Sink: SinkName, State: model.Refused, Reason: model.ReasonRouteRefused, Message: refusedMessage(p, err)}
	}
	return nil
}

// refusedMessage says why p cannot be published as a route.
func refusedMessage(p *model.Plan, err error) string {
	return fmt.Sprintf("httproute sink cannot publish trafficmap %s: %s", p.Key(), err)
}

// Apply implements model.Sink: it stores the route and its Services (only what differs)
// and reads the gateway's verdict. When the route's hostname is held by another claim the
// route is neither written nor updated (Refused, model.ReasonHostnameConflict); a stored
// route of the map that lists that hostname is removed with its Services, so the gateway
// never holds two of the publisher's routes for one hostname. The route it compares with,
// writes over and reads the verdict from is at least as new as its own last write of it
// (see expectations); so is each backend Service it compares and writes over, and a
// Service it pruned is not seen again. A map being deleted (model.Standing.Finalizing) has
// its stored route set to the plan's zeros whatever the no-positive policy (a route OME's
// publisher wrote for it that the writer adopts included), and none created when it has
// none.
func (s *Sink) Apply(ctx context.Context, p *model.Plan, st model.Standing) (model.Confirmation, error) {
	c := model.Confirmation{Sink: SinkName}
	if host, ok := s.contested(p); ok {
		return s.refuseContested(ctx, p, host)
	}
	desired, choice, err := buildChosen(ctx, s.cfg, p)
	track(s.cfg, p.Key(), p, choice.backends.Kind)
	if errors.Is(err, ErrKindUnknown) {
		return c, err // transient: retried with backoff, the stored route stays
	}
	if errors.Is(err, ErrUnresolved) {
		// Transient: the resolver retries and its change notice reconciles the map again.
		c.State, c.Reason = model.Pending, model.ReasonBackendUnresolved
		c.Message = fmt.Sprintf("httproute sink cannot publish trafficmap %s yet: %s; the route stays as it was (%s)", p.Key(), err, choice.why)
		return c, nil
	}
	if err != nil {
		c.State, c.Reason = model.Refused, model.ReasonRouteRefused
		c.Message = refusedMessage(p, err)
		return c, nil
	}
	live, err := s.known.route(ctx, p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	route := ownedRoute(p, live)
	if st.Finalizing && route == nil && !s.adopts(p, live) {
		c.State, c.Message = model.InPlace, "no route of trafficmap "+p.Key().String()+" is stored"
		return c, nil
	}
	if !st.Finalizing && s.retains(p, route) {
		kept, _ := RouteWeights(route)
		c.State, c.Reason, c.GatewayRef = model.Refused, model.ReasonLastPositiveRetained, gatewayRef(route)
		c.Message = fmt.Sprintf("every effective weight is 0; --no-positive-policy RetainLastPositive keeps the last positive weights on route %s/%s (%s)",
			route.Namespace, route.Name, describe(kept))
		return c, nil
	}
	services, err := s.known.services(ctx, source(p))
	if err != nil {
		return c, err
	}
	synced, err := s.writer.Sync(ctx, source(p), desired, s.known.pin(source(p), live, services))
	c.Writes = synced.Writes
	if synced.RouteWritten {
		s.known.expectRoute(p.Namespace, p.Name, synced.Route)
		s.settles.wrote(synced.Route)
	}
	s.known.expectServices(p.Namespace, p.Name, synced.Services, synced.Pruned)
	if errors.Is(err, ErrConflict) {
		c.State, c.Reason, c.Message = model.Refused, model.ReasonRouteConflict, err.Error()
		return c, nil
	}
	if errors.Is(err, ErrBackendAPIMissing) {
		c.State, c.Reason = model.Refused, model.ReasonBackendAPIMissing
		c.Message = fmt.Sprintf("httproute sink cannot publish trafficmap %s: %s; the route stays as it was", p.Key(), err)
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("sync httproute: %w", err)
	}
	s.judge(&c, p.Key(), synced.Route)
	if desired.Kind != BackendExternalName || s.cfg.BackendKind != "" {
		c.Message += " (" + choice.note() + ")"
	}
	return c, nil
}

// judge sets c from the stored route: in place once stored when acceptance is not
// required, otherwise from the parent Gateway's verdict on the route's generation, read from
// the status entry of the Gateway's own controller (the GatewayClass's controllerName, when
// known) and held for that controller's settle after the sink wrote the route (see settles).
func (s *Sink) judge(c *model.Confirmation, key types.NamespacedName, route *gwapiv1.HTTPRoute) {
	c.GatewayRef = gatewayRef(route)
	if !s.cfg.RequireAccepted {
		c.State = model.InPlace
		c.Message = "route " + route.Namespace + "/" + route.Name + " stored (gateway acceptance not required)"
		return
	}
	if lieplant.On && lieplant.Is(lieplant.KindPrematureAccept) {
		c.State, c.Message = model.InPlace, "route "+route.Namespace+"/"+route.Name+" stored (lieplant: acceptance not read)"
		return
	}
	acc := acceptance(s.cfg, route)
	c.Message = acc.Message
	switch acc.Verdict {
	case Pending:
		c.State, c.Reason = model.Pending, model.ReasonPublishing
	case Rejected:
		c.State, c.Reason = model.Rejected, model.ReasonRouteNotAccepted
	default:
		c.State = model.InPlace
		d := settleFor(s.cfg, acc.Controller)
		if left := s.settles.remaining(route, d); left > 0 {
			s.settles.after(left, key)
			c.State, c.Reason = model.Pending, model.ReasonPublishing
			c.Message += fmt.Sprintf("; held %s more: controller %s writes route status before its proxy serves the route, so an acceptance counts %s after the write (--route-settle)",
				left.Round(time.Millisecond), acc.Controller, d)
		}
	}
}

// acceptance is the parent Gateway's verdict on route, read from its own controller's
// status entry when its GatewayClass is known (AcceptanceBy).
func acceptance(cfg SinkConfig, route *gwapiv1.HTTPRoute) Acceptance {
	controller := ""
	if cfg.ControllerNames != nil {
		controller, _ = cfg.ControllerNames(cfg.Route.gatewayName(route.Namespace)) // unknown on an error: every entry counts
	}
	return cfg.Route.AcceptanceBy(route, controller)
}

// Serves reports whether the parent Gateway serves route: accepted by its controller and,
// when the sink wrote it, past that controller's settle. It is what the old kind's objects
// and OME's Services wait for before they are removed.
func (s *Sink) Serves(route *gwapiv1.HTTPRoute) bool {
	acc := acceptance(s.cfg, route)
	if acc.Verdict != Accepted {
		return false
	}
	return s.settles.remaining(route, settleFor(s.cfg, acc.Controller)) == 0
}

// refuseContested answers a plan whose hostname another claim holds: the map's route is
// removed with its Services when it lists that hostname, and left as it is otherwise.
func (s *Sink) refuseContested(ctx context.Context, p *model.Plan, host string) (model.Confirmation, error) {
	c := model.Confirmation{Sink: SinkName, State: model.Refused, Reason: model.ReasonHostnameConflict}
	live, err := s.known.route(ctx, p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	route := ownedRoute(p, live)
	name := p.Namespace + "/" + RouteName(p.Name)
	if carriesHost(route, host) {
		services, err := s.known.services(ctx, source(p))
		if err != nil {
			return c, err
		}
		n, err := s.writer.Delete(ctx, source(p), s.known.pin(source(p), live, services))
		c.Writes = n
		if err != nil {
			s.known.forgetServices(p.Namespace, p.Name)
			return c, fmt.Errorf("remove httproute with contested hostname: %w", err)
		}
		s.known.forget(p.Namespace, p.Name)
		c.Message = fmt.Sprintf("httproute %s listed the contested hostname %s and was removed with its services", name, host)
		return c, nil
	}
	c.GatewayRef = gatewayRef(route)
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
	live, err := s.known.route(ctx, namespace, name)
	if err != nil {
		return 0, err
	}
	src := Source{Namespace: namespace, Name: name}
	services, err := s.known.services(ctx, src)
	if err != nil {
		return 0, err
	}
	n, err := s.writer.Delete(ctx, src, s.known.pin(src, live, services))
	if err != nil {
		s.known.forgetServices(namespace, name)
		return n, err
	}
	s.known.forget(namespace, name)
	s.settles.forget(namespace, RouteName(name))
	track(s.cfg, src.Key(), nil, "")
	return n, nil
}

// Retire implements model.Retiring: Delete, confirmed as soon as the route and its
// Services are gone from the API server (the gateway then drops the route).
func (s *Sink) Retire(ctx context.Context, key types.NamespacedName) (model.Confirmation, error) {
	n, err := s.Delete(ctx, key.Namespace, key.Name)
	if err != nil {
		return model.Confirmation{Sink: SinkName, Writes: n}, fmt.Errorf("remove httproute: %w", err)
	}
	return model.Confirmation{Sink: SinkName, State: model.InPlace, Writes: n,
		Message: fmt.Sprintf("route %s/%s and its services removed", key.Namespace, RouteName(key.Name))}, nil
}

// gatewayRef is the TrafficMap status reference to route, nil for nil.
func gatewayRef(route *gwapiv1.HTTPRoute) *v1beta1.TrafficMapGatewayRef {
	if route == nil {
		return nil
	}
	return &v1beta1.TrafficMapGatewayRef{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Name: route.Name, Namespace: route.Namespace}
}

// describe renders weights as "backend=weight, ..." in backend order.
func describe(w map[string]int32) string {
	parts := make([]string, 0, len(w))
	for _, name := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, w[name]))
	}
	return strings.Join(parts, ", ")
}
