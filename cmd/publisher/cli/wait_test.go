package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/report"
)

// --wait's decision, from typed data only: the condition written after the flip, the drain
// in effect, and the route's weights equal to the computed ones.
func TestWaitPublishedDecision(t *testing.T) {
	flipped := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	plan := &drain.Plan{Request: drain.Request{Action: drain.ActionDrain, ID: "maintenance-a", Cluster: "worker-a"}, Cluster: "worker-a"}
	flip := drain.Flip{Map: &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "50"}},
		Condition: metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(flipped)}}
	done := func() (*v1beta1.TrafficMap, report.Status) {
		tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Generation: 2, ResourceVersion: "52"},
			Status: v1beta1.TrafficMapStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue,
				Reason: "Published", Message: "weights worker-a=0 (drained by maintenance-a), worker-b=1", ObservedGeneration: 2,
				LastTransitionTime: metav1.NewTime(flipped.Add(time.Second))}}}}
		st := report.Status{Generation: 2,
			Drains:    report.DrainState{State: report.AnnotationValid, InEffect: []report.Drain{{ID: "maintenance-a", Cluster: "worker-a"}}},
			Published: report.Published{Status: "True", ObservedGeneration: 2, Freshness: report.Current},
			Sinks:     report.Sinks{HTTPRoute: report.RouteSink{Found: true, Owned: true, MatchesComputed: true}}}
		return tm, st
	}
	tm, st := done()
	msg, ok := published(tm, st, plan, flip)
	assert.True(t, ok, msg)
	tm.Status.Conditions[0].LastTransitionTime = metav1.NewTime(flipped.Add(-2 * time.Second))
	_, ok = published(tm, st, plan, flip)
	assert.True(t, ok, "a publisher clock behind this machine's does not hold the wait")
	assert.Equal(t, "weights worker-a=0 (drained by maintenance-a), worker-b=1", msg)

	for _, tc := range []struct {
		name   string
		change func(*v1beta1.TrafficMap, *report.Status)
		want   string
	}{
		{"drain not in effect", func(_ *v1beta1.TrafficMap, s *report.Status) { s.Drains.InEffect = nil },
			"the drain set in effect does not match the drain of maintenance-a"},
		{"still the flip", func(tm *v1beta1.TrafficMap, _ *report.Status) { tm.ResourceVersion = "50" },
			"the publisher has not written the status since the change"},
		{"older generation", func(tm *v1beta1.TrafficMap, _ *report.Status) { tm.Generation = 3 },
			"published at generation 2, the trafficmap is at generation 3"},
		{"route differs", func(_ *v1beta1.TrafficMap, s *report.Status) { s.Sinks.HTTPRoute.MatchesComputed = false },
			"not published: route  holds , the inputs give "},
		{"not true", func(tm *v1beta1.TrafficMap, _ *report.Status) {
			tm.Status.Conditions[0].Status, tm.Status.Conditions[0].Reason, tm.Status.Conditions[0].Message = metav1.ConditionFalse, "Publishing", "1/2 ACKed"
		}, "published is False (Publishing): 1/2 ACKed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, st := done()
			tc.change(tm, &st)
			msg, ok := published(tm, st, plan, flip)
			assert.False(t, ok)
			assert.Equal(t, tc.want, msg)
		})
	}
}
