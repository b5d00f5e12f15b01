// Package xds is the whole xDS sink: Sink (a model.Sink) serves every TrafficMap's plan the
// pipeline gives it to Envoy and proxyless gRPC clients and confirms a plan once the clients
// relevant to it have ACKed it. It turns the effective weights of every TrafficMap into the
// resources an Envoy (listener, route configuration, clusters) or a proxyless gRPC client
// (api_listeners, route configurations, clusters) needs, validates them before anything is
// served, and derives a version from their content.
//
// Translate and Validate are pure and deterministic. Server serves the result; its Tracker
// records, per stream, what each client subscribed to, ACKed and NACKed, and Confirm (pure)
// decides from that which streams are relevant to a map and whether they confirmed it. The
// Sink never plans: the pipeline hands it plans (Serve on every replica, Apply on the
// leader), its rebuild loop serves them paced in storms, and it names the maps whose
// confirmation may have changed (Updated) for the pipeline to reconcile again.
package xds
