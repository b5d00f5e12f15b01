package report

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

func weightsOf(cs []ImpactCluster) (before, after map[string]int32) {
	before, after = map[string]int32{}, map[string]int32{}
	for _, c := range cs {
		before[c.Cluster], after[c.Cluster] = *c.Before, *c.After
	}
	return before, after
}

// The impact of a change is model.Compute before and after it: drains from the annotation,
// taints from the sources, tolerations from the service.
func TestNewImpact(t *testing.T) {
	base := Objects{TrafficMap: seedMap(), Source: source(nil)}
	noexec := model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a",
		Taints: []weights.Taint{{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}}}
	drainedB := base.WithAnnotations(map[string]string{weights.DrainAnnotation: `{"b":{"cluster":"worker-b","reason":"r"}}`})
	for _, tc := range []struct {
		name          string
		before, after Objects
		wantBefore    map[string]int32
		wantAfter     map[string]int32
		moves, stops  bool
	}{
		{"drain one of two", base, base.WithAnnotations(map[string]string{weights.DrainAnnotation: seedValue}),
			map[string]int32{"worker-a": 1, "worker-b": 1}, map[string]int32{"worker-a": 0, "worker-b": 1}, true, false},
		{"drain the last serving cluster", drainedB, drainedB.WithAnnotations(map[string]string{weights.DrainAnnotation: `{"b":{"cluster":"worker-b","reason":"r"},"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`}),
			map[string]int32{"worker-a": 1, "worker-b": 0}, map[string]int32{"worker-a": 0, "worker-b": 0}, true, true},
		{"taint", base, base.WithClusterTaints(noexec),
			map[string]int32{"worker-a": 1, "worker-b": 1}, map[string]int32{"worker-a": 0, "worker-b": 1}, true, false},
		{"tolerated taint", base.WithAnnotations(map[string]string{weights.TolerationsAnnotation: `[{"key":"maintenance","operator":"Exists"}]`}),
			base.WithAnnotations(map[string]string{weights.TolerationsAnnotation: `[{"key":"maintenance","operator":"Exists"}]`}).WithClusterTaints(noexec),
			map[string]int32{"worker-a": 1, "worker-b": 1}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false},
		{"NoSchedule moves nothing", base, base.WithClusterTaints(model.ClusterTaints{Kind: model.KindWorkloadCluster, Cluster: "worker-a",
			Taints: []weights.Taint{{Key: "maintenance", Effect: weights.EffectNoSchedule}}}),
			map[string]int32{"worker-a": 1, "worker-b": 1}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false},
		{"untaint", base.WithClusterTaints(noexec), base.WithClusterTaints(model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a"}),
			map[string]int32{"worker-a": 0, "worker-b": 1}, map[string]int32{"worker-a": 1, "worker-b": 1}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			imp := NewImpact(tc.before, tc.after)
			require.True(t, imp.Computable(), imp.Error)
			b, a := weightsOf(imp.Clusters)
			assert.Equal(t, tc.wantBefore, b)
			assert.Equal(t, tc.wantAfter, a)
			assert.Equal(t, tc.moves, imp.Moves())
			assert.Equal(t, tc.stops, imp.StopsTraffic())
			assert.Equal(t, tc.stops, imp.Guarded())
			assert.Equal(t, "prod/chat", imp.Ref())
		})
	}
	assert.Nil(t, base.Source.Annotations, "WithAnnotations does not modify the objects")
	assert.Empty(t, base.Clusters, "WithClusterTaints does not modify the objects")
}

// A service already without traffic is not stopped by the change; weights that cannot be
// computed are guarded and count as moving.
func TestImpactNoTrafficAndUnknown(t *testing.T) {
	both := `{"a":{"cluster":"worker-a","reason":"r"},"b":{"cluster":"worker-b","reason":"r"}}`
	off := Objects{TrafficMap: seedMap(), Source: source(map[string]string{weights.DrainAnnotation: both})}
	imp := NewImpact(off, off)
	assert.False(t, imp.StopsTraffic())
	assert.False(t, imp.Guarded())

	missing := Objects{TrafficMap: seedMap()}
	imp = NewImpact(missing, missing)
	assert.False(t, imp.Computable())
	assert.True(t, imp.Guarded())
	assert.True(t, imp.Moves())
	assert.Contains(t, imp.Error, "before: inferenceservice prod/chat named by spec.service does not exist")
	for _, c := range imp.Clusters {
		assert.Nil(t, c.Before)
		assert.Nil(t, c.After)
	}
}

func TestWriteImpacts(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteImpacts(&b, nil))
	assert.Equal(t, "No service's traffic moves.\n", b.String())

	drained := `{"b":{"cluster":"worker-b","reason":"r"}}`
	before := Objects{TrafficMap: seedMap(), Source: source(map[string]string{weights.DrainAnnotation: drained})}
	after := before.WithAnnotations(map[string]string{weights.DrainAnnotation: `{"a":{"cluster":"worker-a","reason":"r"},"b":{"cluster":"worker-b","reason":"r"}}`})
	b.Reset()
	require.NoError(t, WriteImpacts(&b, []Impact{NewImpact(before, after), NewImpact(Objects{TrafficMap: seedMap()}, Objects{TrafficMap: seedMap()})}))
	assert.Equal(t, `Effective weights of InferenceService prod/chat (TrafficMap chat):
  CLUSTER    WEIGHT   BEFORE   AFTER
  worker-a   1        1        0
  worker-b   1        0        0
  NO TRAFFIC: all traffic to InferenceService prod/chat stops: no workload cluster keeps a positive effective weight.
Effective weights of InferenceService prod/chat (TrafficMap chat):
  CLUSTER    WEIGHT   BEFORE   AFTER
  worker-a   1        ?        ?
  worker-b   1        ?        ?
  Unknown: the effective weights of InferenceService prod/chat cannot be computed (before: inferenceservice prod/chat named by spec.service does not exist), so it cannot be shown that traffic to it continues.
`, b.String())
}
