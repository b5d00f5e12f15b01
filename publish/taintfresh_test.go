package publish

import (
	"context"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// freshFixture is a reconciler over real caches (informers not running, filled by hand)
// whose API clients are fakes holding the live objects: what the caches say and what the
// API server says can differ, as they do while a watch is behind or not running at all.
type freshFixture struct {
	caches *caches
	api    *fakeStatusAPI
	rec    *reconciler
	key    cache.ObjectName
}

const maintJSON = `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`

func clusterObject(gvr schema.GroupVersionResource, kind, name, rv, taints string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name, "resourceVersion": rv}, "spec": map[string]any{}}}
	if taints == "" {
		return u
	}
	if kind == model.KindWorkloadCluster {
		u.SetAnnotations(map[string]string{weights.TaintsAnnotation: taints})
		return u
	}
	u.Object["spec"] = map[string]any{"taints": []any{map[string]any{"key": "maintenance", "value": "planned", "effect": "NoExecute"}}}
	return u
}

// newFreshFixture serves prod/chat (entries worker-a and worker-b, Published False after a
// flip) with the InferenceService at the same resourceVersion in the cache and live; live
// are the taint source objects on the API server.
func newFreshFixture(t *testing.T, live ...runtime.Object) *freshFixture {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	isvc := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "ome.io/v1beta1", Kind: "InferenceService"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", UID: "isvc-uid", ResourceVersion: "5"}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		model.InferenceClustersResource: "InferenceClusterList", model.WorkloadClustersResource: "WorkloadClusterList"}, live...)
	c := clients{kube: kubefake.NewClientset(), gateway: gwfake.NewClientset(), maps: omefake.NewClientset(),
		meta: metadatafake.NewSimpleMetadataClient(scheme, isvc), dyn: dyn}
	route := httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "global"},
		HostTemplate: template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.example.com"))}
	cs := newCaches(c, Config{Sinks: []string{SinkXDS}}, route)

	tm := fleetMap()
	tm.UID, tm.Generation, tm.ResourceVersion = "uid-1", 3, "1"
	tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse,
		Reason: string(model.ReasonPublishing), Message: "publisher taint requested; not yet published", ObservedGeneration: 3}}
	// Its names are journaled (a map published before): every status write the tests count
	// is a condition's.
	tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher,
		ClaimedTargets: model.ClaimTargets(model.GRPCName(tm.Namespace, tm.Spec.Service), []string{"chat.prod", "chat.prod.example.com"})}
	require.NoError(t, cs.maps[0].GetIndexer().Add(tm))
	cached := isvc.DeepCopy()
	cached.TypeMeta = metav1.TypeMeta{}
	require.NoError(t, cs.isvcs[0].GetIndexer().Add(cached))

	f := &freshFixture{caches: cs, api: &fakeStatusAPI{tm: tm.DeepCopy()}, key: cache.NewObjectName("prod", "chat")}
	status := newStatusWriter(f.api, record.NewFakeRecorder(32), nil)
	f.rec = &reconciler{inputs: cs, hosts: route, sinks: []model.Sink{inPlace("xds version v1 ACKed by 1/1 clients")}, status: status,
		claims: newClaimTable(), publisher: testPublisher, digest: model.OptionsDigest(nil)}
	return f
}

// inferenceClusters gives the caches a (not running) InferenceCluster informer holding objs.
func (f *freshFixture) inferenceClusters(t *testing.T, objs ...*unstructured.Unstructured) cache.SharedIndexInformer {
	t.Helper()
	inf := dynamicinformer.NewFilteredDynamicInformer(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), model.InferenceClustersResource, "", 0, cache.Indexers{}, nil).Informer()
	for _, o := range objs {
		require.NoError(t, inf.GetIndexer().Add(o))
	}
	f.caches.sources.inferenceClusters = inf
	return inf
}

// run reconciles once and makes the stored map the cached one, as the informer would.
func (f *freshFixture) run(t *testing.T) (*metav1.Condition, error) {
	t.Helper()
	_, err := f.rec.reconcile(t.Context(), f.key, zaptest.NewLogger(t))
	require.NoError(t, f.caches.maps[0].GetIndexer().Update(f.api.tm.DeepCopy()))
	return model.FindPublished(f.api.tm), err
}

// Issue 25 item 5: the cached taints of worker-a are older than the live ones (a taint
// patched after the flip to False, before the watch delivered it): the map does not turn
// True from the stale decision; once the cache has the taint it turns True with it.
func TestReconcileClusterTaintsNewerThanCache(t *testing.T) {
	live := clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON)
	f := newFreshFixture(t, live)
	inf := f.inferenceClusters(t, clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "7", ""))

	c, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, c.Status, "no True from taints older than the live ones: %s", c.Message)
	assert.Zero(t, f.api.applies)

	require.NoError(t, inf.GetIndexer().Update(live)) // the watch caught up
	c, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "worker-a=0 (taint maintenance=planned:NoExecute)")
}

// A map with no Published condition yet (new, or created again) decided while the caches
// may lag the API server (a list or watch failed within the window, as around an API server
// restart) is checked against the live inputs like a map turning True from False. The chaos
// run (make chaos) found a map created again during two API server restarts published
// without a taint written meanwhile: its first True skipped the check.
func TestReconcileFirstTrueFreshWhileCachesLag(t *testing.T) {
	live := clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON)
	f := newFreshFixture(t, live)
	inf := f.inferenceClusters(t, clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "7", ""))
	f.api.tm.Status.Conditions = nil
	require.NoError(t, f.caches.maps[0].GetIndexer().Update(f.api.tm.DeepCopy()))
	lagging := true
	f.rec.lagging = func() bool { return lagging }

	c, err := f.run(t)
	require.NoError(t, err)
	if c != nil {
		assert.NotEqual(t, metav1.ConditionTrue, c.Status, "no first True from taints older than the live ones: %s", c.Message)
	}

	require.NoError(t, inf.GetIndexer().Update(live)) // the re-listed cache caught up
	c, err = f.run(t)
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
	assert.Contains(t, c.Message, "worker-a=0 (taint maintenance=planned:NoExecute)")
}

// With healthy caches a map's first True reads nothing live (a cold start of N maps costs no
// N reads): the decision is the cache's.
func TestReconcileFirstTrueFromHealthyCaches(t *testing.T) {
	live := clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON)
	f := newFreshFixture(t, live)
	f.inferenceClusters(t, clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON))
	f.api.tm.Status.Conditions = nil
	require.NoError(t, f.caches.maps[0].GetIndexer().Update(f.api.tm.DeepCopy()))
	f.rec.lagging = func() bool { return false }
	f.caches.sources.live.dyn = nil // a live read would panic

	c, err := f.run(t)
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
}

// A taint source whose API the publisher does not watch (its CRD was installed after the
// publisher started) holds a taint: the map does not turn True without it.
func TestReconcileClusterTaintsOfUnwatchedSource(t *testing.T) {
	live := clusterObject(model.WorkloadClustersResource, model.KindWorkloadCluster, "worker-b", "9", maintJSON)
	f := newFreshFixture(t, live)

	c, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionFalse, c.Status, "no True while a live taint is not watched: %s", c.Message)

	// Once the source is watched (its informer holds the object), the taint holds worker-b.
	inf := metadatainformer.NewFilteredMetadataInformer(metadatafake.NewSimpleMetadataClient(runtime.NewScheme()), model.WorkloadClustersResource, "", 0, cache.Indexers{}, nil).Informer()
	require.NoError(t, inf.GetIndexer().Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "worker-b", ResourceVersion: "9",
		Annotations: map[string]string{weights.TaintsAnnotation: maintJSON}}}))
	f.caches.sources.workloadClusters = inf
	c, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "worker-b=0 (taint maintenance=planned:NoExecute)")
}

// Taints the cache and the API server agree on, and other fields that changed, do not hold
// a map.
func TestReconcileClusterTaintsFresh(t *testing.T) {
	f := newFreshFixture(t, clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON))
	f.inferenceClusters(t, clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "7", maintJSON))
	c, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
	assert.Contains(t, c.Message, "worker-a=0 (taint maintenance=planned:NoExecute)")
}

// staleClusters implements mapInputs: the fake's clusters have no taint sources, so the
// API server agrees with whatever a decision used.
func (f *fakeInputs) staleClusters(context.Context, *v1beta1.TrafficMap, []model.ClusterTaints) (string, error) {
	return "", nil
}

// The discovery starts a taint source's informer once its API is served, without a
// restart, and reconciles the maps of its clusters; it stops it once the API is gone. A
// kick (staleClusters finding a taint on an unwatched source) checks at once.
func TestTaintDiscovery(t *testing.T) {
	live := clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "8", maintJSON)
	f := newFreshFixture(t, live)
	var unserved atomic.Bool
	unserved.Store(true)
	kc := kubefake.NewClientset()
	disc := kc.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: model.InferenceClustersResource.GroupVersion().String(),
		APIResources: []metav1.APIResource{{Name: model.InferenceClustersResource.Resource}}}}
	disc.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		if unserved.Load() {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{}, "modelplane.ai/v1alpha1")
		}
		return false, nil, nil
	})
	log := zaptest.NewLogger(t)
	p := &Publisher{cfg: Config{ResyncPeriod: time.Hour}, log: log, health: newWatchHealth(log), caches: f.caches, queue: newQueue(),
		clients: clients{kube: kc, dyn: f.caches.sources.live.dyn}}
	wire(p)
	t.Cleanup(p.queue.ShutDown)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	synced, err := p.startTaintSources(ctx)
	require.NoError(t, err)
	assert.Empty(t, synced, "nothing served at the start")
	assert.Nil(t, f.caches.sources.informer(model.KindInferenceCluster))

	tm, err := f.caches.trafficMap("prod", "chat")
	require.NoError(t, err)
	stale, err := f.caches.staleClusters(ctx, tm, nil)
	require.NoError(t, err)
	assert.Equal(t, "InferenceCluster worker-a: the caches say taints none, the API server says taints maintenance=planned:NoExecute", stale)

	unserved.Store(false) // the CRD is installed; the stale check above kicked the discovery
	require.Eventually(t, func() bool { return f.caches.sources.informer(model.KindInferenceCluster) != nil }, 10*time.Second, 10*time.Millisecond)
	cts, err := f.caches.sources.clusterTaints(tm)
	require.NoError(t, err)
	assert.Equal(t, []model.ClusterTaints{{Kind: model.KindInferenceCluster, Cluster: "worker-a", Taints: []weights.Taint{maint}}}, cts)
	require.Eventually(t, func() bool { return p.queue.Len() > 0 }, 10*time.Second, 10*time.Millisecond)
	key, _ := p.queue.Get()
	assert.Equal(t, "prod/chat", key.String(), "the maps of its clusters are reconciled")
	p.queue.Done(key)

	unserved.Store(true) // the CRD is removed
	f.caches.sources.kick()
	require.Eventually(t, func() bool { return f.caches.sources.informer(model.KindInferenceCluster) == nil }, 10*time.Second, 10*time.Millisecond)
	cts, err = f.caches.sources.clusterTaints(tm)
	require.NoError(t, err)
	assert.Empty(t, cts)
}

// A live read starts after the call: a read asked while a list is in flight waits for the
// next list, and sees what was written before it asked.
func TestLiveTaintsRoundStartsAfterCall(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		model.InferenceClustersResource: "InferenceClusterList", model.WorkloadClustersResource: "WorkloadClusterList"})
	var state atomic.Pointer[unstructured.Unstructured] // the API server's InferenceCluster
	state.Store(clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "1", ""))
	entered, release := make(chan struct{}), make(chan struct{})
	var lists atomic.Int32
	dyn.PrependReactor("list", "inferenceclusters", func(clienttesting.Action) (bool, runtime.Object, error) {
		snap := state.Load() // a list answers with the state at its start
		if lists.Add(1) == 1 {
			close(entered)
			<-release
		}
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClusterList"},
			Items: []unstructured.Unstructured{*snap}}
		return true, list, nil
	})
	l := &liveTaints{dyn: dyn}
	read := func(out chan<- map[string]map[string]model.ClusterTaints) {
		got, err := l.read(t.Context())
		assert.NoError(t, err)
		out <- got
	}
	first, second := make(chan map[string]map[string]model.ClusterTaints, 1), make(chan map[string]map[string]model.ClusterTaints, 1)
	go read(first)
	<-entered // the first round's list is in flight
	state.Store(clusterObject(model.InferenceClustersResource, model.KindInferenceCluster, "worker-a", "2", maintJSON))
	go read(second)
	require.Eventually(t, func() bool { // the second caller waits for the next round
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.next != nil
	}, 10*time.Second, time.Millisecond)
	close(release)
	assert.Empty(t, (<-first)[model.KindInferenceCluster]["worker-a"].Taints, "the first round began before the taint")
	assert.Equal(t, []weights.Taint{maint}, (<-second)[model.KindInferenceCluster]["worker-a"].Taints, "the second call's round began after it")
	assert.Equal(t, int32(2), lists.Load())
}
