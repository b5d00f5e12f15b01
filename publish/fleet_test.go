package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

var maint = weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}

func inferenceCluster(name string, taints any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{}}}
	if taints != nil {
		u.Object["spec"].(map[string]any)["taints"] = taints
	}
	return u
}

func TestTaintSources(t *testing.T) {
	ct := InferenceClusterTaints(inferenceCluster("worker-a", nil))
	assert.Equal(t, ClusterTaints{Kind: KindInferenceCluster, Cluster: "worker-a"}, ct)

	ct = InferenceClusterTaints(inferenceCluster("worker-a", []any{map[string]any{"key": "maintenance", "value": "planned", "effect": "NoExecute"}}))
	require.NoError(t, ct.Err)
	assert.Equal(t, []weights.Taint{maint}, ct.Taints)

	ct = InferenceClusterTaints(inferenceCluster("worker-a", []any{map[string]any{"key": "maintenance", "effect": "Never"}}))
	require.Error(t, ct.Err)
	assert.Nil(t, ct.Taints)
	assert.Contains(t, ct.Err.Error(), `inferencecluster worker-a spec.taints: taint [0] (key "maintenance"): effect "Never" must be NoSchedule or NoExecute`)

	ct = InferenceClusterTaints(inferenceCluster("worker-a", "maintenance"))
	assert.ErrorContains(t, ct.Err, "inferencecluster worker-a spec.taints: taint list must be a JSON array of objects")

	assert.Equal(t, ClusterTaints{Kind: KindWorkloadCluster, Cluster: "worker-b"}, WorkloadClusterTaints("worker-b", nil))
	ct = WorkloadClusterTaints("worker-b", map[string]string{weights.TaintsAnnotation: `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`})
	require.NoError(t, ct.Err)
	assert.Equal(t, []weights.Taint{maint}, ct.Taints)
	ct = WorkloadClusterTaints("worker-b", map[string]string{weights.TaintsAnnotation: `[`})
	assert.ErrorContains(t, ct.Err, "workloadcluster worker-b annotation publisher.trafficmap.dev/taints: ")
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
	res, err := weights.Compute(weights.Input{Entries: entries(tm), Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	d, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res,
		httproute.Inputs{Drains: []weights.Drain{}, Taints: taints, Tolerations: tols})
	require.NoError(t, err)
	return d
}

func TestComputeFleet(t *testing.T) {
	tm := fleetMap()
	valid := ClusterTaints{Kind: KindInferenceCluster, Cluster: "worker-a", Taints: []weights.Taint{maint}}
	noSchedule := ClusterTaints{Kind: KindWorkloadCluster, Cluster: "worker-b",
		Taints: []weights.Taint{{Key: "maintenance", Effect: weights.EffectNoSchedule}}}
	other := ClusterTaints{Kind: KindInferenceCluster, Cluster: "worker-z", Taints: []weights.Taint{maint}}
	bad := ClusterTaints{Kind: KindInferenceCluster, Cluster: "worker-a", Err: assert.AnError}
	exists := map[string]string{weights.TolerationsAnnotation: `[{"key":"maintenance","operator":"Exists"}]`}
	malformedTols := map[string]string{weights.TolerationsAnnotation: `[{"operator":"Equal"}]`}
	recorded := builtRoute(t, map[string][]weights.Taint{"worker-a": {maint}, "worker-b": {}},
		[]weights.Toleration{{Key: "other", Operator: weights.OperatorExists}}).Route

	tests := []struct {
		name      string
		in        Inputs
		effective map[string]int32
		taintErr  bool
		tolErr    bool
		err       error
	}{
		{"no sources", Inputs{TrafficMap: tm}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"NoExecute drains, NoSchedule does not, other clusters ignored", Inputs{TrafficMap: tm, Clusters: []ClusterTaints{valid, noSchedule, other}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, false, false, nil},
		{"tolerated", Inputs{TrafficMap: tm, SourceAnnotations: exists, Clusters: []ClusterTaints{valid}},
			map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"malformed taints keep the recorded ones", Inputs{TrafficMap: tm, Route: recorded, Clusters: []ClusterTaints{bad}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, true, false, nil},
		{"malformed taints with a valid source for the same cluster still fall back", Inputs{TrafficMap: tm, Route: recorded,
			Clusters: []ClusterTaints{bad, {Kind: KindWorkloadCluster, Cluster: "worker-a"}}}, map[string]int32{"worker-a": 0, "worker-b": 1}, true, false, nil},
		{"malformed taints on a cluster with no entry are ignored", Inputs{TrafficMap: tm,
			Clusters: []ClusterTaints{{Kind: KindInferenceCluster, Cluster: "worker-z", Err: assert.AnError}}}, map[string]int32{"worker-a": 1, "worker-b": 1}, false, false, nil},
		{"malformed taints, no record", Inputs{TrafficMap: tm, Clusters: []ClusterTaints{bad}}, nil, false, false, ErrNoTaintFallback},
		{"malformed tolerations keep the recorded ones", Inputs{TrafficMap: tm, Route: recorded, SourceAnnotations: malformedTols, Clusters: []ClusterTaints{valid}},
			map[string]int32{"worker-a": 0, "worker-b": 1}, false, true, nil},
		{"malformed tolerations, no record", Inputs{TrafficMap: tm, SourceAnnotations: malformedTols}, nil, false, false, ErrNoTolerationFallback},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(tc.in)
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
	c, err := Compute(Inputs{TrafficMap: tm, Clusters: []ClusterTaints{
		{Kind: KindInferenceCluster, Cluster: "worker-a", Taints: []weights.Taint{maint, {Key: "zone", Effect: weights.EffectNoSchedule}}},
	}})
	require.NoError(t, err)
	recorded := noExecute(c.Taints)
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
		"worker-c=0 (taint maintenance=planned:NoExecute,upgrade:NoExecute), worker-d=1", describeWeights(res))
}

func TestIndexTrafficMapByCluster(t *testing.T) {
	got, err := indexTrafficMapByCluster(fleetMap())
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-a", "worker-b"}, got)
	got, err = indexTrafficMapByCluster("not a map")
	require.NoError(t, err)
	assert.Nil(t, got)
}

// The publisher works without either taint source: a source whose API is not served stays
// off, and no informer is started for it.
func TestTaintSourcesOffWhenNotServed(t *testing.T) {
	kube := kubefake.NewClientset()
	p := &Publisher{clients: clients{kube: kube}, log: zaptest.NewLogger(t), caches: &caches{}}
	synced, err := p.startTaintSources(t.Context())
	require.NoError(t, err)
	assert.Empty(t, synced)
	assert.Nil(t, p.caches.inferenceClusters)
	assert.Nil(t, p.caches.workloadClusters)

	kube.Resources = []*metav1.APIResourceList{
		{GroupVersion: "ome.io/v1beta1", APIResources: []metav1.APIResource{{Name: "inferenceservices"}}},
		{GroupVersion: "modelplane.ai/v1alpha1", APIResources: []metav1.APIResource{{Name: "inferenceclusters"}}},
	}
	on, err := p.served(InferenceClustersResource)
	require.NoError(t, err)
	assert.True(t, on)
	on, err = p.served(WorkloadClustersResource)
	require.NoError(t, err)
	assert.False(t, on, "ome.io is served, but not workloadclusters")
}
