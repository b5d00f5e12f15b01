package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

// The record ConfigMap's data is the route annotations' JSON, key for key, and reads back to
// the state it was written from.
func TestRecordedRoundTrip(t *testing.T) {
	drains := []weights.Drain{{ID: "m-a", Cluster: "worker-a", Reason: "kernel upgrade"}, {ID: "m-b", Cluster: "worker-b", Reason: "r"}}
	taints := map[string][]weights.Taint{
		"worker-a": {{Key: "maintenance", Value: "true", Effect: weights.EffectNoExecute}},
		"worker-b": {},
	}
	tols := []weights.Toleration{{Key: "maintenance", Operator: weights.OperatorEqual, Value: "true", Effect: weights.EffectNoExecute}}

	data := EncodeRecorded(drains, taints, tols)
	got := RecordedFromData(data)
	assert.Equal(t, Recorded{Drains: drains, HasDrains: true, Taints: taints, Tolerations: tols, HasTolerations: true}, got)
	assert.Equal(t, data, EncodeRecorded(got.Drains, got.Taints, got.Tolerations), "deterministic")

	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	res, err := weights.Compute(weights.Input{Entries: entries(tm), Drains: drains, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	built, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res,
		httproute.Inputs{Drains: drains, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		RecordKeyDrains:      built.Route.Annotations[httproute.AnnotationDrains],
		RecordKeyTaints:      built.Route.Annotations[httproute.AnnotationClusterTaints],
		RecordKeyTolerations: built.Route.Annotations[httproute.AnnotationServiceTolerations],
	}, data, "the same encodings as the route annotations")
	assert.Equal(t, RecordedFromRoute(built.Route), got)

	empty := EncodeRecorded(nil, map[string][]weights.Taint{}, nil)
	assert.Equal(t, map[string]string{RecordKeyDrains: "{}", RecordKeyTaints: "{}", RecordKeyTolerations: "[]"}, empty)
	assert.True(t, RecordedFromData(empty).HasDrains, "an empty drain set is a record")
	assert.Equal(t, Recorded{}, RecordedFromData(nil))
	assert.Equal(t, Recorded{}, RecordedFromData(map[string]string{RecordKeyDrains: "{not json", RecordKeyTolerations: "[{]"}))
}

// Compute falls back to Inputs.Recorded when it is set, not to the route.
func TestComputeRecordedFallback(t *testing.T) {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
	}}}
	malformed := map[string]string{weights.DrainAnnotation: `{"x":{}}`, weights.TolerationsAnnotation: "[{"}
	rec := RecordedFromData(EncodeRecorded([]weights.Drain{{ID: "m", Cluster: "worker-a", Reason: "r"}}, nil, nil))
	got, err := Compute(Inputs{TrafficMap: tm, SourceAnnotations: malformed, Recorded: &rec})
	require.NoError(t, err)
	require.Error(t, got.DrainErr)
	require.Error(t, got.TolerationErr)
	assert.Equal(t, rec.Drains, got.Drains)
	assert.Equal(t, []weights.Toleration{}, got.Tolerations)

	_, err = Compute(Inputs{TrafficMap: tm, SourceAnnotations: malformed, Recorded: &Recorded{}})
	require.ErrorIs(t, err, ErrNoDrainFallback)
}
