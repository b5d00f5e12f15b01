package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

// The decide step of the pipeline: the Published condition from the sinks' typed
// confirmations. Everything here is pure.

// maxMessage bounds condition messages (the API allows 32768 bytes).
const maxMessage = 4096

// Status is the part of TrafficMap status the publisher owns, as the pipeline decided it.
// status.published and the Published condition always move together. The status writer
// compares its typed fields, never the condition's message, to decide whether a write
// would change anything.
type Status struct {
	Published  bool
	Observed   int64
	GatewayRef *v1beta1.TrafficMapGatewayRef
	Condition  metav1.Condition // LastTransitionTime is set by the status writer
	// Progress marks a Pending answer: its news is only why the map is not published yet
	// (a sink still working, a consumer count), so the status writer rewrites such a
	// status at most once per progress interval while the condition stays False for the
	// same reason.
	Progress bool
	// Content, on a True status, is the Plan.Digest of what the condition says is
	// published. A True condition at the same generation that the writer knows to be about
	// the same Content is kept as it is: the consumer counts in a True message are those
	// of the moment it turned True, so clients that come and go (or reconnect after a
	// restart) cost no status write per map.
	Content string
	// Confirmed is set by the pipeline when the map's condition is True at its generation
	// and every Durable sink (or the publisher's record) carries the plan: the True
	// condition is already about Content (model.Standing.Confirmed).
	Confirmed bool
	// Journal is the claim journal to write (status.publisher); nil keeps the map's as it
	// is.
	Journal *v1beta1.TrafficMapPublisherStatus
	// Held marks the status of a map another publisher holds (HeldStatus): the write
	// carries only the condition and status.published, none of the holder's fields.
	Held bool
	// Fallback is the PublicationFallback condition to write in the same status write
	// (model.Fallback; LastTransitionTime is set by the status writer); nil keeps the map's
	// as it is. The status writer compares it typed (SameCondition), never by its message.
	Fallback *metav1.Condition
}

func condition(tm *v1beta1.TrafficMap, status metav1.ConditionStatus, reason Reason, message string) metav1.Condition {
	return newCondition(tm, v1beta1.ConditionPublished, status, string(reason), message)
}

// newCondition is a condition of type typ at tm's generation, its message bounded.
func newCondition(tm *v1beta1.TrafficMap, typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: tm.Generation}
}

// NotPublished is Published False with reason and message, keeping the last success's
// observedTrafficMapGeneration and, unless ref is set, its gatewayRef. It keeps the map's
// PublicationFallback condition as it is (Fallback nil): announcing a change moves no sink.
func NotPublished(tm *v1beta1.TrafficMap, reason Reason, message string, ref *v1beta1.TrafficMapGatewayRef) Status {
	if ref == nil {
		ref = tm.Status.GatewayRef
	}
	return Status{Observed: tm.Status.ObservedTrafficMapGeneration, GatewayRef: ref,
		Condition: condition(tm, metav1.ConditionFalse, reason, message)}
}

// Decide is the status for a plan given every enabled sink's confirmation, in sink order:
// Published True only when every sink is InPlace, no input fell back and no ramp is under
// way; otherwise the first sink that is not in place says why. While a ramp shapes the
// weights, Published is False with reason Ramping and the ramp's progress, whether its
// current step is in place or still publishing (an operator waiting for PUBLISHED never
// starts maintenance mid-ramp); a sink that refuses or rejects the step says why instead.
// The PublicationFallback condition goes with it (Fallback).
func Decide(tm *v1beta1.TrafficMap, pl *Planned, confs []Confirmation) Status {
	st := decidePublished(tm, pl, confs)
	st.Fallback = Fallback(tm, pl, confs)
	return st
}

// decidePublished is Decide's Published condition.
func decidePublished(tm *v1beta1.TrafficMap, pl *Planned, confs []Confirmation) Status {
	var ref *v1beta1.TrafficMapGatewayRef
	for _, c := range confs {
		if c.GatewayRef != nil {
			ref = c.GatewayRef
		}
	}
	// A name not journaled yet is no conflict: the pipeline journals it before the sinks
	// apply (a plan refused before that step is described by the refusal).
	if conflicts := slices.DeleteFunc(slices.Clone(pl.Plan.Conflicts), func(c Conflict) bool { return c.Unjournaled }); len(conflicts) > 0 {
		parts := []string{describeConflicts(conflicts)}
		for _, c := range confs {
			parts = append(parts, c.Message)
		}
		parts = append(parts, "weights "+DescribeWeights(pl.Plan.Result))
		if pl.InputErr != nil {
			parts = append(parts, pl.InputErr.Error())
		}
		return NotPublished(tm, ReasonHostnameConflict, strings.Join(parts, "; "), ref)
	}
	for _, c := range confs {
		switch c.State {
		case InPlace:
			continue
		case Pending:
			reason, msg := ReasonPublishing, c.Message
			if c.Reason != "" { // a sink's refinement, such as ReasonRetiringDisabledSink
				reason = c.Reason
			}
			if ramps := pl.Computed.Progress; len(ramps) > 0 {
				reason, msg = ReasonRamping, describeRamps(ramps, false)+"; "+c.Message
			} else if Ramping(tm) {
				// The last step: the ramp is over once these weights are in place.
				reason, msg = ReasonRamping, "no ramp shapes the weights any more, publishing where it ends; "+c.Message
			}
			st := NotPublished(tm, reason, msg, ref)
			st.Progress = true
			return st
		default:
			msg := c.Message + "; weights " + DescribeWeights(pl.Plan.Result)
			if pl.InputErr != nil {
				msg += "; " + pl.InputErr.Error()
			}
			return NotPublished(tm, c.Reason, msg, ref)
		}
	}

	parts := make([]string, 0, len(confs)+3)
	for _, c := range confs {
		if c.Message != "" { // a sink with nothing to say (nothing left to retire)
			parts = append(parts, c.Message)
		}
	}
	res := pl.Plan.Result
	parts = append(parts, "weights "+DescribeWeights(res))
	if res.AllZero() {
		parts = append(parts, "every effective weight is 0, so no traffic is routed (--no-positive-policy ApplyCurrent)")
	}
	if len(res.Pending) > 0 {
		parts = append(parts, "pending drains (no such entry): "+describeDrains(res.Pending))
	}
	msg := strings.Join(parts, "; ")
	if pl.InputErr != nil {
		return NotPublished(tm, pl.InputReason, msg+"; but "+pl.InputErr.Error(), ref)
	}
	if ramps := pl.Computed.Progress; len(ramps) > 0 {
		return NotPublished(tm, ReasonRamping, describeRamps(ramps, true)+"; "+msg, ref)
	}
	return Status{Published: true, Observed: tm.Generation, GatewayRef: ref, Content: pl.Plan.Digest(),
		Condition: condition(tm, metav1.ConditionTrue, ReasonPublished, msg)}
}

// describeConflicts names each contested name and its owner, e.g. `hostname
// chat.example.com is held by trafficmap prod/chat (hostname chat.example.com, created
// 2026-12-03T10:00:00Z), which takes precedence: no sink serves it for this map until the
// owner is deleted or gives it up`.
func describeConflicts(conflicts []Conflict) string {
	parts := make([]string, 0, len(conflicts))
	for _, c := range conflicts {
		o := c.Owner
		switch {
		case c.Unjournaled:
			parts = append(parts, fmt.Sprintf("hostname %s is not in this map's claim journal yet", c.Hostname))
		case o.Created.IsZero():
			parts = append(parts, fmt.Sprintf("hostname %s is held by %s %s/%s (hostname %s, being granted)",
				c.Hostname, strings.ToLower(o.Kind), o.Namespace, o.Name, o.Hostname))
		default:
			parts = append(parts, fmt.Sprintf("hostname %s is held by %s %s/%s (hostname %s, created %s)",
				c.Hostname, strings.ToLower(o.Kind), o.Namespace, o.Name, o.Hostname, o.Created.UTC().Format(time.RFC3339)))
		}
	}
	return strings.Join(parts, ", ") + ", which takes precedence: no sink serves it for this map until the owner is deleted or gives it up"
}

// NeedsAnnounce reports whether Published must say "not yet" before a plan that some sink
// does not carry is applied, so PUBLISHED is never stale: when the condition is for an older
// generation, or says True for content that is not what every sink carries. A map with no
// Published condition yet has an empty column, which is not stale: it gets no write.
func NeedsAnnounce(tm *v1beta1.TrafficMap, carried bool) bool {
	c := FindPublished(tm)
	if c == nil {
		return false
	}
	if c.ObservedGeneration != tm.Generation {
		return true
	}
	return c.Status == metav1.ConditionTrue && !carried
}

// PublishedTrue reports whether the map's Published condition is True at its current
// generation.
func PublishedTrue(tm *v1beta1.TrafficMap) bool {
	c := FindPublished(tm)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == tm.Generation
}

// FindPublished is tm's Published condition, nil when it has none.
func FindPublished(tm *v1beta1.TrafficMap) *metav1.Condition {
	return meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
}

// DescribeWeights renders effective weights as "worker-a=0 (drained by m-a), worker-b=1",
// with the taints holding an entry after its drains:
// "worker-a=0 (drained by m-a; taint maintenance=Planned:NoExecute)".
func DescribeWeights(res weights.Result) string {
	if len(res.Entries) == 0 {
		return "(no entries)"
	}
	parts := make([]string, 0, len(res.Entries))
	for _, e := range res.Entries {
		s := fmt.Sprintf("%s=%d", e.Cluster, e.Effective)
		if e.Drained() {
			var holds []string
			if len(e.HeldBy) > 0 {
				holds = append(holds, "drained by "+strings.Join(e.HeldBy, ","))
			}
			if len(e.Taints) > 0 {
				holds = append(holds, "taint "+DescribeTaints(e.Taints))
			}
			s += " (" + strings.Join(holds, "; ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// describeRamps renders ramps under way as "ramping worker-a down: step 3 of 10 in place,
// 70% of its weight (70 of 100); next step due 2026-12-03T10:03:00Z, 0% at
// 2026-12-03T10:10:00Z" (inPlace false: "publishing step 3 of 10, ...").
func describeRamps(ramps []weights.RampProgress, inPlace bool) string {
	parts := make([]string, 0, len(ramps))
	for _, p := range ramps {
		step := fmt.Sprintf("publishing step %d of %d", p.Step, p.Steps)
		if inPlace {
			step = fmt.Sprintf("step %d of %d in place", p.Step, p.Steps)
		}
		end := "0%"
		if p.Direction == weights.RampUp {
			end = "100%"
		}
		next := ""
		if p.Step+1 < p.Steps {
			next = "next step due " + p.Next.UTC().Format(time.RFC3339) + ", "
		}
		parts = append(parts, fmt.Sprintf("ramping %s %s: %s, %d%% of its weight (%d of %d); %s%s at %s",
			p.Cluster, p.Direction, step, p.Percent(), p.Weight, p.Full, next, end, p.End.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ")
}

// Ramping reports whether tm's Published condition is False with reason Ramping at its
// generation.
func Ramping(tm *v1beta1.TrafficMap) bool {
	c := FindPublished(tm)
	return c != nil && c.Reason == string(ReasonRamping) && c.ObservedGeneration == tm.Generation
}

func describeDrains(drains []weights.Drain) string {
	if len(drains) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(drains))
	for _, d := range drains {
		parts = append(parts, d.ID+" on "+d.Cluster)
	}
	return strings.Join(parts, ", ")
}
