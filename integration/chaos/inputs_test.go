package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The last input change of a map is the latest change of its own spec, its
// InferenceService or the taints of its entries' clusters within the window; other maps'
// inputs and changes outside the window do not count.
func TestInputLogLastChange(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	l := newInputLog()
	l.SpecChanged("chaos/a", s(5))
	l.SpecChanged("chaos/a", s(15))
	l.ISVCChanged("chaos/svc-a", s(12))
	l.TaintsChanged("worker-0", s(17))
	l.TaintsChanged("worker-9", s(19))
	l.SpecChanged("chaos/b", s(18))
	l.ISVCChanged("rival/svc-a", s(18))
	own := source{ISVC: "chaos/svc-a", Clusters: []string{"worker-0", "worker-1"}}
	for _, tc := range []struct {
		name     string
		src      source
		from, to int
		want     int
	}{
		{"the taint of an entry's cluster", own, 0, 20, 17},
		{"up to the end only", own, 0, 16, 15},
		{"the InferenceService", own, 0, 14, 12},
		{"the spec", own, 0, 10, 5},
		{"nothing after the start: the start", own, 17, 30, 17},
		{"another cluster, map and namespace do not count", own, 18, 30, 18},
		{"a cluster of the map's entries", source{ISVC: "chaos/svc-a", Clusters: []string{"worker-9"}}, 18, 30, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, s(tc.want), l.LastChange("chaos/a", tc.src, s(tc.from), s(tc.to)))
		})
	}
}

// The input watch records creations and deletions after the initial list, and updates that
// change one of the annotations it follows; nothing else.
func TestChangeHandler(t *testing.T) {
	obj := func(ann map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService"}}
		u.SetNamespace("chaos")
		u.SetName("svc-a")
		u.SetAnnotations(ann)
		return u
	}
	for _, tc := range []struct {
		name string
		do   func(h cache.ResourceEventHandler)
		want []string
	}{
		{"the initial list", func(h cache.ResourceEventHandler) { h.OnAdd(obj(nil), true) }, nil},
		{"created later", func(h cache.ResourceEventHandler) { h.OnAdd(obj(nil), false) }, []string{"chaos/svc-a"}},
		{"a drain", func(h cache.ResourceEventHandler) {
			h.OnUpdate(obj(nil), obj(map[string]string{annDrain: "{}"}))
		}, []string{"chaos/svc-a"}},
		{"a hostname removed", func(h cache.ResourceEventHandler) {
			h.OnUpdate(obj(map[string]string{v1beta1.AnnotationGlobalHost: "h"}), obj(nil))
		}, []string{"chaos/svc-a"}},
		{"another annotation", func(h cache.ResourceEventHandler) {
			h.OnUpdate(obj(map[string]string{annDrain: "{}"}), obj(map[string]string{annDrain: "{}", "other": "x"}))
		}, nil},
		{"a resync", func(h cache.ResourceEventHandler) {
			h.OnUpdate(obj(map[string]string{annRamp: "r"}), obj(map[string]string{annRamp: "r"}))
		}, nil},
		{"deleted", func(h cache.ResourceEventHandler) { h.OnDelete(obj(nil)) }, []string{"chaos/svc-a"}},
		{"deleted while the watch was down", func(h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "chaos/svc-a", Obj: obj(nil)})
		}, []string{"chaos/svc-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			tc.do(changeHandler(ruleAnnotations, func(key string, _ time.Time) { got = append(got, key) }))
			assert.Equal(t, tc.want, got)
		})
	}
}

// A False window records the last change of the map's inputs the checker saw in it: a
// change of its spec (generation) while False, and a taint of one of its clusters.
func TestCheckerWindowSettled(t *testing.T) {
	c := newChecker(checkerConfig{Probes: func() []*probe { return nil }})
	tm := func(gen int64, status metav1.ConditionStatus, reason string) *v1beta1.TrafficMap {
		m := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: "a", Generation: gen},
			Spec: v1beta1.TrafficMapSpec{Service: "svc-a", Entries: []v1beta1.TrafficMapEntry{{Cluster: "worker-0"}, {Cluster: "worker-1"}}}}
		m.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: status, Reason: reason, ObservedGeneration: gen}}
		return m
	}
	c.observe(tm(1, metav1.ConditionTrue, "Published"), false)
	c.observe(tm(1, metav1.ConditionFalse, "Publishing"), false)
	c.observe(tm(2, metav1.ConditionFalse, "Publishing"), false) // the spec changed while False
	c.inputs.TaintsChanged("worker-7", time.Now())               // not a cluster of the map
	c.observe(tm(2, metav1.ConditionTrue, "Published"), false)
	c.observe(tm(2, metav1.ConditionFalse, "Publishing"), false)
	c.inputs.TaintsChanged("worker-1", time.Now())
	c.observe(tm(2, metav1.ConditionTrue, "Published"), false)
	c.observe(tm(2, metav1.ConditionFalse, "Publishing"), false) // still open at the end

	ws := c.Results(time.Now()).Windows
	require.Len(t, ws, 3)
	spec := c.inputs.spec["chaos/a"]
	require.Len(t, spec, 1, "one generation change")
	assert.Equal(t, spec[0], ws[0].Settled, "the spec change")
	assert.True(t, ws[0].Start.Before(ws[0].Settled) && !ws[0].Settled.After(ws[0].End))
	assert.Equal(t, c.inputs.taints["worker-1"][0], ws[1].Settled, "the taint of its cluster")
	assert.Equal(t, ws[2].Start, ws[2].Settled, "no change since the start")
}

// A map not correct at the end names what each subscribed probe holds and since when, so
// that one that stopped taking on content stands out.
func TestProbeView(t *testing.T) {
	m := mapRef{Namespace: "chaos", Name: "a", Service: "a", Clusters: []string{"worker-0"}}
	fresh := newProbe(probeConfig{NodeID: "fresh", Maps: []mapRef{m}})
	fresh.link(eventConnected)
	fresh.answered(false, map[string]heldState{"chaos/a": {weights: "worker-0=1", present: true}})
	never := newProbe(probeConfig{NodeID: "never", Maps: []mapRef{m}})
	other := newProbe(probeConfig{NodeID: "other"})
	c := newChecker(checkerConfig{Probes: func() []*probe { return []*probe{fresh, never, other} },
		ProbeMaps: func(p *probe, key string) bool { return p.Subscribes(key) }})
	at := fresh.History("chaos/a")[1].At.Format(timeLayout)
	assert.Equal(t, `probes: fresh grpc-sotw holds "worker-0=1" (present true) since `+at+` (connected), never grpc-sotw holds "" (present false) since never (disconnected)`,
		c.probeView("chaos/a"))
}
