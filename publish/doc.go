// Package publish is the publisher's controller. It alone owns informers and the work
// queue: informers on TrafficMaps, InferenceServices (metadata only), HTTPRoutes and the
// publisher's backend Services (and, when their APIs are served, the cluster-scoped taint
// sources: Modelplane InferenceClusters and OME WorkloadClusters) feed one rate-limited
// queue of TrafficMap keys; event handlers (router) only enqueue.
//
// One pipeline that pushes: the workers (workers.go) take each key and walk down floors,
// never back up (reconcile.go): gather the map's inputs from the caches (gather.go) → plan
// once (plan.go over model.PlanMap, pure: effective weights and a sink-neutral model.Plan
// carrying only the names the map holds; model.ResolveHostnames decides hostname ownership
// by claim time from the claims ownership.go looks up, after model.ClaimPolicy said which
// names the map's namespace may claim) → sinks: check
// the plan with every enabled sink (a plan one sink refuses goes to none), journal the names
// newly granted (journal.go), announce a change, hand the same plan to every enabled sink
// (httproute.Sink, xds.Sink) with the map's model.Standing, each
// answering with a typed confirmation → decide the Published condition from them, and with
// it the PublicationFallback condition (pure, model.Decide) → status: write both with
// server-side apply under the publisher's field manager, only when they differ (status.go). Published is True only when every enabled sink
// confirms the plan is in place. No sink plans or calls back: what a sink learns later (an
// xDS ACK, a client joining, its reconnect grace ending) it names through model.Updater,
// and the workers queue those maps.
//
// Before its first external write for a map the pipeline adds OME's publisher finalizer
// (model.Finalizer). A deleted map it holds is torn down in order by the leader instead
// (teardown.go): Published False (Finalizing), the plan at weight 0 to every sink and their
// confirmations, the removal (model.Retiring) and its confirmations, each wait bounded by
// --teardown-timeout, then the finalizer goes; release-finalizers (finalizer.go) is the
// uninstall's escape hatch.
//
// Every replica runs the workers. While it leads (leader.go) they run the whole pipeline;
// otherwise only gather → plan → check → the sinks that serve on every replica
// (model.Serving, the xDS sink), with no claim, no write and no Event. Before the sinks
// start, every cached map is planned that way once, so the first xDS snapshot is complete.
//
// Errors are classified once: user errors (invalid input, conflicts, a rejecting gateway or
// client) set the condition and an Event and are not retried hot; everything else is
// retried with exponential backoff. A failed reconcile never removes what was published
// before.
package publish
