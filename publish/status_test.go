package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.same, same(tc.tm, tc.want, tc.known))
		})
	}
}
