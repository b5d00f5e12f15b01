package model

// Reason is a reason of the Published condition. Reasons are part of the publisher's
// interface (docs/concepts/published.md documents each one): the pipeline, the sinks and
// the operator commands name them with these constants, and nothing reads a condition's
// message to learn what happened.
type Reason string

// Reasons of the Published condition.
const (
	// ReasonPublished: every enabled sink carries the plan and its consumers confirmed it.
	ReasonPublished Reason = "Published"
	// ReasonPublishing: a change is on its way; some sink or consumer has not confirmed it
	// yet. It is also the HTTPRoute sink's answer while the gateway has not decided.
	ReasonPublishing Reason = "Publishing"
	// ReasonInvalidTrafficMap: the map itself is invalid; nothing of it is published.
	ReasonInvalidTrafficMap Reason = "InvalidTrafficMap"
	// ReasonInvalidDrainAnnotation: the drain annotation is malformed (the last valid drain
	// set is kept when one is recorded).
	ReasonInvalidDrainAnnotation Reason = "InvalidDrainAnnotation"
	// ReasonInvalidTaints: a taint source of an entry cluster is malformed.
	ReasonInvalidTaints Reason = "InvalidTaints"
	// ReasonInvalidTolerations: the tolerations annotation is malformed.
	ReasonInvalidTolerations Reason = "InvalidTolerations"
	// ReasonInvalidRamp: the ramp annotation is malformed; nothing is published.
	ReasonInvalidRamp Reason = "InvalidRampAnnotation"
	// ReasonRamping: a ramp shapes the weights; Published says True only once it ended.
	ReasonRamping Reason = "Ramping"
	// ReasonSourceNotFound: the InferenceService spec.service names does not exist (or is
	// not the one status.sourceUID names).
	ReasonSourceNotFound Reason = "SourceNotFound"
	// ReasonHostnameConflict: one of the map's names is held by another claim
	// (Plan.Conflicts); a sink that refuses a plan for that reason reports it.
	ReasonHostnameConflict Reason = "HostnameConflict"
	// ReasonHostnameNotEntitled: the map's namespace may not claim its hostname
	// (ClaimPolicy).
	ReasonHostnameNotEntitled Reason = "HostnameNotEntitled"
	// ReasonRouteConflict (HTTPRoute sink): a foreign object holds the route's or a
	// Service's name.
	ReasonRouteConflict Reason = "RouteConflict"
	// ReasonRouteRefused (HTTPRoute sink): the plan cannot be written as a route (for
	// example too many entries).
	ReasonRouteRefused Reason = "RouteRefused"
	// ReasonRouteNotAccepted (HTTPRoute sink): the parent Gateway did not accept the route.
	ReasonRouteNotAccepted Reason = "RouteNotAccepted"
	// ReasonBackendUnresolved (HTTPRoute sink, backend kind endpointslice): an entry's
	// endpoint hostname has never resolved, so its EndpointSlice would be empty; the route is
	// not updated (the last published state stays) until it resolves.
	ReasonBackendUnresolved Reason = "BackendUnresolved"
	// ReasonBackendAPIMissing (HTTPRoute sink, backend kind envoy-gateway-backend): the API
	// server does not serve Envoy Gateway's Backend API; the route is not updated.
	ReasonBackendAPIMissing Reason = "BackendAPIMissing"
	// ReasonLastPositiveRetained (HTTPRoute sink): every weight is 0 and the policy keeps
	// the last positive weights on the route.
	ReasonLastPositiveRetained Reason = "LastPositiveRetained"
	// ReasonXDSRejected (xDS sink): an xDS client NACKed a version carrying the map's
	// content.
	ReasonXDSRejected Reason = "XDSRejected"
	// ReasonXDSInvalid (xDS sink): the map's resources failed validation; its last good
	// ones stay served.
	ReasonXDSInvalid Reason = "XDSInvalid"
	// ReasonPublisherChanged: the map's claim journal names another publisher that holds
	// it (HolderOf); this publisher writes nothing for it (the condition only while the
	// holder is silent, HolderSilent) unless run with --take-over-from that name. It is
	// also the reason of the Warning Event that a holder change records.
	ReasonPublisherChanged Reason = "PublisherChanged"
	// ReasonFinalizing: the map is being deleted and the publisher's finalizer holds it
	// while the published state goes in order: every weight 0, then the route, Services
	// and xDS resources (OME's TrafficMapReasonPublicationFinalizing).
	ReasonFinalizing Reason = "Finalizing"
	// ReasonRetiringDisabledSink: a route the HTTPRoute sink wrote before it was turned off
	// (--sinks without httproute) is still stored; it is set to the map's weights and,
	// once the gateway accepted it, removed with its Services (httproute.RetiringSink).
	ReasonRetiringDisabledSink Reason = "RetiringDisabledSink"
)

// Reasons of the Normal Events that mark a ramp's first step and its end (the Published
// condition's Ramping reason marks its start).
const (
	ReasonRampStarted  Reason = "RampStarted"
	ReasonRampFinished Reason = "RampFinished"
)

// Reasons of the Events of a map's ordered teardown (ReasonFinalizing marks its start):
// a wait that ran out of --teardown-timeout (Warning), and the finalizer's removal (Normal).
const (
	ReasonTeardownTimedOut Reason = "TeardownTimedOut"
	ReasonFinalized        Reason = "Finalized"
)

// ReasonClaimJournalIgnored is the reason of the Warning Event recorded when entries of a
// map's claim journal do not count (Evidence.Ignored): they name no name the publisher
// granted to the map, or one the claim policy refuses.
const ReasonClaimJournalIgnored Reason = "ClaimJournalIgnored"

// Reasons lists every reason of the Published condition, in the order above.
func Reasons() []Reason {
	return []Reason{ReasonPublished, ReasonPublishing, ReasonInvalidTrafficMap, ReasonInvalidDrainAnnotation,
		ReasonInvalidTaints, ReasonInvalidTolerations, ReasonInvalidRamp, ReasonRamping, ReasonSourceNotFound,
		ReasonHostnameConflict, ReasonHostnameNotEntitled, ReasonRouteConflict, ReasonRouteRefused,
		ReasonRouteNotAccepted, ReasonBackendUnresolved, ReasonBackendAPIMissing, ReasonLastPositiveRetained, ReasonXDSRejected, ReasonXDSInvalid, ReasonPublisherChanged, ReasonFinalizing,
		ReasonRetiringDisabledSink}
}

// Normal reports whether a condition with this reason is news of progress (a Normal
// Event) rather than a problem (a Warning Event).
func (r Reason) Normal() bool {
	return r == ReasonPublished || r == ReasonPublishing || r == ReasonRamping || r == ReasonFinalizing ||
		r == ReasonRetiringDisabledSink
}
