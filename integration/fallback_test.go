package integration

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// With --sinks xds alone there is no route to record the last valid drains on: the publisher
// keeps them in a ConfigMap of its own, so after a restart a malformed drain annotation keeps
// the map on xDS with the last valid drains (Published says InvalidDrainAnnotation) instead
// of dropping it. The record goes with the map.
func TestXDSOnlyFallbackSurvivesRestart(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 1},
	})
	xdsOnly := func(c *publish.Config) { c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0" }
	pub := f.startPublisher(xdsOnly)
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")

	cms := kube.CoreV1().ConfigMaps(f.ns)
	rec, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err, "the record is written before the status says Published")
	assert.Equal(t, httproute.OwnerLabels(httproute.Source{Namespace: f.ns, Name: service, Service: service}), rec.Labels)
	assert.JSONEq(t, seedDrain, rec.Data[model.RecordKeyDrains])
	require.NotEmpty(t, rec.ManagedFields)
	assert.Equal(t, publish.DefaultFieldManager, rec.ManagedFields[0].Manager)
	assert.Equal(t, metav1.ManagedFieldsOperationApply, rec.ManagedFields[0].Operation)
	require.Len(t, rec.OwnerReferences, 1)
	assert.Equal(t, f.getMap().UID, rec.OwnerReferences[0].UID, "garbage collected with the map")
	assert.Equal(t, 1, len(rec.ManagedFields), "one writer")

	pub.stop(t)
	f.drain(`{"x":{}}`)
	restarted := f.startPublisher(xdsOnly)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), "keeping the last valid drains (maintenance-a on worker-a)")
	client := xdsClient(t, restarted.xdsAddr, "grpc-client-1", service+"."+f.ns)
	assert.Equal(t, map[string]int{"worker-b": 20}, spread(t, client, 20), "the map stays on xDS with the last valid drains")
	st := admin(t).run(t, "status", service, "-n", f.ns)
	assert.Contains(t, st.stdout, "worker-a   1        0           maintenance-a", "status computes with the record's fallback, as the publisher: %s", st.stdout)
	again, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, rec.ResourceVersion, again.ResourceVersion, "a fallback plan rewrites nothing")

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(context.Background(), service, metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "record deleted with the map: %v", err)
	}, waitTimeout, tick)
}

// A ConfigMap at the record's name that is not the publisher's is neither overwritten nor
// trusted: a malformed drain then has no fallback and nothing is published.
func TestXDSOnlyForeignRecordIgnored(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	cms := kube.CoreV1().ConfigMaps(f.ns)
	foreign, err := cms.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: publish.RecordName(service)},
		Data:       map[string]string{model.RecordKeyDrains: seedDrain, "team": "someone-else"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.startPublisher(func(c *publish.Config) { c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0" })
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a)")
	f.drain(`{"x":{}}`)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonInvalidDrainAnnotation), "nothing is published")
	got, err := cms.Get(context.Background(), publish.RecordName(service), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, foreign.ResourceVersion, got.ResourceVersion, "never written")
}

// PublicationFallback (OME's condition) says, in the same status write as Published, when
// the sinks serve a retained plan instead of the map's current inputs: with
// RetainLastPositive, draining every cluster keeps the last positive weights on the route
// (True, LastPositiveRetained); a malformed drain annotation keeps the last valid drains
// (True, LastValidDrainsRetained); once the input is fixed and in place it is False
// (CurrentPlanApplied). Unchanged input writes nothing (no flap), and
// trafficmap_publisher_maps_in_fallback follows the condition and drops when the map is
// deleted.
func TestPublicationFallbackCondition(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(func(c *publish.Config) {
		c.NoPositivePolicy, c.HTTPAddress = publish.RetainLastPositive, "127.0.0.1:0"
	})
	f.waitPublished()
	f.waitFallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied, "the current plan of trafficmap "+f.ns+"/chat is applied")
	waitInFallback(t, pub, model.FallbackLastPositiveRetained, 0)

	// Every cluster drained: the route keeps the last positive weights.
	f.drain(`{"all-a":{"cluster":"worker-a","reason":"dc move"},"all-b":{"cluster":"worker-b","reason":"dc move"}}`)
	tm := f.waitFallback(metav1.ConditionTrue, model.FallbackLastPositiveRetained,
		"RetainLastPositive keeps the last positive weights on route "+f.ns+"/chat-global")
	assert.Equal(t, string(model.ReasonLastPositiveRetained), published(tm).Reason, "written together with Published")
	assert.False(t, tm.Status.Published)
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	waitInFallback(t, pub, model.FallbackLastPositiveRetained, 1)
	assertNoFlap(t, f, pub, tm)

	// One cluster back: the current plan is applied.
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	f.waitFallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied)
	waitInFallback(t, pub, model.FallbackLastPositiveRetained, 0)

	// A malformed drain annotation: the last valid drains recorded on the route are kept.
	f.drain(`{"x":{}}`)
	tm = f.waitFallback(metav1.ConditionTrue, model.FallbackLastValidDrains,
		"inferenceservice "+f.ns+"/chat annotation ome.io/traffic-drain", "keeping the last valid drains (maintenance-a on worker-a)")
	assert.Equal(t, string(model.ReasonInvalidDrainAnnotation), published(tm).Reason)
	waitInFallback(t, pub, model.FallbackLastValidDrains, 1)
	assertNoFlap(t, f, pub, tm)

	// Fixed: False again, and the gauge follows.
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	f.waitFallback(metav1.ConditionFalse, model.FallbackCurrentPlanApplied)
	waitInFallback(t, pub, model.FallbackLastValidDrains, 0)

	// In fallback again, then deleted: the map leaves the gauge.
	f.drain(`{"x":{}}`)
	f.waitFallback(metav1.ConditionTrue, model.FallbackLastValidDrains)
	waitInFallback(t, pub, model.FallbackLastValidDrains, 1)
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(context.Background(), service, metav1.DeleteOptions{}))
	waitInFallback(t, pub, model.FallbackLastValidDrains, 0)
}

// waitFallback waits until the map's PublicationFallback condition has this status and
// reason at the map's generation, with a message containing every string in want.
func (f *fixture) waitFallback(status metav1.ConditionStatus, reason model.FallbackReason, want ...string) *v1beta1.TrafficMap {
	f.t.Helper()
	var tm *v1beta1.TrafficMap
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		got, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Get(context.Background(), service, metav1.GetOptions{})
		require.NoError(c, err)
		cond := meta.FindStatusCondition(got.Status.Conditions, v1beta1.ConditionPublicationFallback)
		require.NotNil(c, cond, "no PublicationFallback condition")
		assert.Equal(c, got.Generation, cond.ObservedGeneration, "observedGeneration")
		assert.Equal(c, status, cond.Status, "status (message: %s)", cond.Message)
		assert.Equal(c, string(reason), cond.Reason, "reason (message: %s)", cond.Message)
		for _, w := range want {
			assert.Contains(c, cond.Message, w)
		}
		tm = got
	}, waitTimeout, tick)
	return tm
}

// waitInFallback waits until the publisher's trafficmap_publisher_maps_in_fallback gauge
// for reason is want.
func waitInFallback(t *testing.T, pub *runningPublisher, reason model.FallbackReason, want int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, ok := metricValue(get(t, pub, "/metrics"), "trafficmap_publisher_maps_in_fallback", `reason="`+string(reason)+`"`)
		assert.True(c, ok, "exported")
		assert.Equal(c, float64(want), got, "maps in fallback with reason %s", reason)
	}, waitTimeout, tick)
}

// assertNoFlap touches the InferenceService (a change that moves no weight), waits until
// the publisher has reconciled the map again, and asserts that it wrote nothing: the same
// input gives the same conditions.
func assertNoFlap(t *testing.T, f *fixture, pub *runningPublisher, tm *v1beta1.TrafficMap) {
	t.Helper()
	reconciles := func() float64 {
		v, _ := metricValue(get(t, pub, "/metrics"), "trafficmap_publisher_reconciles_total", `result="ok"`)
		return v
	}
	before := reconciles()
	f.setAnnotation(service, "example.com/unrelated", strconv.Itoa(int(tm.Generation))+"-"+tm.ResourceVersion, false)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, reconciles(), before, "reconciled again")
	}, waitTimeout, tick)
	assert.Equal(t, tm.ResourceVersion, f.getMap().ResourceVersion, "no status write for unchanged input")
}

// metricValue is the value of the sample name{labels} (labels "": name alone) in a
// /metrics text, and whether there is one.
func metricValue(text, name, labels string) (float64, bool) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + ` (\S+)$`)
	for line := range strings.Lines(text) {
		if m := re.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			return v, err == nil
		}
	}
	return 0, false
}
