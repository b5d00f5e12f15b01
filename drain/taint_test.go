package drain

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

func TestParseTaintArg(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want weights.Taint
		err  string
	}{
		{"maintenance=planned:NoExecute", weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}, ""},
		{"example.com/drain:NoSchedule", weights.Taint{Key: "example.com/drain", Effect: weights.EffectNoSchedule}, ""},
		{"maintenance=planned", weights.Taint{}, `taint "maintenance=planned": must be KEY[=VALUE]:EFFECT, EFFECT NoExecute or NoSchedule`},
		{"maintenance:Sometimes", weights.Taint{}, `taint "maintenance:Sometimes": taint [0] (key "maintenance"): effect "Sometimes" must be NoSchedule or NoExecute`},
		{"maintenance:", weights.Taint{}, `taint "maintenance:": taint [0] (key "maintenance"): field "effect" is required (NoSchedule or NoExecute)`},
		{"Bad Key:NoExecute", weights.Taint{}, `taint "Bad Key:NoExecute": taint [0]: key "Bad Key"`},
		{"k=bad value:NoExecute", weights.Taint{}, `taint "k=bad value:NoExecute": taint [0] (key "k"): value "bad value"`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			got, err := ParseTaintArg(tc.arg)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseUntaintArg(t *testing.T) {
	key, effect, err := ParseUntaintArg("maintenance")
	require.NoError(t, err)
	assert.Equal(t, "maintenance", key)
	assert.Equal(t, weights.Effect(""), effect)
	key, effect, err = ParseUntaintArg("maintenance:NoExecute")
	require.NoError(t, err)
	assert.Equal(t, "maintenance", key)
	assert.Equal(t, weights.EffectNoExecute, effect)
	for _, bad := range []string{"", "maintenance:Later", "Bad Key"} {
		_, _, err := ParseUntaintArg(bad)
		assert.Error(t, err, bad)
	}
}

func clusterObject(src Source, taints ...weights.Taint) ClusterObject {
	return ClusterObject{Source: src, Name: "worker-a", UID: "u1", ResourceVersion: "7", Taints: taints}
}

func TestPlanTaintAndUntaint(t *testing.T) {
	planned := weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}
	other := weights.Taint{Key: "gpu", Effect: weights.EffectNoSchedule}

	p, err := PlanTaint(clusterObject(SourceInferenceCluster, other), planned)
	require.NoError(t, err)
	assert.Equal(t, []weights.Taint{other, planned}, p.After)
	assert.Equal(t, `{"metadata":{"resourceVersion":"7","uid":"u1"},"spec":{"taints":[{"key":"gpu","effect":"NoSchedule"},{"key":"maintenance","value":"planned","effect":"NoExecute"}]}}`, string(p.Patch()))
	assert.Equal(t, model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a", Taints: p.After}, p.ClusterTaints())

	_, err = PlanTaint(clusterObject(SourceInferenceCluster, planned), weights.Taint{Key: "maintenance", Value: "other", Effect: weights.EffectNoExecute})
	assert.EqualError(t, err, "taint refused: InferenceCluster worker-a already has taint maintenance=planned:NoExecute; untaint maintenance:NoExecute first to change it")
	malformed := clusterObject(SourceWorkloadCluster)
	malformed.Err = assert.AnError
	_, err = PlanTaint(malformed, planned)
	assert.ErrorContains(t, err, "taint refused: the taints of WorkloadCluster worker-a are malformed")

	p, err = PlanTaint(clusterObject(SourceWorkloadCluster), planned)
	require.NoError(t, err)
	assert.Equal(t, `{"metadata":{"annotations":{"publisher.trafficmap.dev/taints":"[{\"key\":\"maintenance\",\"value\":\"planned\",\"effect\":\"NoExecute\"}]"},"resourceVersion":"7","uid":"u1"}}`, string(p.Patch()))

	p, err = PlanUntaint(clusterObject(SourceWorkloadCluster, planned), "maintenance", "")
	require.NoError(t, err)
	assert.Equal(t, []weights.Taint{planned}, p.Changed)
	assert.Equal(t, `{"metadata":{"annotations":{"publisher.trafficmap.dev/taints":null},"resourceVersion":"7","uid":"u1"}}`, string(p.Patch()), "the last taint removes the annotation")
	p, err = PlanUntaint(clusterObject(SourceInferenceCluster, planned, other), "maintenance", weights.EffectNoExecute)
	require.NoError(t, err)
	assert.Equal(t, []weights.Taint{other}, p.After)
	p, err = PlanUntaint(clusterObject(SourceInferenceCluster, planned), "maintenance", "")
	require.NoError(t, err)
	assert.Equal(t, `{"metadata":{"resourceVersion":"7","uid":"u1"},"spec":{"taints":[]}}`, string(p.Patch()))
	_, err = PlanUntaint(clusterObject(SourceInferenceCluster, planned), "maintenance", weights.EffectNoSchedule)
	assert.EqualError(t, err, "untaint refused: InferenceCluster worker-a has no taint maintenance:NoSchedule")
}

func TestTaintPreviewAndResult(t *testing.T) {
	p, err := PlanTaint(clusterObject(SourceInferenceCluster), weights.Taint{Key: "maintenance", Effect: weights.EffectNoExecute})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, WriteTaintPreview(&b, p, TaintPreviewInput{Context: "prod", DryRun: DryRunClient}, nil))
	assert.Equal(t, `ALPHA guarded traffic action (not TrafficMap convergence)
FIELD             VALUE
Action            fleet taint
Context           prod
Target            InferenceCluster/worker-a
UID               u1
ResourceVersion   7
Dry-run           client
Taint             maintenance:NoExecute
Taints after      maintenance:NoExecute
Services moved    0
Follow-up         publisher status --workload-cluster worker-a -A
No service's traffic moves.
`, b.String())

	stopped := report.Impact{Namespace: "prod", TrafficMap: "chat", Service: "chat", Clusters: []report.ImpactCluster{
		{Cluster: "worker-a", Weight: 1, Before: ptr(int32(1)), After: ptr(int32(0))}}}
	r := NewTaintResult(p, DryRunNone, "8", []report.Impact{stopped}, time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	assert.Equal(t, []string{"prod/chat"}, r.StoppedServices)
	assert.True(t, r.Applied)
	b.Reset()
	require.NoError(t, WriteTaintResult(&b, r, "table"))
	assert.Equal(t, `FIELD            VALUE
action           fleet taint
target           InferenceCluster/worker-a
dry-run          none
applied          Yes
taints           maintenance:NoExecute
taints-after     maintenance:NoExecute
services-moved   prod/chat
message          API accepted the taint change; not TrafficMap convergence.
follow-up        publisher status --workload-cluster worker-a -A
`, b.String())
	assert.Equal(t, "ALL TRAFFIC to prod/chat STOPS: no workload cluster keeps a positive effective weight. Confirm this exact action? [y/N] ", NoTrafficPrompt([]string{"prod/chat"}))
}

func ptr[T any](v T) *T { return &v }

func TestPlanAnnotationsAfter(t *testing.T) {
	target := Target{Annotations: map[string]string{"team": "serving", Annotation: `{"x":{"cluster":"worker-b","reason":"r"}}`}}
	p := &Plan{Target: target, Op: OpReplace, Value: "v"}
	assert.Equal(t, map[string]string{"team": "serving", Annotation: "v"}, p.AnnotationsAfter())
	p.Op = OpRemove
	assert.Equal(t, map[string]string{"team": "serving"}, p.AnnotationsAfter())
	assert.Len(t, target.Annotations, 2, "the target is not modified")
}
