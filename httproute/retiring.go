package httproute

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/model"
)

// RetiringSinkName is the RetiringSink's name in confirmations, logs and metrics.
const RetiringSinkName = "httproute-retiring"

// RetiringSink is what is left of the HTTPRoute sink when --sinks leaves it out: it
// publishes nothing new, but a route and Services the sink wrote before (for example before
// a restart with --sinks xds) are retired in order before the map is Published without them.
// The stored route is first set to the plan's weights (its parent Gateway is kept, the rest
// is the route Build makes), and once the gateway accepted that generation (at once when
// acceptance is not required; also when the gateway rejects it) the route goes with its
// Services. Until then Apply answers Pending with model.ReasonRetiringDisabledSink naming the
// route, so the map's Published condition is never True while a route of the publisher
// carries other weights than the plan's. A route it cannot set to the plan (no hostname,
// a contested one, a plan Build refuses) is removed at once. It creates nothing: a map
// with nothing stored is InPlace.
//
// The Store must return only objects with the ownership labels (the publisher's informers
// select them). Every write is decided from a read of the route through the API, never from
// the cache alone, so a route the sink removed is never written again from a stale cache;
// a removed route's UID is remembered (gone) until the cache no longer holds it, so Carries
// does not see it either. It is safe for concurrent use on different maps.
type RetiringSink struct {
	cfg    SinkConfig
	writer *Writer
	store  Store

	mu   sync.Mutex                         // guards gone
	gone map[types.NamespacedName]types.UID // map key -> UID of the route removed
}

var (
	_ model.Sink     = (*RetiringSink)(nil)
	_ model.Retiring = (*RetiringSink)(nil)
)

// NewRetiringSink returns the sink retiring what the HTTPRoute sink stored, writing with
// writer and reading the stored objects from store. cfg.Route's Gateway is not used: a
// route keeps its stored parent.
func NewRetiringSink(cfg SinkConfig, writer *Writer, store Store) *RetiringSink {
	return &RetiringSink{cfg: cfg, writer: writer, store: store, gone: map[types.NamespacedName]types.UID{}}
}

// Name implements model.Sink.
func (s *RetiringSink) Name() string { return RetiringSinkName }

// Check implements model.Sink: nothing is refused (a route that cannot carry the plan is
// removed instead).
func (s *RetiringSink) Check(*model.Plan) *model.Confirmation { return nil }

// Carries implements model.Sink: true when no route of the map is stored (Services alone
// route nothing), so a leftover route makes the pipeline announce before Apply.
func (s *RetiringSink) Carries(p *model.Plan) bool {
	route, err := s.cachedRoute(p.Namespace, p.Name)
	return err == nil && route == nil
}

// cachedRoute is the map's route in the store, nil when there is none or it is the one the
// sink removed (then forgotten once the store no longer has it).
func (s *RetiringSink) cachedRoute(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	route, err := s.store.Route(namespace, RouteName(name))
	if err != nil {
		return nil, fmt.Errorf("read cached httproute: %w", err)
	}
	key := model.Key(namespace, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch uid, ok := s.gone[key]; {
	case !ok:
	case route == nil || route.UID != uid:
		delete(s.gone, key)
	default:
		return nil, nil
	}
	if route != nil && !Managed(route) {
		return nil, nil
	}
	return route, nil
}

// Apply implements model.Sink: see RetiringSink. It writes only when something of the map
// is stored.
func (s *RetiringSink) Apply(ctx context.Context, p *model.Plan, _ model.Standing) (model.Confirmation, error) {
	c := model.Confirmation{Sink: RetiringSinkName, State: model.InPlace}
	src := source(p)
	cached, err := s.cachedRoute(p.Namespace, p.Name)
	if err != nil {
		return c, err
	}
	services, err := s.store.Services(src)
	if err != nil {
		return c, fmt.Errorf("read cached services: %w", err)
	}
	var live *gwapiv1.HTTPRoute
	if cached != nil {
		if live, err = s.writer.Route(ctx, p.Namespace, RouteName(p.Name)); err != nil {
			return c, err
		}
		if live != nil && !Owned(live.Labels, src) {
			live = nil
		}
	}
	if live == nil && len(services) == 0 {
		return c, nil
	}
	name := p.Namespace + "/" + RouteName(p.Name)
	if live != nil {
		desired, ok := s.inPlace(p, live)
		if ok {
			synced, err := s.writer.Sync(ctx, src, desired.Desired, pinned{Store: s.store, namespace: p.Namespace, name: p.Name, route: live, services: services})
			c.Writes = synced.Writes
			if err != nil {
				return c, fmt.Errorf("set retiring httproute %s to the current weights: %w", name, err)
			}
			live, services = synced.Route, mergeServices(services, synced)
			if acc := s.acceptance(desired.cfg, live); acc.Verdict == Pending {
				c.State, c.Reason = model.Pending, model.ReasonRetiringDisabledSink
				c.Message = fmt.Sprintf("httproute %s of the disabled httproute sink is removed once the gateway accepted it at these weights: %s", name, acc.Message)
				return c, nil
			}
		}
	}
	n, err := s.remove(ctx, src, live, services)
	c.Writes += n
	if err != nil {
		return c, err
	}
	if live != nil {
		c.Message = fmt.Sprintf("httproute %s of the disabled httproute sink removed with its services", name)
	}
	return c, nil
}

// retiringRoute is the route Build makes for a plan, with the configuration it was built
// with (the stored route's parent).
type retiringRoute struct {
	*Desired
	cfg Config
}

// inPlace is the route of p under route's stored parent; ok is false when p cannot be
// written as a route (no hostname, a contested one, content Build refuses).
func (s *RetiringSink) inPlace(p *model.Plan, route *gwapiv1.HTTPRoute) (retiringRoute, bool) {
	cfg := s.cfg.Route
	if len(route.Spec.ParentRefs) != 1 {
		return retiringRoute{}, false
	}
	ref := route.Spec.ParentRefs[0]
	cfg.Gateway = types.NamespacedName{Name: string(ref.Name)}
	if ref.Namespace != nil {
		cfg.Gateway.Namespace = string(*ref.Namespace)
	}
	cfg.GatewaySection = ""
	if ref.SectionName != nil {
		cfg.GatewaySection = string(*ref.SectionName)
	}
	if host, err := cfg.Hostname(source(p)); err != nil || p.Withheld(host) {
		return retiringRoute{}, false
	}
	desired, err := Build(cfg, source(p), p.Result, Inputs{Generation: p.Generation, Drains: p.Drains,
		Taints: p.Taints, Tolerations: p.Tolerations})
	if err != nil {
		return retiringRoute{}, false
	}
	return retiringRoute{Desired: desired, cfg: cfg}, true
}

// acceptance is the gateway's verdict on route, Accepted when acceptance is not required.
func (s *RetiringSink) acceptance(cfg Config, route *gwapiv1.HTTPRoute) Acceptance {
	if !s.cfg.RequireAccepted {
		return Acceptance{Verdict: Accepted}
	}
	return cfg.Acceptance(route)
}

// remove deletes route (when not nil) and then services, and remembers the route's UID.
func (s *RetiringSink) remove(ctx context.Context, src Source, route *gwapiv1.HTTPRoute, services []*corev1.Service) (int, error) {
	n, err := s.writer.Delete(ctx, src, pinned{Store: s.store, namespace: src.Namespace, name: src.Name, route: route, services: services})
	if err != nil {
		return n, fmt.Errorf("remove retiring httproute: %w", err)
	}
	if route != nil {
		s.mu.Lock()
		s.gone[model.Key(src.Namespace, src.Name)] = route.UID
		s.mu.Unlock()
	}
	return n, nil
}

// mergeServices are the map's Services after a Sync over services: those Sync applied, the
// others it did not prune.
func mergeServices(services []*corev1.Service, synced SyncResult) []*corev1.Service {
	out := slices.Clone(synced.Services)
	for _, svc := range services {
		written := slices.ContainsFunc(out, func(o *corev1.Service) bool { return o.Name == svc.Name })
		pruned := slices.ContainsFunc(synced.Pruned, func(o *corev1.Service) bool { return o.Name == svc.Name })
		if !written && !pruned {
			out = append(out, svc)
		}
	}
	return out
}

// Delete implements model.Sink: the deleted map's route and Services go at once (each
// delete preconditioned on the object's UID).
func (s *RetiringSink) Delete(ctx context.Context, namespace, name string) (int, error) {
	src := Source{Namespace: namespace, Name: name}
	route, err := s.cachedRoute(namespace, name)
	if err != nil {
		return 0, err
	}
	services, err := s.store.Services(src)
	if err != nil {
		return 0, fmt.Errorf("read cached services: %w", err)
	}
	return s.remove(ctx, src, route, services)
}

// Retire implements model.Retiring: Delete, confirmed once the route and its Services are
// gone from the API server (as the HTTPRoute sink's Retire).
func (s *RetiringSink) Retire(ctx context.Context, key types.NamespacedName) (model.Confirmation, error) {
	n, err := s.Delete(ctx, key.Namespace, key.Name)
	if err != nil {
		return model.Confirmation{Sink: RetiringSinkName, Writes: n}, err
	}
	return model.Confirmation{Sink: RetiringSinkName, State: model.InPlace, Writes: n}, nil
}
