// Package publish is the publisher's controller. It alone owns informers and the work
// queue: informers on TrafficMaps, InferenceServices (metadata only), HTTPRoutes and the
// publisher's backend Services (and, when their APIs are served, the cluster-scoped taint
// sources: Modelplane InferenceClusters and OME WorkloadClusters) feed one rate-limited
// queue of TrafficMap keys; event handlers only enqueue.
//
// Each key runs one level-triggered, idempotent pipeline (reconcile.go): gather the map's
// inputs from the caches, plan (pure: effective weights from package weights and a
// sink-neutral model.Plan, carrying only the names the map holds: model.ResolveHostnames decides hostname
// ownership by claim time, from the claims ownership.go looks up in the caches' name
// indexes and the claim journals in the maps' status.publisher, after model.ClaimPolicy said which
// names the map's namespace may claim), check the plan with every enabled sink (a plan one
// sink refuses goes to none, and the xDS sink's rebuild loop reads plans through the same
// check), journal the names newly granted (journal.go) before any sink serves them, apply it to
// every enabled sink through the model.Sink contract (publish/routesink, publish/xdssink), decide the Published condition from the
// sinks' typed confirmations (pure), and write the status with server-side apply under the
// publisher's field manager, only when it differs. Published is True only when every
// enabled sink confirms the plan is in place.
//
// Errors are classified once: user errors (invalid input, conflicts, a rejecting gateway or
// client) set the condition and an Event and are not retried hot; everything else is
// retried with exponential backoff. A failed reconcile never removes what was published
// before.
package publish
