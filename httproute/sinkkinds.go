package httproute

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
)

// ControllerNames reads the controllerName of the GatewayClass of a Gateway: "" with a nil
// error when the Gateway or its GatewayClass is not (yet) known. publish backs it with its
// informer caches; it must not block.
type ControllerNames func(gateway types.NamespacedName) (string, error)

// ErrKindUnknown marks a plan whose backend kind auto cannot tell now (the GatewayClass read
// failed): transient; the stored route stays and the reconcile is retried.
var ErrKindUnknown = errors.New("backend kind unknown")

// Tracker is implemented by a Resolver that keeps refreshing the hostnames an owner (a map's
// namespace/name) uses (the resolve package's Cache): the Sink tells it the endpoint
// hostnames of each map it builds as endpointslice, and none for any other map or a
// deleted one.
type Tracker interface {
	Track(owner string, hosts []string)
}

// track tells cfg's Resolver, when it is a Tracker, the hostnames map p uses with kind.
func track(cfg SinkConfig, key types.NamespacedName, p *model.Plan, kind BackendKind) {
	t, ok := cfg.Resolver.(Tracker)
	if !ok {
		return
	}
	var hosts []string
	if p != nil && kind == BackendEndpointSlice {
		for _, e := range p.Result.Entries {
			if _, err := netip.ParseAddr(e.Endpoint.Host); err != nil {
				hosts = append(hosts, e.Endpoint.Host)
			}
		}
	}
	t.Track(key.String(), hosts)
}

// backendChoice is the backend kind and addresses of one plan, with what the map is told
// about them.
type backendChoice struct {
	backends Backends
	// why names the kind and, for auto, the controller that chose it.
	why string
	// stale lists the hosts whose latest lookup failed (their last good addresses are used).
	stale []string
	// err: auto could not read the Gateway's GatewayClass (a transient error: the kind is
	// not switched on it; the reconcile is retried).
	err error
}

// chooseBackends returns the backend kind of p's route and, for endpointslice, the addresses of
// its endpoint hostnames from the resolver. It never blocks on a lookup.
func chooseBackends(ctx context.Context, cfg SinkConfig, p *model.Plan) backendChoice {
	kind := cfg.BackendKind
	var c backendChoice
	switch kind {
	case "":
		kind = BackendExternalName
		c.why = "backends: " + string(kind)
	case BackendAuto:
		gw := cfg.Route.gatewayName(p.Namespace)
		controller := ""
		if cfg.ControllerNames != nil {
			var err error
			if controller, err = cfg.ControllerNames(gw); err != nil {
				c.err = fmt.Errorf("%w: read the gatewayclass of gateway %s for --backend-kind auto: %w", ErrKindUnknown, gw, err)
			}
		}
		var known bool
		kind, known = KindForController(controller)
		switch {
		case controller == "":
			c.why = fmt.Sprintf("backends: %s (auto: the GatewayClass of gateway %s is not known)", kind, gw)
		case !known:
			c.why = fmt.Sprintf("backends: %s (auto: controller %s is not in the table)", kind, controller)
		default:
			c.why = fmt.Sprintf("backends: %s (auto: controller %s)", kind, controller)
		}
	default:
		c.why = "backends: " + string(kind) + " (--backend-kind)"
	}
	c.backends.Kind = kind
	if kind == BackendEndpointSlice {
		c.backends.Addresses, c.stale = resolveHosts(ctx, cfg.Resolver, p)
	}
	return c
}

// resolve returns the addresses of p's endpoint hostnames known to the resolver, and the
// hosts whose latest lookup failed though earlier ones gave addresses.
func resolveHosts(ctx context.Context, resolver Resolver, p *model.Plan) (map[string][]netip.Addr, []string) {
	out := map[string][]netip.Addr{}
	var stale []string
	for _, e := range p.Result.Entries {
		host := e.Endpoint.Host
		if _, err := netip.ParseAddr(host); err == nil || resolver == nil {
			continue
		}
		if _, done := out[host]; done {
			continue
		}
		addrs, err := resolver.Resolve(ctx, host)
		if len(addrs) > 0 {
			out[host] = addrs
			if err != nil {
				stale = append(stale, fmt.Sprintf("entry %q host %s (%v)", e.Cluster, host, err))
			}
		}
	}
	return out, stale
}

// note is what the map's message says about c: the kind and any stale addresses, which are
// still what the gateway serves.
func (c backendChoice) note() string {
	if len(c.stale) == 0 {
		return c.why
	}
	return c.why + "; the latest lookup failed, the last good addresses stay in the EndpointSlices (still served): " +
		strings.Join(c.stale, "; ")
}
