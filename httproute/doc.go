// Package httproute is the whole HTTPRoute sink: translation and apply. It turns one
// TrafficMap's effective weights into one Gateway API HTTPRoute and one ExternalName Service
// per cluster (Build, pure and deterministic), writes them by server-side apply only when the
// fields the publisher owns differ from what is stored and refuses objects it does not own
// (Writer; it never mutates the objects it is handed and applies every write under its field
// manager), and reads the parent Gateway's verdict from the route status (Config.Acceptance).
//
// Sink puts those together behind the model.Sink contract: it realizes a model.Plan, answers
// with a typed model.Confirmation (reasons model.ReasonRoute*, model.ReasonLastPositiveRetained),
// and keeps per-map expectations so it never judges from an informer cache older than its own
// last write. It imports neither the controller nor its informers: the stored objects come
// through a Store.
package httproute
