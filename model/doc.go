// Package model is the publisher's pure domain model: what the controller (package
// publish), the sinks (httproute, xds) and the operator commands (drain, report) all decide
// from. It holds no informer, lister, client, work queue or gRPC; everything in it is a
// function of its arguments, so the operator commands compute exactly what the publisher
// computes without linking the controller.
//
// It holds, in the order the pipeline uses them:
//
//   - inputs -> effective weights: Inputs, Compute (drains, cluster taints, tolerations,
//     ramps, and the fallback to the recorded state for a malformed input: Recorded);
//   - hostname claims and ownership: Claim, ResolveHostnames, ForeignConflicts (who holds
//     which name, by claim time), ClaimPolicy (which namespace may claim which name), and
//     the claim journal in status.publisher (JournalOf, JournaledNames, LastPositive);
//   - the plan step: PlanMap, from a plain Gathered to a Planned holding the sink-neutral
//     Plan, or a UserError;
//   - the sink contract: Plan, Sink, Confirmation (sink.go). A sink receives a Plan, a
//     sink-neutral description of what one map must publish, translates it into its own
//     form (an HTTPRoute, xDS resources, ...) and answers with a typed Confirmation. One
//     decision for all sinks: before any sink applies a plan, the pipeline asks every
//     enabled sink whether it can carry it at all (Check); a plan one sink refuses is
//     applied by none, so no sink moves while another keeps the old weights. A new sink is
//     one new package that implements Sink; optional capabilities (a server of its own,
//     debug endpoints, serving on every replica, news from its consumers) are the small
//     interfaces Starter, Debugger, Serving and Updater; a plan goes with the map's
//     Standing (what its PUBLISHED column claimed before), never inside the Plan;
//   - the decide step: Decide, the Published condition (Status) from the confirmations,
//     True only when every enabled sink answers InPlace, and with it the
//     PublicationFallback condition (Fallback: True while a retained plan is served);
//   - typed state: the Published reasons (Reason), the PublicationFallback reasons
//     (FallbackReason), the one content digest (ContentDigest,
//     Plan.Digest), the one key type (types.NamespacedName: Key, KeyOf), and the xDS
//     sink's /debug/xds wire types (XDSDebugState).
//
// Nothing here parses a condition message: packages talk in these types.
package model
