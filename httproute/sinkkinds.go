package httproute

import (
	"context"
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

// backendChoice is the backend kind and addresses of one plan, with what the map is told
// about them.
type backendChoice struct {
	backends Backends
	// why names the kind and, for auto, the controller that chose it.
	why string
	// stale lists the hosts whose latest lookup failed (their last good addresses are used).
	stale []string
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
			controller, _ = cfg.ControllerNames(gw) // unknown: service-externalname, as today
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
