package model

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

func TestFallbackReasons(t *testing.T) {
	seen := map[FallbackReason]bool{}
	for _, r := range FallbackReasons() {
		assert.False(t, seen[r], "%s listed twice", r)
		seen[r] = true
	}
	assert.Len(t, seen, 6)
	for _, r := range RetainedReasons() {
		assert.True(t, r.Retained(), r)
	}
	for _, r := range []FallbackReason{FallbackCurrentPlanApplied, FallbackApplyCurrent, "Unsupported"} {
		assert.False(t, r.Retained(), r)
	}
	assert.Equal(t, FallbackLastPositiveRetained, FallbackReason(ReasonLastPositiveRetained), "OME's string for both conditions")
}

// The PublicationFallback condition is decided from typed facts: the sinks' confirmations
// and the inputs that fell back to their recorded value (Computed.Retained).
func TestDecideFallback(t *testing.T) {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 4}}
	positive := weights.Result{Entries: []weights.EffectiveEntry{{Cluster: "worker-a", Effective: 1}, {Cluster: "worker-b", Effective: 0, HeldBy: []string{"m-b"}}}}
	zero := weights.Result{Entries: []weights.EffectiveEntry{{Cluster: "worker-a", HeldBy: []string{"m-a"}}, {Cluster: "worker-b", HeldBy: []string{"m-b"}}}}
	route := Confirmation{Sink: "httproute", State: InPlace, Message: "route prod/chat-global accepted"}
	xds := Confirmation{Sink: "xds", State: InPlace, Message: "xds version v1 ACKed by 1/1 clients"}
	waiting := Confirmation{Sink: "xds", State: Pending, Reason: ReasonPublishing, Message: "waiting for xds clients: 0/1 ACKed"}
	kept := Confirmation{Sink: "httproute", State: Refused, Reason: ReasonLastPositiveRetained,
		Message: "every effective weight is 0; --no-positive-policy RetainLastPositive keeps the last positive weights on route prod/chat-global (worker-a=1, worker-b=1)"}
	nacked := Confirmation{Sink: "xds", State: Rejected, Reason: ReasonXDSRejected, Message: "client c1 NACKed"}
	taken := Confirmation{Sink: "httproute", State: Refused, Reason: ReasonRouteConflict, Message: "httproute prod/chat-global is not the publisher's"}
	drainErr := errors.New("annotation ome.io/traffic-drain: invalid character")
	taintErr := errors.New(`inferencecluster worker-a spec.taints[0].effect "Sometimes": must be NoSchedule or NoExecute; keeping the last valid taints of cluster worker-a (none)`)
	tolErr := errors.New("annotation publisher.trafficmap.dev/tolerations: invalid character")

	tests := []struct {
		name      string
		result    weights.Result
		computed  Computed
		inputErr  string
		conflicts []Conflict
		confs     []Confirmation
		// status "" means nil: the map's condition is kept as it is.
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{name: "every sink has the current plan in place", result: positive, confs: []Confirmation{route, xds},
			status: metav1.ConditionFalse, reason: "CurrentPlanApplied", msg: []string{"trafficmap prod/chat", "is applied"}},
		{name: "every weight 0, applied as it is", result: zero, confs: []Confirmation{route, xds},
			status: metav1.ConditionFalse, reason: "ApplyCurrent", msg: []string{"every effective weight is 0"}},
		{name: "the route keeps the last positive weights", result: zero, confs: []Confirmation{kept, xds},
			status: metav1.ConditionTrue, reason: "LastPositiveRetained", msg: []string{"trafficmap prod/chat", "route prod/chat-global (worker-a=1, worker-b=1)"}},
		{name: "retained while another sink still confirms", result: zero, confs: []Confirmation{kept, waiting},
			status: metav1.ConditionTrue, reason: "LastPositiveRetained"},
		{name: "malformed drains fell back to the recorded set", result: positive, computed: Computed{DrainErr: drainErr},
			inputErr: "inferenceservice prod/chat annotation ome.io/traffic-drain: invalid character; keeping the last valid drains (m-b on worker-b)",
			confs:    []Confirmation{route, xds}, status: metav1.ConditionTrue, reason: "LastValidDrainsRetained",
			msg: []string{"inferenceservice prod/chat annotation ome.io/traffic-drain", "keeping the last valid drains (m-b on worker-b)"}},
		{name: "a recorded fallback is True while the sinks still confirm it", result: positive, computed: Computed{DrainErr: drainErr},
			inputErr: "keeping the last valid drains", confs: []Confirmation{route, waiting}, status: metav1.ConditionTrue, reason: "LastValidDrainsRetained"},
		{name: "taints and tolerations: the first names the reason, the message both", result: positive,
			computed: Computed{TaintErr: taintErr, TolerationErr: tolErr}, inputErr: taintErr.Error() + "; " + tolErr.Error(),
			confs: []Confirmation{route}, status: metav1.ConditionTrue, reason: "LastValidTaintsRetained",
			msg: []string{"spec.taints[0].effect", "publisher.trafficmap.dev/tolerations"}},
		{name: "tolerations alone", result: positive, computed: Computed{TolerationErr: tolErr}, inputErr: tolErr.Error(),
			confs: []Confirmation{route}, status: metav1.ConditionTrue, reason: "LastValidTolerationsRetained"},
		{name: "last positive and malformed drains: the retained weights first, both named", result: zero,
			computed: Computed{DrainErr: drainErr}, inputErr: "keeping the last valid drains (m-a on worker-a, m-b on worker-b)",
			confs: []Confirmation{kept}, status: metav1.ConditionTrue, reason: "LastPositiveRetained",
			msg: []string{"RetainLastPositive", "keeping the last valid drains"}},
		{name: "a sink still confirming keeps the condition", result: positive, confs: []Confirmation{route, waiting}},
		{name: "a NACK: not applied, reason of the rejection", result: positive, confs: []Confirmation{route, nacked},
			status: metav1.ConditionUnknown, reason: "XDSRejected", msg: []string{"is not applied (XDSRejected"}},
		{name: "a refusal after a pending sink: not applied", result: positive, confs: []Confirmation{waiting, taken},
			status: metav1.ConditionUnknown, reason: "RouteConflict"},
		{name: "a journaled hostname conflict: not applied", result: positive, confs: []Confirmation{xds},
			conflicts: []Conflict{{Hostname: "chat.example.com", Owner: Owner{Kind: KindTrafficMap, Namespace: "prod", Name: "old"}}},
			status:    metav1.ConditionUnknown, reason: "HostnameConflict"},
		{name: "a name being journaled is no conflict", result: positive, confs: []Confirmation{xds},
			conflicts: []Conflict{{Hostname: "chat.example.com", Unjournaled: true}}, status: metav1.ConditionFalse, reason: "CurrentPlanApplied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := &Planned{Plan: Plan{Namespace: "prod", Name: "chat", Result: tc.result, Conflicts: tc.conflicts}, Computed: tc.computed}
			if tc.inputErr != "" {
				pl.InputReason, pl.InputErr = ReasonInvalidDrainAnnotation, errors.New(tc.inputErr)
			}
			st := Decide(tm, pl, tc.confs)
			assert.Equal(t, Fallback(tm, pl, tc.confs), st.Fallback, "Decide writes it")
			if tc.status == "" {
				assert.Nil(t, st.Fallback)
				return
			}
			require.NotNil(t, st.Fallback)
			fb := *st.Fallback
			assert.Equal(t, v1beta1.ConditionPublicationFallback, fb.Type)
			assert.Equal(t, tc.status, fb.Status, fb.Message)
			assert.Equal(t, tc.reason, fb.Reason, fb.Message)
			assert.Equal(t, tm.Generation, fb.ObservedGeneration)
			for _, m := range tc.msg {
				assert.Contains(t, fb.Message, m)
			}
			if fb.Status == metav1.ConditionFalse {
				assert.True(t, st.Published, "here (no ramp) False goes with Published True")
			}
			if fb.Status == metav1.ConditionTrue {
				assert.False(t, st.Published, "a retained plan is never Published")
			}
			again := Decide(tm, pl, tc.confs)
			assert.True(t, SameCondition(&fb, *again.Fallback), "the same facts give the same condition")
		})
	}
}

// A map no plan can be made for: Published False and PublicationFallback Unknown, both with
// the failure's reason.
func TestFailed(t *testing.T) {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 2}}
	st := Failed(tm, &UserError{Reason: ReasonInvalidTrafficMap, Message: "trafficmap prod/chat is invalid"})
	assert.False(t, st.Published)
	assert.Equal(t, string(ReasonInvalidTrafficMap), st.Condition.Reason)
	require.NotNil(t, st.Fallback)
	assert.Equal(t, metav1.ConditionUnknown, st.Fallback.Status)
	assert.Equal(t, string(ReasonInvalidTrafficMap), st.Fallback.Reason)
	assert.Equal(t, int64(2), st.Fallback.ObservedGeneration)
	assert.Contains(t, st.Fallback.Message, "trafficmap prod/chat")
	assert.Nil(t, NotPublished(tm, ReasonPublishing, "publishing", nil).Fallback, "an announce keeps the condition")
}

func TestInFallbackAndSameCondition(t *testing.T) {
	withFallback := func(status metav1.ConditionStatus, reason string) *v1beta1.TrafficMap {
		tm := &v1beta1.TrafficMap{}
		tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublicationFallback, Status: status, Reason: reason, Message: "m", ObservedGeneration: 1}}
		return tm
	}
	assert.Equal(t, FallbackLastValidDrains, InFallback(withFallback(metav1.ConditionTrue, "LastValidDrainsRetained")))
	assert.Empty(t, InFallback(withFallback(metav1.ConditionFalse, "CurrentPlanApplied")))
	assert.Empty(t, InFallback(withFallback(metav1.ConditionTrue, "SomeoneElsesReason")), "bounded: not a reason this publisher writes")
	assert.Empty(t, InFallback(&v1beta1.TrafficMap{}))

	prev := FindFallback(withFallback(metav1.ConditionTrue, "LastValidDrainsRetained"))
	want := *prev
	want.Message = "another message"
	assert.True(t, SameCondition(prev, want), "the message is not compared")
	want.ObservedGeneration = 2
	assert.False(t, SameCondition(prev, want))
	assert.False(t, SameCondition(nil, *prev))
}
