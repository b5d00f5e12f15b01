// Package publish is the publisher's control loop. It alone owns informers and the work
// queue: informers on TrafficMaps, InferenceServices (metadata only), HTTPRoutes and the
// publisher's backend Services (and, when their APIs are served, the cluster-scoped taint
// sources: Modelplane InferenceClusters and OME WorkloadClusters) feed one rate-limited
// queue of TrafficMap keys, and a
// level-triggered, idempotent reconcile computes effective weights (package weights), hands
// them to the HTTPRoute sink (package httproute), waits for the sink's confirmation and sets
// the TrafficMap's Published condition with server-side apply under its own field manager.
//
// Errors are classified once: user errors (invalid input, conflicts, a rejecting gateway) set
// the condition and an Event and are not retried hot; everything else is retried with
// exponential backoff. A failed reconcile never removes what was published before.
package publish
