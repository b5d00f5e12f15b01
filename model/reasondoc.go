package model

import "github.com/trafficmap/publisher/api/v1beta1"

// The reference's words for the conditions and reasons (docs/reference/conditions.md is
// generated from them by hack/docgen): one sentence or two for an operator reading a
// TrafficMap's status, true of the code that sets each one.

// Condition describes a condition type of a TrafficMap for the reference.
type Condition struct {
	// Type is the condition's type, v1beta1.Condition*.
	Type string
	// Owner is who writes it: "publisher" (this one) or "OME routing controller".
	Owner string
	// Meaning says what the condition states.
	Meaning string
}

// Conditions lists every condition type of a TrafficMap, the publisher's first.
func Conditions() []Condition {
	const publisher, routing = "publisher", "OME routing controller"
	return []Condition{
		{v1beta1.ConditionPublished, publisher, "True (reason Published) once every enabled sink carries the map's " +
			"current weights and their consumers confirmed them (the Gateway accepted the route, the xDS clients " +
			"ACKed), at the map's generation. False with one of the reasons below otherwise."},
		{v1beta1.ConditionPublicationFallback, publisher, "True while the sinks serve a retained plan (the last " +
			"positive weights, or weights from the last valid drains, taints or tolerations) instead of the one the " +
			"current inputs make; False once the current plan is in place on every sink; Unknown, with the Published " +
			"condition's reason, when the current plan is not applied and the sinks keep what they had."},
		{v1beta1.ConditionRoutable, routing, "True when some entry has a positive weight; when False its reason " +
			"says why nothing is routable. Read by the publisher, never written."},
		{v1beta1.ConditionOverrideActive, routing, "True when at least one ome.io/traffic-drain override forced an " +
			"entry's weight to zero. Read by the publisher, never written."},
		{v1beta1.ConditionCapacityFallback, routing, "True when endpoint-reported capacity was wanted but " +
			"unavailable, so control-plane capacity was used. Read by the publisher, never written."},
	}
}

// EventReasons lists the reasons of the Events the publisher records that are not
// reasons of the Published condition, in the order they are declared.
func EventReasons() []Reason {
	return []Reason{ReasonRampStarted, ReasonRampFinished, ReasonTeardownTimedOut, ReasonFinalized, ReasonClaimJournalIgnored}
}

// Description says what a condition or Event with reason r means; "" for a string that is
// none of Reasons or EventReasons.
func (r Reason) Description() string { return reasonDescriptions[r] }

var reasonDescriptions = map[Reason]string{
	ReasonPublished: "Every enabled sink carries the map's current weights and their consumers confirmed " +
		"them. The only reason of Published True.",
	ReasonPublishing: "A change is on its way: some sink or consumer has not confirmed it yet, or the Gateway " +
		"has not decided on the route.",
	ReasonInvalidTrafficMap: "The TrafficMap itself is invalid; nothing of it is published.",
	ReasonInvalidDrainAnnotation: "The ome.io/traffic-drain annotation is malformed; the last valid drain set " +
		"is kept when one is recorded (PublicationFallback LastValidDrainsRetained).",
	ReasonInvalidTaints: "A taint source of an entry's cluster is malformed; that cluster's last valid taints " +
		"are used when recorded (PublicationFallback LastValidTaintsRetained).",
	ReasonInvalidTolerations: "The tolerations annotation is malformed; the last valid tolerations are used " +
		"when recorded (PublicationFallback LastValidTolerationsRetained).",
	ReasonInvalidRamp: "The ramp annotation is malformed; nothing is published.",
	ReasonRamping:     "A ramp (--ramp of drain, undrain, taint or untaint) shapes the weights; Published turns True only once the ramp ended.",
	ReasonSourceNotFound: "The InferenceService that spec.service names does not exist, or is not the one " +
		"status.sourceUID names.",
	ReasonHostnameConflict: "One of the map's hostnames is held by another TrafficMap's claim; the sink " +
		"refuses the map's plan.",
	ReasonHostnameNotEntitled: "The map's namespace may not claim its hostname (--hostname-entitlement).",
	ReasonRouteConflict: "HTTPRoute sink: an object the publisher does not manage holds the route's name or " +
		"a backend Service's name.",
	ReasonRouteRefused: "HTTPRoute sink: the plan cannot be written as a route, for example too many entries.",
	ReasonRouteNotAccepted: "HTTPRoute sink: the parent Gateway did not accept the route " +
		"(--require-route-accepted).",
	ReasonBackendUnresolved: "HTTPRoute sink, backend kind endpointslice: an entry's endpoint hostname has never " +
		"resolved, so its EndpointSlice would have no address; the route stays as it was until the hostname resolves.",
	ReasonBackendAPIMissing: "HTTPRoute sink, backend kind envoy-gateway-backend: the API server does not serve " +
		"Envoy Gateway's Backend API (install its CRDs and enable extensionApis.enableBackend); the route stays as it was.",
	ReasonLastPositiveRetained: "HTTPRoute sink: every effective weight is 0 and --no-positive-policy " +
		"RetainLastPositive keeps the last positive weights on the route.",
	ReasonXDSRejected: "xDS sink: an xDS client NACKed a version carrying the map's resources.",
	ReasonXDSInvalid:  "xDS sink: the map's resources failed validation; its last good ones stay served.",
	ReasonPublisherChanged: "The map's claim journal names another publisher that holds it; this publisher " +
		"writes nothing for it unless run with --take-over-from that name. Also the reason of the Warning " +
		"Event recorded when the holder changes.",
	ReasonFinalizing: "The map is being deleted; the finalizer ome.io/trafficmap-publisher holds it while " +
		"every weight goes to 0, then the route, Services and xDS resources are removed.",
	ReasonRetiringDisabledSink: "A route the HTTPRoute sink wrote before it was turned off (--sinks without " +
		"httproute) is still stored: it is set to the map's weights and, once the gateway accepted it, removed " +
		"with its Services; the message names the route.",
	ReasonRampStarted:  "Normal Event: a ramp took its first step.",
	ReasonRampFinished: "Normal Event: a ramp ended: the weights are the final ones.",
	ReasonTeardownTimedOut: "Warning Event: a step of a deleted map's ordered teardown ran out of " +
		"--teardown-timeout (a wait for the sinks' confirmation, or tries that kept failing); the teardown goes on.",
	ReasonFinalized: "Normal Event: the teardown ended and the publisher removed its finalizer.",
	ReasonClaimJournalIgnored: "Warning Event: entries of the map's claim journal (status.publisher.claimedTargets) " +
		"do not count: the publisher's claim record does not grant them to the map, the claim policy refuses them, " +
		"or the journal names an unknown publisher. They grant no name; the message names each entry and the rule.",
}

// Description says what a PublicationFallback condition with reason r means; "" for a
// string that is none of FallbackReasons.
func (r FallbackReason) Description() string { return fallbackDescriptions[r] }

var fallbackDescriptions = map[FallbackReason]string{
	FallbackLastPositiveRetained: "True: every effective weight is 0 and --no-positive-policy " +
		"RetainLastPositive keeps the last positive weights on the route.",
	FallbackLastValidDrains: "True: the drain annotation is malformed; the weights are computed with the " +
		"last valid drain set recorded.",
	FallbackLastValidTaints: "True: a taint source of an entry's cluster is malformed; that cluster's last " +
		"valid taints recorded are used.",
	FallbackLastValidTolerations: "True: the tolerations annotation is malformed; the last valid tolerations " +
		"recorded are used.",
	FallbackCurrentPlanApplied: "False: the current plan, made from the current inputs, is in place on every " +
		"enabled sink.",
	FallbackApplyCurrent: "False: the current plan is in place on every enabled sink and every effective " +
		"weight in it is 0; no positive weights are retained.",
}
