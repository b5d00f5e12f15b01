// Package drain is the guarded drain and undrain action of the operator commands: it validates
// a request as OME's `kubectl ome traffic drain` does, checks the InferenceService it targets
// and its existing ome.io/traffic-drain annotation against the same rules and safety bounds,
// builds the one JSON merge patch that carries the object's exact UID and resourceVersion
// (enforced by the API server, which refuses a changed object with 409 Conflict) and changes
// only that annotation, and renders the preview and the result. Before the patch,
// [MapClient.MarkPublishing] sets the TrafficMap's Published condition to False as the
// publisher would, so that the condition is never stale for a change made with the tool.
//
// Everything but [Client] and [MapClient] is pure. Error messages are OME's, word for word, so that an
// operator who knows one tool can read the other.
package drain
