// Package xds is the xDS sink's translation: it turns the effective weights of every
// TrafficMap into the resources an Envoy (listener, route configuration, clusters) or a
// proxyless gRPC client (api_listeners, route configurations, clusters) needs, validates
// them before anything is served, and derives a version from their content.
//
// Translate and Validate are pure and deterministic. The server that serves the result and
// tracks ACKs is not part of this package yet.
package xds
