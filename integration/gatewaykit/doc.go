// Package gatewaykit runs a real Gateway API data plane on the test machine for the
// end-to-end tests (make e2e) and the chaos run (-gateways): HTTP backends in a network
// namespace that answer with their cluster's name, Traefik as Gateway API controller and
// proxy against a given API server (binaries built by hack/gateways.sh), and the
// GatewayClass and Gateway objects it serves. It needs root for the network namespace.
package gatewaykit
