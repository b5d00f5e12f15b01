package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
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
	ct := model.InferenceClusterTaints(inferenceCluster("worker-a", nil))
	assert.Equal(t, model.ClusterTaints{Kind: model.KindInferenceCluster, Cluster: "worker-a"}, ct)

	ct = model.InferenceClusterTaints(inferenceCluster("worker-a", []any{map[string]any{"key": "maintenance", "value": "planned", "effect": "NoExecute"}}))
	require.NoError(t, ct.Err)
	assert.Equal(t, []weights.Taint{maint}, ct.Taints)

	ct = model.InferenceClusterTaints(inferenceCluster("worker-a", []any{map[string]any{"key": "maintenance", "effect": "Never"}}))
	require.Error(t, ct.Err)
	assert.Nil(t, ct.Taints)
	assert.Contains(t, ct.Err.Error(), `inferencecluster worker-a spec.taints: taint [0] (key "maintenance"): effect "Never" must be NoSchedule or NoExecute`)

	ct = model.InferenceClusterTaints(inferenceCluster("worker-a", "maintenance"))
	assert.ErrorContains(t, ct.Err, "inferencecluster worker-a spec.taints: taint list must be a JSON array of objects")

	assert.Equal(t, model.ClusterTaints{Kind: model.KindWorkloadCluster, Cluster: "worker-b"}, model.WorkloadClusterTaints("worker-b", nil))
	ct = model.WorkloadClusterTaints("worker-b", map[string]string{weights.TaintsAnnotation: `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`})
	require.NoError(t, ct.Err)
	assert.Equal(t, []weights.Taint{maint}, ct.Taints)
	ct = model.WorkloadClusterTaints("worker-b", map[string]string{weights.TaintsAnnotation: `[`})
	assert.ErrorContains(t, ct.Err, "workloadcluster worker-b annotation publisher.trafficmap.dev/taints: ")
}

// mapsWithCluster finds the maps with an entry for a cluster, in every watched namespace.
func TestMapsWithCluster(t *testing.T) {
	cs := benchCaches()
	a, b := fleetMap(), fleetMap()
	b.Namespace = "other"
	b.Spec.Entries = b.Spec.Entries[1:]
	for _, tm := range []*v1beta1.TrafficMap{a, b} {
		require.NoError(t, cs.maps[0].GetIndexer().Add(tm))
	}
	for _, tc := range []struct {
		cluster string
		want    []*v1beta1.TrafficMap
	}{
		{"worker-a", []*v1beta1.TrafficMap{a}},
		{"worker-b", []*v1beta1.TrafficMap{a, b}},
		{"worker-c", nil},
	} {
		assert.ElementsMatch(t, tc.want, mapsWithCluster(cs.maps, tc.cluster), tc.cluster)
	}
}

// The publisher works without either taint source: a source whose API is not served stays
// off, and no informer is started for it.
func TestTaintSourcesOffWhenNotServed(t *testing.T) {
	kube := kubefake.NewClientset()
	p := &Publisher{clients: clients{kube: kube}, log: zaptest.NewLogger(t), caches: &caches{sources: &clusterSources{discover: make(chan struct{}, 1)}}}
	synced, err := p.startTaintSources(t.Context())
	require.NoError(t, err)
	assert.Empty(t, synced)
	assert.Nil(t, p.caches.sources.inferenceClusters)
	assert.Nil(t, p.caches.sources.workloadClusters)

	kube.Resources = []*metav1.APIResourceList{
		{GroupVersion: "ome.io/v1beta1", APIResources: []metav1.APIResource{{Name: "inferenceservices"}}},
		{GroupVersion: "modelplane.ai/v1alpha1", APIResources: []metav1.APIResource{{Name: "inferenceclusters"}}},
	}
	on, err := p.served(model.InferenceClustersResource)
	require.NoError(t, err)
	assert.True(t, on)
	on, err = p.served(model.WorkloadClustersResource)
	require.NoError(t, err)
	assert.False(t, on, "ome.io is served, but not workloadclusters")
}
