package publish

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The PublicationFallback condition goes with Published in one status write: True while a
// sink keeps the last positive weights, not written again while nothing changes, kept as it
// is by the announce of a change and while a sink still confirms the plan, False once the
// current plan is in place; a map no plan can be made for says Unknown.
func TestReconcilePublicationFallback(t *testing.T) {
	route := &fakeSink{name: "httproute", conf: model.Confirmation{State: model.Refused, Reason: model.ReasonLastPositiveRetained,
		Message: "every effective weight is 0; --no-positive-policy RetainLastPositive keeps the last positive weights on route prod/chat-global (worker-a=1, worker-b=1)"}}
	f := newFixture(t, route)
	fallback := func() metav1.Condition {
		t.Helper()
		c := model.FindFallback(f.api.tm)
		require.NotNil(t, c, "PublicationFallback condition")
		return *c
	}
	run := func() {
		t.Helper()
		_, err := f.run(t)
		require.NoError(t, err)
	}

	run()
	assert.Equal(t, 1, f.api.applies, "one status write for both conditions")
	assert.Equal(t, metav1.ConditionFalse, f.published().Status)
	fb := fallback()
	assert.Equal(t, metav1.ConditionTrue, fb.Status)
	assert.Equal(t, string(model.FallbackLastPositiveRetained), fb.Reason)
	assert.Contains(t, fb.Message, "route prod/chat-global (worker-a=1, worker-b=1)")
	assert.Equal(t, int64(3), fb.ObservedGeneration)
	assert.Equal(t, metav1.NewTime(f.clock), fb.LastTransitionTime)

	f.clock = f.clock.Add(time.Minute)
	run()
	assert.Equal(t, 1, f.api.applies, "unchanged input: no write, no flap")

	// The route takes the current plan; until the gateway confirms it the gateway may still
	// serve the retained weights: the condition stays True.
	route.conf = model.Confirmation{State: model.Pending, Reason: model.ReasonPublishing, Message: "waiting for gateway prod/g to accept route prod/chat-global"}
	run()
	assert.Equal(t, string(model.ReasonPublishing), f.published().Reason)
	assert.Equal(t, fb, fallback(), "kept as it is while the sink confirms")

	route.conf = model.Confirmation{State: model.InPlace, Message: "route prod/chat-global accepted"}
	f.clock = f.clock.Add(time.Minute)
	run()
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	fb = fallback()
	assert.Equal(t, metav1.ConditionFalse, fb.Status)
	assert.Equal(t, string(model.FallbackCurrentPlanApplied), fb.Reason)
	assert.Equal(t, metav1.NewTime(f.clock), fb.LastTransitionTime)

	// A new generation: the announce (Published False before any sink moves) restates the
	// condition, and so does the sink's Pending answer.
	f.api.tm.Generation = 4
	f.inputs.tm = f.api.tm.DeepCopy()
	route.conf = model.Confirmation{State: model.Pending, Reason: model.ReasonPublishing, Message: "waiting for gateway"}
	route.carries = false
	applies := f.api.applies
	run()
	assert.Greater(t, f.api.applies, applies, "announced")
	assert.Equal(t, string(model.ReasonPublishing), f.published().Reason)
	assert.Equal(t, fb, fallback(), "an announce moves no sink: the condition stays")

	// No plan can be made: Unknown, with the failure's reason.
	f.inputs.noSource = true
	run()
	fb = fallback()
	assert.Equal(t, metav1.ConditionUnknown, fb.Status)
	assert.Equal(t, string(model.ReasonSourceNotFound), fb.Reason)
	assert.Equal(t, int64(4), fb.ObservedGeneration)
}

// trafficmap_publisher_maps_in_fallback counts the cached maps whose PublicationFallback
// condition is True, by reason: every reason is exported (0 when none), a reason the
// publisher does not write and a map being deleted are not counted, and a map leaves the
// count when its condition turns False or the map is gone.
func TestMapsInFallbackGauge(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1beta1.TrafficMap{}, 0, cache.Indexers{})
	reg := prometheus.NewRegistry()
	watchGauges(reg, func() bool { return true }, func() int { return 7 }, func() (int, time.Duration) { return 0, 0 }, func() int { return 0 },
		func() map[model.FallbackReason]int { return countFallbacks([]cache.SharedIndexInformer{inf}) })
	tm := func(name string, status metav1.ConditionStatus, reason string) *v1beta1.TrafficMap {
		m := fleetMap()
		m.Name = name
		m.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublicationFallback, Status: status, Reason: reason}}
		return m
	}
	expect := func(lastPositive, drains, taints, tolerations int) string {
		return `# HELP trafficmap_publisher_maps_in_fallback TrafficMaps whose PublicationFallback condition is True (served from a retained plan: the last positive weights, or the last valid drains, taints or tolerations recorded), by reason, as this replica's cache has them.
# TYPE trafficmap_publisher_maps_in_fallback gauge
trafficmap_publisher_maps_in_fallback{reason="LastPositiveRetained"} ` + strconv.Itoa(lastPositive) + `
trafficmap_publisher_maps_in_fallback{reason="LastValidDrainsRetained"} ` + strconv.Itoa(drains) + `
trafficmap_publisher_maps_in_fallback{reason="LastValidTaintsRetained"} ` + strconv.Itoa(taints) + `
trafficmap_publisher_maps_in_fallback{reason="LastValidTolerationsRetained"} ` + strconv.Itoa(tolerations) + `
`
	}
	check := func(want string) {
		t.Helper()
		assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "trafficmap_publisher_maps_in_fallback"))
	}
	check(expect(0, 0, 0, 0))

	store := inf.GetStore()
	drains := tm("a", metav1.ConditionTrue, string(model.FallbackLastValidDrains))
	deleting := tm("d", metav1.ConditionTrue, string(model.FallbackLastValidDrains))
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, m := range []*v1beta1.TrafficMap{drains, deleting,
		tm("b", metav1.ConditionTrue, string(model.FallbackLastPositiveRetained)),
		tm("c", metav1.ConditionTrue, string(model.FallbackLastValidDrains)),
		tm("e", metav1.ConditionFalse, string(model.FallbackCurrentPlanApplied)),
		tm("f", metav1.ConditionUnknown, string(model.ReasonInvalidTrafficMap)),
		tm("g", metav1.ConditionTrue, "SomeoneElsesReason"),
	} {
		require.NoError(t, store.Add(m))
	}
	check(expect(1, 2, 0, 0))

	require.NoError(t, store.Update(tm("a", metav1.ConditionFalse, string(model.FallbackCurrentPlanApplied))))
	check(expect(1, 1, 0, 0))
	require.NoError(t, store.Delete(tm("b", metav1.ConditionTrue, string(model.FallbackLastPositiveRetained))))
	check(expect(0, 1, 0, 0))
}
