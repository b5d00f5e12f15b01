package httproute

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// BackendKind is the kind of per-cluster object a route's backendRef points at. The parent
// Gateway's implementation must resolve it: Envoy Gateway and Traefik refuse an ExternalName
// Service (docs/reference/backends.md).
type BackendKind string

// The backend kinds (--backend-kind).
const (
	// BackendAuto picks the kind from the parent Gateway's GatewayClass controllerName
	// (KindForController); it is never a built kind itself.
	BackendAuto BackendKind = "auto"
	// BackendExternalName is an ExternalName Service per cluster (Istio; what OME writes).
	BackendExternalName BackendKind = "service-externalname"
	// BackendEndpointSlice is a selector-less Service per cluster with EndpointSlices that
	// hold the addresses the cluster endpoint's hostname resolves to.
	BackendEndpointSlice BackendKind = "endpointslice"
	// BackendEnvoyGateway is Envoy Gateway's Backend (gateway.envoyproxy.io/v1alpha1) with
	// an FQDN (or IP) endpoint per cluster; Envoy Gateway serves it only with its Backend
	// API enabled.
	BackendEnvoyGateway BackendKind = "envoy-gateway-backend"
)

// BackendKinds lists every value --backend-kind accepts, the default first.
var BackendKinds = []BackendKind{BackendAuto, BackendExternalName, BackendEndpointSlice, BackendEnvoyGateway}

// ParseBackendKind returns the kind named s (one of BackendKinds).
func ParseBackendKind(s string) (BackendKind, error) {
	for _, k := range BackendKinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(BackendKinds))
	for i, k := range BackendKinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown backend kind %q: want one of %s", s, strings.Join(names, ", "))
}

// ControllerKind is one row of the table auto picks a backend kind from.
type ControllerKind struct {
	// Controller is a GatewayClass spec.controllerName.
	Controller string
	// Implementation names the Gateway API implementation for people.
	Implementation string
	// Kind is the backend kind auto uses for it.
	Kind BackendKind
}

// ControllerKinds is the table auto picks a backend kind from, by the parent Gateway's
// GatewayClass controllerName; a controller not listed gets BackendExternalName. Envoy
// Gateway gets endpointslice, which needs nothing enabled; operators who enabled its
// Backend API may set envoy-gateway-backend. docs/reference/backends.md shows this table.
var ControllerKinds = []ControllerKind{
	{Controller: "gateway.envoyproxy.io/gatewayclass-controller", Implementation: "Envoy Gateway", Kind: BackendEndpointSlice},
	{Controller: "traefik.io/gateway-controller", Implementation: "Traefik", Kind: BackendEndpointSlice},
	{Controller: "projectcontour.io/gateway-controller", Implementation: "Contour", Kind: BackendEndpointSlice},
	{Controller: "gateway.nginx.org/nginx-gateway-controller", Implementation: "NGINX Gateway Fabric", Kind: BackendEndpointSlice},
	{Controller: "kgateway.dev/kgateway", Implementation: "kgateway", Kind: BackendEndpointSlice},
	{Controller: "istio.io/gateway-controller", Implementation: "Istio", Kind: BackendExternalName},
}

// KindForController returns the backend kind auto uses for a GatewayClass with this
// controllerName, and whether the controller is in ControllerKinds (an unknown one, or ""
// when the GatewayClass cannot be read, gets BackendExternalName).
func KindForController(controllerName string) (BackendKind, bool) {
	for _, row := range ControllerKinds {
		if row.Controller == controllerName {
			return row.Kind, true
		}
	}
	return BackendExternalName, false
}

// Resolver gives the addresses a cluster endpoint's hostname resolves to. An IP literal is
// its own address. For a known host it returns the last good addresses (sorted) and, when
// the latest lookup failed, a non-nil error too; no addresses and an error mean the host
// was never resolved. It must be safe for concurrent use and must not block on a lookup
// (the resolve package's Cache answers from its cache).
type Resolver interface {
	Resolve(ctx context.Context, host string) ([]netip.Addr, error)
}

// Backends is what the backends of one route are built with.
type Backends struct {
	// Kind is the concrete kind to build ("" means BackendExternalName; never BackendAuto).
	Kind BackendKind
	// Addresses are the addresses each endpoint host resolves to, by host, for
	// BackendEndpointSlice (an IP endpoint needs no entry).
	Addresses map[string][]netip.Addr
}

// kind returns b's kind with the default filled in.
func (b Backends) kind() BackendKind {
	if b.Kind == "" {
		return BackendExternalName
	}
	return b.Kind
}
