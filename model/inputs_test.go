package model_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

func TestCompute(t *testing.T) {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1, DrainRefs: []string{"old"}},
	}}}
	tm.Name, tm.Namespace = "chat", "prod"
	drainB := []weights.Drain{{ID: "m-b", Cluster: "worker-b", Reason: "r"}}
	res, err := weights.Compute(weights.Input{Entries: testEntries(tm), Drains: drainB})
	require.NoError(t, err)
	built, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res, httproute.Inputs{Drains: drainB})
	require.NoError(t, err)
	malformed := map[string]string{weights.DrainAnnotation: `{"x":{}}`}

	tests := []struct {
		name      string
		in        model.Inputs
		effective map[string]int32
		drainErr  bool
		err       error
	}{
		{"no annotation: drainRefs still hold", model.Inputs{TrafficMap: tm}, map[string]int32{"worker-a": 0, "worker-b": 1}, false, nil},
		{"valid annotation", model.Inputs{TrafficMap: tm, SourceAnnotations: map[string]string{weights.DrainAnnotation: `{"m-b":{"cluster":"worker-b","reason":"r"}}`}},
			map[string]int32{"worker-a": 0, "worker-b": 0}, false, nil},
		{"malformed, route records drains", model.Inputs{TrafficMap: tm, SourceAnnotations: malformed, Recorded: httproute.Recorded(built.Route)},
			map[string]int32{"worker-a": 0, "worker-b": 0}, true, nil},
		{"malformed, no route", model.Inputs{TrafficMap: tm, SourceAnnotations: malformed}, nil, false, model.ErrNoDrainFallback},
		{"invalid map", model.Inputs{TrafficMap: &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Entries: []v1beta1.TrafficMapEntry{{Cluster: "a", Endpoint: "ftp://x"}}}}},
			nil, false, weights.ErrEndpointInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := model.Compute(tc.in)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			eff := map[string]int32{}
			for _, e := range got.Result.Entries {
				eff[e.Cluster] = e.Effective
			}
			assert.Equal(t, tc.effective, eff)
			assert.Equal(t, tc.drainErr, got.DrainErr != nil)
		})
	}
}

var maint = weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}

// testEntries are tm's entries as weights.Compute takes them.
func testEntries(tm *v1beta1.TrafficMap) []weights.Entry {
	out := make([]weights.Entry, len(tm.Spec.Entries))
	for i, e := range tm.Spec.Entries {
		out[i] = weights.Entry{Cluster: e.Cluster, Endpoint: e.Endpoint, Weight: int64(e.Weight), DrainRefs: e.DrainRefs}
	}
	return out
}

func fleetMap() *v1beta1.TrafficMap {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	tm.Name, tm.Namespace = "chat", "prod"
	return tm
}

// builtRoute returns a route recording these taints and tolerations.
func builtRoute(t *testing.T, taints map[string][]weights.Taint, tols []weights.Toleration) *httproute.Desired {
	t.Helper()
	tm := fleetMap()
	res, err := weights.Compute(weights.Input{Entries: testEntries(tm), Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	d, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res,
		httproute.Inputs{Drains: []weights.Drain{}, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	return d
}

func TestComputeFleet(t *testing.T) {
	tm := fleetMap()
	valid := model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a", Taints: []weights.Taint{maint}}
	noSchedule := model.ClusterTaints{Kind: model.KindWorkloadCluster, Cluster: "worker-b",
		Taints: []weights.Taint{{Key: "maintenance", Effect: weights.EffectNoSchedule}}}
	other := model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-z", Taints: []weights.Taint{maint}}
	bad := model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a", Err: assert.AnError}
	exists := map[string]string{weights.TolerationsAnnotation: `[{"key":"maintenance","operator":"Exists"}]`}
	malformedTols := map[string]string{weights.TolerationsAnnotation: `[{"operator":"Equal"}]`}
	recorded := httproute.Recorded(builtRoute(t, map[string][]weights.Taint{"worker-a": {maint}, "worker-b": {}},
		[]weights.Toleration{{Key: "other", Operator: weights.OperatorExists}}).Route)

	tests := []struct {
		name      string
		in        model.Inputs
		effective map[string]int32
		taintErr  bool
		tolErr    bool
		err       error
	}{
		{"no sources", model.Inputs{TrafficMap: tm}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"NoExecute drains, NoSchedule does not, other clusters ignored", model.Inputs{TrafficMap: tm, Clusters: []model.ClusterTaints{valid, noSchedule, other}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, false, false, nil},
		{"tolerated", model.Inputs{TrafficMap: tm, SourceAnnotations: exists, Clusters: []model.ClusterTaints{valid}},
			map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"malformed taints keep the recorded ones", model.Inputs{TrafficMap: tm, Recorded: recorded, Clusters: []model.ClusterTaints{bad}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, true, false, nil},
		{"malformed taints with a valid source for the same cluster still fall back", model.Inputs{TrafficMap: tm, Recorded: recorded,
			Clusters: []model.ClusterTaints{bad, {Kind: model.KindWorkloadCluster, Cluster: "worker-a"}}}, map[string]int32{"worker-a": 0, "worker-b": 1}, true, false, nil},
		{"malformed taints on a cluster with no entry are ignored", model.Inputs{TrafficMap: tm,
			Clusters: []model.ClusterTaints{{Kind: model.KindInferenceCluster, Cluster: "worker-z", Err: assert.AnError}}}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"malformed taints, no record", model.Inputs{TrafficMap: tm, Clusters: []model.ClusterTaints{bad}}, nil, false, false, model.ErrNoTaintFallback},
		{"malformed tolerations keep the recorded ones", model.Inputs{TrafficMap: tm, Recorded: recorded, SourceAnnotations: malformedTols, Clusters: []model.ClusterTaints{valid}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, false, true, nil},
		{"malformed tolerations, no record", model.Inputs{TrafficMap: tm, SourceAnnotations: malformedTols}, nil, false, false, model.ErrNoTolerationFallback},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := model.Compute(tc.in)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			eff := map[string]int32{}
			for _, e := range got.Result.Entries {
				eff[e.Cluster] = e.Effective
			}
			assert.Equal(t, tc.effective, eff)
			assert.Equal(t, tc.taintErr, got.TaintErr != nil, "TaintErr: %v", got.TaintErr)
			assert.Equal(t, tc.tolErr, got.TolerationErr != nil, "TolerationErr: %v", got.TolerationErr)
			assert.NotNil(t, got.Tolerations)
			assert.Len(t, got.Taints, 2, "every entry cluster, and only those")
		})
	}
}

func TestComputeFleetRecordRoundTrip(t *testing.T) {
	tm := fleetMap()
	c, err := model.Compute(model.Inputs{TrafficMap: tm, Clusters: []model.ClusterTaints{
		{Kind: model.KindInferenceCluster, Cluster: "worker-a", Taints: []weights.Taint{maint, {Key: "zone", Effect: weights.EffectNoSchedule}}},
	}})
	require.NoError(t, err)
	recorded := model.NoExecute(c.Taints)
	assert.Equal(t, map[string][]weights.Taint{"worker-a": {maint}, "worker-b": {}}, recorded, "only NoExecute taints are recorded")
	route := builtRoute(t, recorded, c.Tolerations).Route
	assert.JSONEq(t, `{"worker-a":[{"key":"maintenance","value":"planned","effect":"NoExecute"}],"worker-b":[]}`, route.Annotations[httproute.AnnotationClusterTaints])
	assert.JSONEq(t, `[]`, route.Annotations[httproute.AnnotationServiceTolerations])
	got, ok := httproute.RecordedTaints(route)
	require.True(t, ok)
	assert.Equal(t, recorded, got)
}

func TestDescribeWeightsHolds(t *testing.T) {
	res := weights.Result{Entries: []weights.EffectiveEntry{
		{Cluster: "worker-a", Weight: 1, HeldBy: []string{"maintenance-a"}, Taints: []weights.Taint{maint}},
		{Cluster: "worker-b", Weight: 1, HeldBy: []string{"kernel-b", "maintenance-b"}},
		{Cluster: "worker-c", Weight: 1, Taints: []weights.Taint{maint, {Key: "upgrade", Effect: weights.EffectNoExecute}}},
		{Cluster: "worker-d", Weight: 1, Effective: 1},
	}}
	assert.Equal(t, "worker-a=0 (drained by maintenance-a; taint maintenance=planned:NoExecute), "+
		"worker-b=0 (drained by kernel-b,maintenance-b), "+
		"worker-c=0 (taint maintenance=planned:NoExecute,upgrade:NoExecute), worker-d=1", model.DescribeWeights(res))
}

// The record ConfigMap's data is the route annotations' JSON, key for key, and reads back to
// the state it was written from.
func TestRecordedRoundTrip(t *testing.T) {
	drains := []weights.Drain{{ID: "m-a", Cluster: "worker-a", Reason: "kernel upgrade"}, {ID: "m-b", Cluster: "worker-b", Reason: "r"}}
	taints := map[string][]weights.Taint{
		"worker-a": {{Key: "maintenance", Value: "true", Effect: weights.EffectNoExecute}},
		"worker-b": {},
	}
	tols := []weights.Toleration{{Key: "maintenance", Operator: weights.OperatorEqual, Value: "true", Effect: weights.EffectNoExecute}}

	data := model.EncodeRecorded(drains, taints, tols)
	got := model.RecordedFromData(data)
	assert.Equal(t, model.Recorded{Drains: drains, HasDrains: true, Taints: taints, Tolerations: tols, HasTolerations: true}, got)
	assert.Equal(t, data, model.EncodeRecorded(got.Drains, got.Taints, got.Tolerations), "deterministic")

	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	res, err := weights.Compute(weights.Input{Entries: testEntries(tm), Drains: drains, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	built, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res,
		httproute.Inputs{Drains: drains, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		model.RecordKeyDrains:      built.Route.Annotations[httproute.AnnotationDrains],
		model.RecordKeyTaints:      built.Route.Annotations[httproute.AnnotationClusterTaints],
		model.RecordKeyTolerations: built.Route.Annotations[httproute.AnnotationServiceTolerations],
	}, data, "the same encodings as the route annotations")
	assert.Equal(t, httproute.Recorded(built.Route), got)

	empty := model.EncodeRecorded(nil, map[string][]weights.Taint{}, nil)
	assert.Equal(t, map[string]string{model.RecordKeyDrains: "{}", model.RecordKeyTaints: "{}", model.RecordKeyTolerations: "[]"}, empty)
	assert.True(t, model.RecordedFromData(empty).HasDrains, "an empty drain set is a record")
	assert.Equal(t, model.Recorded{}, model.RecordedFromData(nil))
	assert.Equal(t, model.Recorded{}, model.RecordedFromData(map[string]string{model.RecordKeyDrains: "{not json", model.RecordKeyTolerations: "[{]"}))
}

// Compute falls back to model.Inputs.Recorded.
func TestComputeRecordedFallback(t *testing.T) {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	malformed := map[string]string{weights.DrainAnnotation: `{"x":{}}`, weights.TolerationsAnnotation: "[{"}
	rec := model.RecordedFromData(model.EncodeRecorded([]weights.Drain{{ID: "m", Cluster: "worker-a", Reason: "r"}}, nil, nil))
	got, err := model.Compute(model.Inputs{TrafficMap: tm, SourceAnnotations: malformed, Recorded: rec})
	require.NoError(t, err)
	require.Error(t, got.DrainErr)
	require.Error(t, got.TolerationErr)
	assert.Equal(t, rec.Drains, got.Drains)
	assert.Equal(t, []weights.Toleration{}, got.Tolerations)

	_, err = model.Compute(model.Inputs{TrafficMap: tm, SourceAnnotations: malformed, Recorded: model.Recorded{}})
	require.ErrorIs(t, err, model.ErrNoDrainFallback)
}
