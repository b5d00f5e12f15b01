package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The PublicationFallback condition (OME's contract, v1beta1.ConditionPublicationFallback):
// True while what the sinks serve for a map is a retained plan rather than the one its
// current inputs make; False once the current plan is in place on every sink; Unknown,
// with the Published condition's reason, when the current plan is not applied (it cannot
// be made, or a sink refused or rejected it) and the sinks keep what they published before,
// which may be a retained plan. It is decided from typed facts only (the sinks'
// confirmations and Computed.Retained), in the same status write as Published.

// FallbackReason is a reason of the PublicationFallback condition when it is True or
// False; an Unknown condition carries the Published condition's Reason of the failure.
// Reasons are part of the publisher's interface (docs/concepts/fallback.md documents each one).
type FallbackReason string

// Reasons of the PublicationFallback condition. LastPositiveRetained, CurrentPlanApplied
// and ApplyCurrent are OME's strings, with OME's meaning.
const (
	// FallbackLastPositiveRetained (True): every effective weight is 0 and
	// --no-positive-policy RetainLastPositive keeps the last positive weights on the route
	// (the HTTPRoute sink's confirmation says ReasonLastPositiveRetained).
	FallbackLastPositiveRetained FallbackReason = "LastPositiveRetained"
	// FallbackLastValidDrains (True): the drain annotation is malformed and the weights are
	// computed with the last valid drain set recorded (Computed.DrainErr).
	FallbackLastValidDrains FallbackReason = "LastValidDrainsRetained"
	// FallbackLastValidTaints (True): a taint source of an entry cluster is malformed and
	// that cluster's last valid taints recorded are used (Computed.TaintErr).
	FallbackLastValidTaints FallbackReason = "LastValidTaintsRetained"
	// FallbackLastValidTolerations (True): the tolerations annotation is malformed and the
	// last valid tolerations recorded are used (Computed.TolerationErr).
	FallbackLastValidTolerations FallbackReason = "LastValidTolerationsRetained"
	// FallbackCurrentPlanApplied (False): the current plan, made from the current inputs,
	// is in place on every enabled sink.
	FallbackCurrentPlanApplied FallbackReason = "CurrentPlanApplied"
	// FallbackApplyCurrent (False): the current plan is in place on every enabled sink and
	// every effective weight in it is 0: no positive weights are retained.
	FallbackApplyCurrent FallbackReason = "ApplyCurrent"
)

// FallbackReasons lists every True and False reason of the PublicationFallback condition,
// the True ones first (RetainedReasons), in the order above.
func FallbackReasons() []FallbackReason {
	return append(RetainedReasons(), FallbackCurrentPlanApplied, FallbackApplyCurrent)
}

// RetainedReasons lists the reasons of a True PublicationFallback condition, in the order
// in which the condition picks one when several apply.
func RetainedReasons() []FallbackReason {
	return []FallbackReason{FallbackLastPositiveRetained, FallbackLastValidDrains, FallbackLastValidTaints, FallbackLastValidTolerations}
}

// Retained reports whether r is the reason of a True condition (a retained plan served).
func (r FallbackReason) Retained() bool { return slices.Contains(RetainedReasons(), r) }

// Retained names the inputs Result was computed from recorded fallbacks for, as the
// PublicationFallback reasons that say so, in the order drains, taints, tolerations; nil
// when every input was taken as it is.
func (c Computed) Retained() []FallbackReason {
	var out []FallbackReason
	if c.DrainErr != nil {
		out = append(out, FallbackLastValidDrains)
	}
	if c.TaintErr != nil {
		out = append(out, FallbackLastValidTaints)
	}
	if c.TolerationErr != nil {
		out = append(out, FallbackLastValidTolerations)
	}
	return out
}

// FindFallback is tm's PublicationFallback condition, nil when it has none.
func FindFallback(tm *v1beta1.TrafficMap) *metav1.Condition {
	return meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublicationFallback)
}

// InFallback is the reason of tm's PublicationFallback condition when it is True with a
// reason of RetainedReasons, "" otherwise (a reason this publisher does not write is not
// counted: the metric's label stays bounded).
func InFallback(tm *v1beta1.TrafficMap) FallbackReason {
	c := FindFallback(tm)
	if c == nil || c.Status != metav1.ConditionTrue || !FallbackReason(c.Reason).Retained() {
		return ""
	}
	return FallbackReason(c.Reason)
}

// SameCondition reports whether the stored condition prev already says what want says, by
// its typed fields: status, reason and observedGeneration; a nil prev is never the same.
// The message is not compared: it is written along with any other change of the status.
func SameCondition(prev *metav1.Condition, want metav1.Condition) bool {
	return prev != nil && prev.Status == want.Status && prev.Reason == want.Reason && prev.ObservedGeneration == want.ObservedGeneration
}

// Fallback is the PublicationFallback condition for a plan given every enabled sink's
// confirmation, in sink order (the confirmations Decide judges); nil keeps the map's
// condition as it is. In order:
//   - True when a sink keeps the last positive weights (LastPositiveRetained) or an input
//     fell back to its recorded value (Computed.Retained), the first of RetainedReasons
//     that applies naming it, the message naming the objects and fields of every one;
//   - Unknown with the reason of a journaled hostname conflict, or of the first sink that
//     refused or rejected the plan: the sinks keep what they published before;
//   - nil while a sink is still confirming the plan (Pending): until it is in place,
//     consumers may still see what the condition says (a retained plan stays True);
//   - False once every sink has the plan in place: ApplyCurrent when every effective
//     weight is 0, CurrentPlanApplied otherwise.
//
// Unchanged inputs and confirmations give the same condition: it never flaps.
func Fallback(tm *v1beta1.TrafficMap, pl *Planned, confs []Confirmation) *metav1.Condition {
	retained := pl.Computed.Retained()
	var parts []string
	if i := slices.IndexFunc(confs, func(c Confirmation) bool { return c.Reason == ReasonLastPositiveRetained }); i >= 0 {
		retained = append([]FallbackReason{FallbackLastPositiveRetained}, retained...)
		parts = append(parts, confs[i].Message)
	}
	if len(retained) > 0 {
		if pl.InputErr != nil {
			parts = append(parts, pl.InputErr.Error())
		}
		c := newCondition(tm, v1beta1.ConditionPublicationFallback, metav1.ConditionTrue, string(retained[0]),
			fmt.Sprintf("trafficmap %s/%s is served from a retained plan, not from its current inputs: %s", tm.Namespace, tm.Name, strings.Join(parts, "; ")))
		return &c
	}
	if slices.ContainsFunc(pl.Plan.Conflicts, func(c Conflict) bool { return !c.Unjournaled }) {
		return notApplied(tm, ReasonHostnameConflict)
	}
	pending := false
	for _, c := range confs {
		switch c.State {
		case InPlace:
		case Pending:
			pending = true
		default:
			return notApplied(tm, Reason(cmp.Or(string(c.Reason), c.State.String())))
		}
	}
	if pending {
		return nil
	}
	reason, msg := FallbackCurrentPlanApplied, "every input is taken as it is and every sink has its weights in place"
	if pl.Plan.Result.AllZero() {
		reason, msg = FallbackApplyCurrent, "every effective weight is 0 and no positive weights are retained, so no traffic is routed"
	}
	c := newCondition(tm, v1beta1.ConditionPublicationFallback, metav1.ConditionFalse, string(reason),
		fmt.Sprintf("the current plan of trafficmap %s/%s is applied: %s", tm.Namespace, tm.Name, msg))
	return &c
}

// notApplied is the Unknown PublicationFallback condition of a plan the sinks were handed
// but did not all take (a refusal, a rejection, a contested hostname).
func notApplied(tm *v1beta1.TrafficMap, reason Reason) *metav1.Condition {
	c := newCondition(tm, v1beta1.ConditionPublicationFallback, metav1.ConditionUnknown, string(reason),
		fmt.Sprintf("the current plan of trafficmap %s/%s is not applied (%s, see the Published condition): the sinks keep what they published before, which may be a retained plan",
			tm.Namespace, tm.Name, reason))
	return &c
}

// Failed is the status of a map no plan can be made for (a UserError): Published False with
// its reason and message, and PublicationFallback Unknown with the same reason (the sinks
// keep what they published before, which may be a retained plan).
func Failed(tm *v1beta1.TrafficMap, ue *UserError) Status {
	st := NotPublished(tm, ue.Reason, ue.Message, nil)
	c := newCondition(tm, v1beta1.ConditionPublicationFallback, metav1.ConditionUnknown, string(ue.Reason),
		fmt.Sprintf("no plan can be made for trafficmap %s/%s (%s, see the Published condition): the sinks keep what they published before, which may be a retained plan",
			tm.Namespace, tm.Name, ue.Reason))
	st.Fallback = &c
	return st
}
