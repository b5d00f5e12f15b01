// Package httproute is the Gateway API sink: it turns one TrafficMap's effective weights into
// one HTTPRoute and one ExternalName Service per cluster, writes them by server-side apply
// only when the fields the publisher owns differ from what is stored, refuses objects it does
// not own, and reads the parent Gateway's verdict from the route status.
//
// Build is pure and deterministic. Writer performs the API writes; it never mutates the
// objects it is handed and applies every write under its field manager.
package httproute
