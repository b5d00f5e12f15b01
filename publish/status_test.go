package publish

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The skip-write check compares typed content, never message text: a True condition is
// kept only when it is known to be about the same content (Plan.Digest), and a changed
// progress count is written.
func TestSameComparesTypedContent(t *testing.T) {
	const gen = 3
	cond := func(status metav1.ConditionStatus, reason model.Reason, msg string, g int64) metav1.Condition {
		return metav1.Condition{Type: v1beta1.ConditionPublished, Status: status, Reason: string(reason), Message: msg, ObservedGeneration: g}
	}
	journal := &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher, ClaimedTargets: []string{"grpc:chat.prod"}}
	stored := func(published bool, c metav1.Condition) *v1beta1.TrafficMap {
		tm := fleetMap()
		tm.Generation = gen
		tm.Status.Published = published
		tm.Status.ObservedTrafficMapGeneration = gen
		tm.Status.Conditions = []metav1.Condition{c}
		tm.Status.Publisher = journal.DeepCopy()
		return tm
	}
	trueMsg := "xds version v1 ACKed by 3/3 clients; weights worker-a=0 (drained by m-a), worker-b=1"
	trueNow := "xds version v2 ACKed by 1/1 clients; weights worker-a=0 (drained by m-a), worker-b=1"
	want := func(published bool, c metav1.Condition, content string) model.Status {
		return model.Status{Published: published, Observed: gen, Condition: c, Content: content, Journal: journal.DeepCopy()}
	}
	isTrue := stored(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen))
	fallback := func(status metav1.ConditionStatus, reason model.FallbackReason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1beta1.ConditionPublicationFallback, Status: status, Reason: string(reason), Message: msg, ObservedGeneration: gen}
	}
	applied := fallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied, "the current plan of trafficmap prod/chat is applied")
	isTrueApplied := stored(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen))
	isTrueApplied.Status.Conditions = append(isTrueApplied.Status.Conditions, applied)
	withFallback := func(w model.Status, c metav1.Condition) model.Status {
		w.Fallback = &c
		return w
	}

	tests := []struct {
		name  string
		tm    *v1beta1.TrafficMap
		want  model.Status
		known string
		same  bool
	}{
		{"the very same status", isTrue, want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"), "", true},
		{"True about the content the writer wrote: new counts are no news", isTrue,
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueNow, gen), "d1"), "d1", true},
		{"True about other content, even with the same weights text: written", isTrue,
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueNow, gen), "d2"), "d1", false},
		{"True with a message ending like the old one but unknown content: written", isTrue,
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, "xds version v1 ACKed by 3/3 clients; weights worker-a=0 (drained by m-a), worker-b=1 ", gen), "d2"), "", false},
		{"after a start the pipeline's proof stands in for the writer's memory", isTrue,
			func() model.Status {
				w := want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueNow, gen), "d1")
				w.Confirmed = true
				return w
			}(), "", true},
		{"no content (a truncated message) is never kept on content", isTrue,
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueNow, gen), ""), "", false},
		{"a newer generation is written", isTrue, want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen+1), "d1"), "d1", false},
		{"turning True after Publishing is written",
			stored(false, cond(metav1.ConditionFalse, model.ReasonPublishing, "publishing weights worker-a=0, worker-b=1", gen)),
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"), "d1", false},
		{"a changed claim journal (lastPositive weights) is written", isTrue,
			func() model.Status {
				w := want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1")
				w.Journal.LastPositive = &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: gen, ObservedISVCGeneration: 1}
				return w
			}(), "d1", false},
		{"another gatewayRef is written", isTrue,
			func() model.Status {
				w := want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1")
				w.GatewayRef = &v1beta1.TrafficMapGatewayRef{Kind: "HTTPRoute", Name: "chat"}
				return w
			}(), "d1", false},
		{"a changed progress count is written",
			stored(false, cond(metav1.ConditionFalse, model.ReasonPublishing, "xds version v2 ACKed by 1/3 clients", gen)),
			func() model.Status {
				w := want(false, cond(metav1.ConditionFalse, model.ReasonPublishing, "xds version v2 ACKed by 2/3 clients", gen), "")
				w.Progress = true
				return w
			}(), "", false},
		{"the same progress is not written again",
			stored(false, cond(metav1.ConditionFalse, model.ReasonPublishing, "xds version v2 ACKed by 1/3 clients", gen)),
			want(false, cond(metav1.ConditionFalse, model.ReasonPublishing, "xds version v2 ACKed by 1/3 clients", gen), ""), "", true},
		{"a False condition is never kept on content",
			stored(false, cond(metav1.ConditionFalse, model.ReasonXDSRejected, "nacked: a", gen)),
			want(false, cond(metav1.ConditionFalse, model.ReasonXDSRejected, "nacked: b", gen), "d1"), "d1", false},
	}
	tests = append(tests, []struct {
		name  string
		tm    *v1beta1.TrafficMap
		want  model.Status
		known string
		same  bool
	}{
		{"a first PublicationFallback condition is written", isTrue,
			withFallback(want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"), applied), "d1", false},
		{"the same PublicationFallback condition is not written again", isTrueApplied,
			withFallback(want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"), applied), "d1", true},
		{"a PublicationFallback condition whose message alone differs is not news", isTrueApplied,
			withFallback(want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"),
				fallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied, "another text")), "d1", true},
		{"PublicationFallback turning True is written", isTrueApplied,
			withFallback(want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"),
				fallback(metav1.ConditionTrue, model.FallbackLastValidDrains, "the current plan of trafficmap prod/chat is applied")), "d1", false},
		{"PublicationFallback with another reason is written", isTrueApplied,
			withFallback(want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"),
				fallback(metav1.ConditionFalse, model.FallbackApplyCurrent, "the current plan of trafficmap prod/chat is applied")), "d1", false},
		{"no PublicationFallback decided keeps the map's", isTrueApplied,
			want(true, cond(metav1.ConditionTrue, model.ReasonPublished, trueMsg, gen), "d1"), "d1", true},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.same, same(tc.tm, tc.want, tc.known))
		})
	}
}

// After a start (a status writer that remembers nothing), a True condition whose message
// differs only in consumer counts is kept when the pipeline proves it was confirmed for this
// content (a Durable sink carries the plan), and written when nothing proves it.
func TestReconcileKeepsTrueCountsAfterRestart(t *testing.T) {
	for _, durable := range []bool{true, false} {
		t.Run(map[bool]string{true: "durable sink carries the plan", false: "no proof"}[durable], func(t *testing.T) {
			route := inPlace("route stored")
			xds := &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace, Message: "xds version v1 ACKed by 1/1 clients",
				Progress: &model.Progress{Confirmed: 1, Total: 1}}}
			f := newFixture(t, route, xds)
			if durable {
				f.rec.sinks[0] = durableSink{route}
			}
			_, err := f.run(t)
			require.NoError(t, err)
			require.Equal(t, 1, f.api.applies)
			require.Equal(t, metav1.ConditionTrue, f.published().Status)

			// The restart: a new status writer; the clients reconnect and are counted anew.
			f.rec.status = newStatusWriter(f.api, f.events, nil)
			f.rec.status.now = func() time.Time { return f.clock }
			xds.conf.Message, xds.conf.Progress = "xds version v1 ACKed by 4/4 clients", &model.Progress{Confirmed: 4, Total: 4}
			_, err = f.run(t)
			require.NoError(t, err)
			if durable {
				assert.Equal(t, 1, f.api.applies, "the True condition is about this content: counts are no news")
				assert.Contains(t, f.published().Message, "ACKed by 1/1 clients")
			} else {
				assert.Equal(t, 2, f.api.applies, "nothing proves the condition's content: written")
				assert.Contains(t, f.published().Message, "ACKed by 4/4 clients")
			}
		})
	}
}

// A new map's first Publishing status waits freshQuiet when it is the only new map waiting,
// longer while many are new at once (each adds freshPerWaiting), never more than
// freshQuietMax; once a map has waited its quiet, it is written.
func TestFreshQuietGrowsWithNewMapsWaiting(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	w := newStatusWriter(nil, record.NewFakeRecorder(8), nil)
	w.now = func() time.Time { return now }
	publishing := model.Status{Condition: metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse, Reason: string(model.ReasonPublishing)}}
	newMap := func(i int) *v1beta1.TrafficMap {
		tm := fleetMap()
		tm.Name = fmt.Sprintf("m%03d", i)
		return tm
	}
	assert.Equal(t, freshQuiet, w.hold(newMap(0), publishing), "alone")
	assert.Equal(t, freshQuiet+freshPerWaiting, w.hold(newMap(1), publishing), "a second new map waiting")
	for i := 2; i < 200; i++ {
		w.hold(newMap(i), publishing)
	}
	assert.Equal(t, freshQuietMax, w.hold(newMap(200), publishing), "a cold start's wave: at most freshQuietMax")
	now = now.Add(freshQuietMax)
	assert.Zero(t, w.hold(newMap(0), publishing), "waited long enough: written")
}

// Events say what an operator may act on (issue 47: a cold start of 10,000 maps recorded
// 10,023 Events, one per first publication).
func TestNewsworthy(t *testing.T) {
	cond := func(reason model.Reason) *metav1.Condition {
		status := metav1.ConditionFalse
		if reason == model.ReasonPublished {
			status = metav1.ConditionTrue
		}
		return &metav1.Condition{Type: v1beta1.ConditionPublished, Status: status, Reason: string(reason)}
	}
	for _, tc := range []struct {
		name      string
		prev, now *metav1.Condition
		want      bool
	}{
		{"a first Published", nil, cond(model.ReasonPublished), false},
		{"a first Publishing", nil, cond(model.ReasonPublishing), false},
		{"a drain published", cond(model.ReasonPublishing), cond(model.ReasonPublished), false},
		{"a drain starts", cond(model.ReasonPublished), cond(model.ReasonPublishing), false},
		{"a ramp ends", cond(model.ReasonRamping), cond(model.ReasonPublished), false},
		{"a first conflict", nil, cond(model.ReasonHostnameConflict), true},
		{"a conflict", cond(model.ReasonPublished), cond(model.ReasonHostnameConflict), true},
		{"a conflict over", cond(model.ReasonHostnameConflict), cond(model.ReasonPublished), true},
		{"a refusal over, publishing", cond(model.ReasonInvalidDrainAnnotation), cond(model.ReasonPublishing), true},
		{"a ramp starts", cond(model.ReasonPublished), cond(model.ReasonRamping), true},
		{"a teardown starts", cond(model.ReasonPublished), cond(model.ReasonFinalizing), true},
		{"a sink retired", cond(model.ReasonPublished), cond(model.ReasonRetiringDisabledSink), true},
		{"the same reason again", cond(model.ReasonHostnameConflict), cond(model.ReasonHostnameConflict), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, newsworthy(tc.prev, *tc.now))
		})
	}
}
