package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// The naming contract of the publisher's xDS resources, as its documentation states it. The
// probes name and check what they subscribe to by these alone, never by the publisher's own
// code (TestDepsIndependent keeps the xds package out of the harness): a naming bug in the
// product is caught, not shared.

// Names of the Envoy flavour.
const (
	// envoyListener is the Envoy flavour's one listener (docs/concepts/xds.md, "What each
	// flavour is served"; docs/how-to/xds-only.md).
	envoyListener = "trafficmap-http"
	// envoyRouteConfig is the one route configuration the Envoy listener names over RDS, with
	// a virtual host per map (docs/concepts/xds.md, "What each flavour is served").
	envoyRouteConfig = "trafficmap-routes"
)

// Node metadata that picks a client's flavour (docs/concepts/xds.md, first paragraph).
const (
	flavourMetadataKey = "trafficmap.dev/flavour"
	flavourEnvoy       = "envoy"
	flavourGRPC        = "grpc"
)

// virtualHostName is the name of map ns/name's virtual host in both flavours: its key
// "<namespace>/<map>" (docs/concepts/xds.md, "What each flavour is served"). Its domains are
// the map's hostnames (Envoy) or every name gRPC clients dial it by (gRPC).
func virtualHostName(ns, name string) string { return ns + "/" + name }

// grpcListenerName is the api_listener a proxyless gRPC client dials the map's service by,
// "<service>.<namespace>" (docs/concepts/xds.md, "What each flavour is served" and
// "Relevance"); the map's hostnames are listeners too, with the same route configuration.
func grpcListenerName(service, ns string) string { return service + "." + ns }

// grpcRouteConfigName is the route configuration of map ns/name in the gRPC flavour, named
// by each of its api_listeners over RDS: "<namespace>/<map>" (docs/concepts/xds.md,
// "Relevance"), holding the one virtual host virtualHostName(ns, name).
func grpcRouteConfigName(ns, name string) string { return ns + "/" + name }

// xdsClusterName is the cluster of entry cluster of map ns/name in both flavours,
// "<namespace>/<map>/<cluster>" (docs/concepts/xds.md, "What each flavour is served" and
// "Relevance"). Its load assignment holds one endpoint, at the entry's address
// (endpointAddress).
func xdsClusterName(ns, name, cluster string) string { return ns + "/" + name + "/" + cluster }

// endpointAddress is the address "host:port" of the one endpoint of an entry's cluster, from
// the entry's endpoint URL: its host, lower-cased, and its port, else 80 for http and 443 for
// https (docs/concepts/xds.md, "What each flavour is served"; docs/reference/written.md, the
// Services' ports).
func endpointAddress(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", raw, err)
	}
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return "", fmt.Errorf("endpoint %q: scheme %q is neither http nor https", raw, u.Scheme)
		}
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("endpoint %q: port: %w", raw, err)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("endpoint %q: no host", raw)
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port), nil
}
