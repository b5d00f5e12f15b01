// Package xds is the xDS sink's translation: it turns the effective weights of every
// TrafficMap into the resources an Envoy (listener, route configuration, clusters) or a
// proxyless gRPC client (api_listeners, route configurations, clusters) needs, validates
// them before anything is served, and derives a version from their content.
//
// Translate and Validate are pure and deterministic. Server serves the result; its Tracker
// records, per stream, what each client subscribed to, ACKed and NACKed, and Confirm (pure)
// decides from that which streams are relevant to a map and whether they confirmed it.
package xds
