package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// A map another publisher holds (its journal names it, with claims or a last positive plan)
// gets nothing external from the leader: no sink is applied and the journal stays the
// holder's. Its xDS is served as the holder's journal has it. The condition is written only
// while the holder is silent; otherwise a Warning Event marks the holder change, once.
func TestReconcileHeldMap(t *testing.T) {
	holderJournal := func() *v1beta1.TrafficMapPublisherStatus {
		return &v1beta1.TrafficMapPublisherStatus{PublisherName: "other",
			ClaimedTargets: []string{"grpc:chat.prod", "hostname:chat.example.com"},
			LastPositive: &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: 2, ObservedISVCGeneration: 1,
				PlanCompatibilityDigest: model.OptionsDigest(nil), Targets: []v1beta1.TrafficMapPublisherTarget{{Target: "worker-a", Weight: 1}}}}
	}
	setup := func(t *testing.T, conds []metav1.Condition) (*fixture, *fakeSink, *servingSink) {
		t.Helper()
		route := &fakeSink{name: "httproute", conf: model.Confirmation{State: model.InPlace, Message: "route stored"}}
		xds := &servingSink{fakeSink: &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace}}}
		f := newFixture(t, route)
		f.rec.sinks = []model.Sink{route, xds}
		f.rec.holders = newHolderLog()
		f.rec.known = []string{"other"} // --known-publishers other
		f.api.tm.Status.Publisher = holderJournal()
		f.api.tm.Status.Conditions = conds
		f.inputs.tm = f.api.tm.DeepCopy()
		return f, route, xds
	}

	t.Run("silent holder: PublisherChanged", func(t *testing.T) {
		f, route, xds := setup(t, nil)
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Empty(t, route.given, "no sink is applied")
		assert.Empty(t, xds.given)
		require.Len(t, xds.served["prod/chat"], 1, "xds is served as a replica that does not lead serves it")
		assert.Equal(t, []string{"chat.example.com"}, xds.served["prod/chat"][0].Hostnames, "with the holder's journal")
		assert.Empty(t, xds.served["prod/chat"][0].Conflicts)
		c := f.published()
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(model.ReasonPublisherChanged), c.Reason)
		assert.Contains(t, c.Message, `held by publisher "other"`)
		assert.Contains(t, c.Message, "--take-over-from other")
		assert.Equal(t, holderJournal(), f.api.tm.Status.Publisher, "the holder's journal is not touched")
		assert.Equal(t, 1, f.api.heldApplies, "written under the held field manager, which owns none of the holder's fields")
		assert.Contains(t, f.event(), "Warning PublisherChanged")

		applies := f.api.applies
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, applies, f.api.applies, "written once")
		assert.Empty(t, f.event(), "reported once")
	})

	// D2: a journal naming a publisher that is not known (a tenant's forgery) makes the
	// map held, but its names count for no one: xds serves none of them.
	t.Run("unknown holder: its journal counts for nothing", func(t *testing.T) {
		f, route, xds := setup(t, nil)
		f.rec.known = nil
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Empty(t, route.given, "no sink is applied")
		require.Len(t, xds.served["prod/chat"], 1)
		assert.Empty(t, xds.served["prod/chat"][0].Hostnames, "none of the forged journal's names is served")
		assert.True(t, xds.served["prod/chat"][0].Withheld("chat.prod"))
		c := f.published()
		require.NotNil(t, c)
		assert.Equal(t, string(model.ReasonPublisherChanged), c.Reason)
		assert.Contains(t, c.Message, `status.publisher.publisherName "other" is not a known publisher`)
	})

	t.Run("holder wrote the condition: left alone", func(t *testing.T) {
		mine := metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: "Published",
			Message: "published by other", ObservedGeneration: 3}
		f, route, _ := setup(t, []metav1.Condition{mine})
		for range 2 {
			_, err := f.run(t)
			require.NoError(t, err)
		}
		assert.Empty(t, route.given)
		assert.Zero(t, f.api.applies, "nothing is written")
		assert.Equal(t, "published by other", f.published().Message)
		assert.Contains(t, f.event(), "Warning PublisherChanged")
		assert.Empty(t, f.event(), "one Event per holder change")

		// A new generation the holder has not written yet: the holder is silent.
		f.api.tm.Generation = 4
		f.inputs.tm = f.api.tm.DeepCopy()
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, string(model.ReasonPublisherChanged), f.published().Reason)
		assert.Equal(t, int64(4), f.published().ObservedGeneration)
	})

	t.Run("--take-over-from hands the map over", func(t *testing.T) {
		f, route, _ := setup(t, nil)
		f.rec.takeOverFrom = "other"
		f.api.tm.Spec.ObservedISVCGeneration = 1 // a last positive plan records it
		f.inputs.tm = f.api.tm.DeepCopy()
		_, err := f.run(t)
		require.NoError(t, err)
		require.NotEmpty(t, route.given, "the pipeline runs")
		j := f.api.tm.Status.Publisher
		require.NotNil(t, j)
		assert.Equal(t, testPublisher, j.PublisherName)
		assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, j.ClaimedTargets)
		require.NotNil(t, j.LastPositive, "the new holder's own last positive plan")
		assert.Equal(t, int64(3), j.LastPositive.TrafficMapGeneration, "the other's is dropped")
		assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	})

	t.Run("another publisher's empty journal is adopted", func(t *testing.T) {
		f, route, _ := setup(t, nil)
		f.api.tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: "other"}
		f.inputs.tm = f.api.tm.DeepCopy()
		_, err := f.run(t)
		require.NoError(t, err)
		require.NotEmpty(t, route.given)
		assert.Equal(t, testPublisher, f.api.tm.Status.Publisher.PublisherName)
		assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	})
}
