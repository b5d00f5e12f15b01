package integration

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

const (
	waitTimeout = 30 * time.Second
	tick        = 25 * time.Millisecond
	gatewayName = "global"
	service     = "chat"
)

// seedEntries is the seed's example: chat on worker-a and worker-b with weight 1 each.
func seedEntries() []v1beta1.TrafficMapEntry {
	return []v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1, Healthy: true},
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// fixture is one test's namespace with a Gateway served by the stand-in gateway controller,
// the seed's InferenceService and, once created, its TrafficMap.
type fixture struct {
	t       *testing.T
	ns      string
	gw      *standin.Gateway
	routing standin.Routing
	pub     *runningPublisher
	isvcUID types.UID
}

// newFixture creates the namespace, the Gateway and the InferenceService chat, and starts
// the stand-in gateway controller. The publisher is started separately.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, ns: newNamespace(t), routing: standin.Routing{Client: tmc}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	f.gw, err = standin.StartGateway(ctx, kube, gw, f.ns, gatewayName, t.Logf)
	require.NoError(t, err)
	f.isvcUID = f.createISVC(service, nil)
	return f
}

// startPublisher runs the publisher in-process, scoped to the fixture's namespace.
func (f *fixture) startPublisher(mutate ...func(*publish.Config)) *runningPublisher {
	f.t.Helper()
	f.pub = startPublisher(f.t, f.publisherConfig(mutate...))
	return f.pub
}

// publisherConfig is the fixture's publisher configuration (startPublisher uses it).
func (f *fixture) publisherConfig(mutate ...func(*publish.Config)) publish.Config {
	cfg := publish.Config{
		Namespaces:           []string{f.ns},
		Gateway:              types.NamespacedName{Namespace: f.ns, Name: gatewayName},
		HostTemplate:         "{{.Service}}.{{.Namespace}}.example.com",
		RequireRouteAccepted: true,
		ResyncPeriod:         time.Minute,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	return cfg
}

// runningPublisher is a publisher running in a goroutine.
type runningPublisher struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	// xdsAddr is where its xDS server listens, nil with the xDS sink off.
	xdsAddr net.Addr
	pub     *publish.Publisher
}

func startPublisher(t *testing.T, cfg publish.Config) *runningPublisher {
	t.Helper()
	return startPublisherWith(t, cfg, restCfg, zaptest.NewLogger(t).Named("publish"))
}

// startPublisherWith runs the publisher with its own API identity and logger.
func startPublisherWith(t *testing.T, cfg publish.Config, rc *rest.Config, log *zap.Logger) *runningPublisher {
	t.Helper()
	p, err := publish.New(cfg, rc, log)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningPublisher{cancel: cancel, done: make(chan error, 1), xdsAddr: p.XDSAddr(), pub: p}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the publisher and waits until Run has returned.
func (r *runningPublisher) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			assert.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Error("publisher did not stop")
		}
	})
}

func (f *fixture) createISVC(name string, annotations map[string]string) types.UID {
	f.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1",
		"kind":       "InferenceService",
		"metadata":   map[string]any{"name": name, "namespace": f.ns},
		"spec":       map[string]any{"placement": map[string]any{"mode": "All", "clusterSelector": map[string]any{}}},
	}}
	u.SetAnnotations(annotations)
	out, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Create(ctxFor(f.t), u, metav1.CreateOptions{})
	require.NoError(f.t, err)
	return out.GetUID()
}

// setAnnotation sets (or, with remove, deletes) one annotation on the InferenceService.
func (f *fixture) setAnnotation(name, key, value string, remove bool) {
	f.t.Helper()
	var v any = value
	if remove {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	require.NoError(f.t, err)
	_, err = dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Patch(ctxFor(f.t), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(f.t, err)
}

// drain writes the drain annotation as a whole.
func (f *fixture) drain(value string) { f.setAnnotation(service, "ome.io/traffic-drain", value, false) }

func (f *fixture) createMap(entries []v1beta1.TrafficMapEntry) *v1beta1.TrafficMap {
	f.t.Helper()
	tm, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Create(ctxFor(f.t), &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: f.ns},
		Spec:       v1beta1.TrafficMapSpec{Service: service, Mode: "All", Entries: entries, ObservedISVCGeneration: 1},
	}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	return tm
}

// updateMap changes the map's spec as the routing controller would and returns the stored map.
func (f *fixture) updateMap(change func(*v1beta1.TrafficMapSpec)) *v1beta1.TrafficMap {
	f.t.Helper()
	out, err := f.routing.UpdateSpec(ctxFor(f.t), f.ns, service, change)
	require.NoError(f.t, err)
	return out
}

func (f *fixture) getMap() *v1beta1.TrafficMap {
	f.t.Helper()
	tm, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Get(ctxFor(f.t), service, metav1.GetOptions{})
	require.NoError(f.t, err)
	return tm
}

// published returns the Published condition, or nil.
func published(tm *v1beta1.TrafficMap) *metav1.Condition {
	return meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
}

// waitPublished waits until Published is True at the map's current generation, with
// status.published agreeing, and returns the map.
func (f *fixture) waitPublished() *v1beta1.TrafficMap {
	f.t.Helper()
	return f.waitCondition(metav1.ConditionTrue, string(model.ReasonPublished))
}

// waitPublishedWith waits until Published is True at the current generation with a message
// containing want.
func (f *fixture) waitPublishedWith(want string) *v1beta1.TrafficMap {
	f.t.Helper()
	return f.waitCondition(metav1.ConditionTrue, string(model.ReasonPublished), want)
}

// waitCondition waits until Published has this status and reason at the current generation,
// with a message containing every string in want.
func (f *fixture) waitCondition(status metav1.ConditionStatus, reason string, want ...string) *v1beta1.TrafficMap {
	f.t.Helper()
	var tm *v1beta1.TrafficMap
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		got, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Get(context.Background(), service, metav1.GetOptions{})
		require.NoError(c, err)
		cond := published(got)
		require.NotNil(c, cond, "no Published condition")
		assert.Equal(c, got.Generation, cond.ObservedGeneration, "observedGeneration")
		assert.Equal(c, status, cond.Status, "status (message: %s)", cond.Message)
		assert.Equal(c, reason, cond.Reason, "reason (message: %s)", cond.Message)
		assert.Equal(c, status == metav1.ConditionTrue, got.Status.Published, "status.published moves with the condition")
		for _, w := range want {
			assert.Contains(c, cond.Message, w)
		}
		tm = got
	}, waitTimeout, tick)
	return tm
}

// route returns the publisher's HTTPRoute for the map, or nil when absent.
func (f *fixture) route() *gwapiv1.HTTPRoute {
	f.t.Helper()
	r, err := gw.GatewayV1().HTTPRoutes(f.ns).Get(ctxFor(f.t), httproute.RouteName(service), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(f.t, err)
	return r
}

// routeWeights returns the stored route's backend weights keyed by cluster, whatever the
// backend kind names its objects (ExternalName Service or Envoy Gateway Backend:
// httproute.ServiceName; endpointslice: httproute.SelectorlessServiceName).
func (f *fixture) routeWeights(clusters ...string) map[string]int32 {
	f.t.Helper()
	r := f.route()
	require.NotNil(f.t, r, "route exists")
	byService := map[string]string{}
	for _, c := range clusters {
		byService[httproute.ServiceName(f.ns, service, c)] = c
		byService[httproute.SelectorlessServiceName(f.ns, service, c)] = c
	}
	out := map[string]int32{}
	for _, rule := range r.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			cluster, ok := byService[string(ref.Name)]
			require.True(f.t, ok, "backend %s names a known cluster", ref.Name)
			require.NotNil(f.t, ref.Weight)
			out[cluster] = *ref.Weight
		}
	}
	return out
}

// ownedServices lists the backend Services the publisher owns for the map.
func (f *fixture) ownedServices() []corev1.Service {
	f.t.Helper()
	list, err := kube.CoreV1().Services(f.ns).List(ctxFor(f.t), metav1.ListOptions{
		LabelSelector: httproute.LabelSourceName + "=" + service,
	})
	require.NoError(f.t, err)
	return list.Items
}

// events returns the reasons and messages of Events recorded on the TrafficMap.
func (f *fixture) events() []corev1.Event {
	f.t.Helper()
	list, err := kube.CoreV1().Events(f.ns).List(ctxFor(f.t), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=TrafficMap,involvedObject.name=" + service,
	})
	require.NoError(f.t, err)
	return list.Items
}
