package routesink_test

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/publish/routesink"
	"github.com/trafficmap/publisher/publish/sink"
	"github.com/trafficmap/publisher/weights"
)

// routeAPI is the HTTPRoute part of an API server for one route: server-side apply (the
// patch's labels, annotations, ownerReferences and spec), get and delete, with a resourceVersion that grows
// on every write and a generation that grows when the spec changes.
type routeAPI struct {
	mu   sync.Mutex
	rv   int
	live *gwapiv1.HTTPRoute
}

var routes = schema.GroupResource{Group: gwapiv1.GroupName, Resource: "httproutes"}

func (a *routeAPI) install(c *gwfake.Clientset) {
	c.PrependReactor("patch", "httproutes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var in gwapiv1.HTTPRoute
		if err := json.Unmarshal(action.(k8stesting.PatchAction).GetPatch(), &in); err != nil {
			return true, nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.live == nil {
			a.live = &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name, UID: "route-uid"}}
		}
		if !equality.Semantic.DeepEqual(a.live.Spec, in.Spec) {
			a.live.Generation++
		}
		a.live.Labels, a.live.Annotations, a.live.OwnerReferences, a.live.Spec = in.Labels, in.Annotations, in.OwnerReferences, in.Spec
		a.bump()
		return true, a.live.DeepCopy(), nil
	})
	c.PrependReactor("get", "httproutes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.live == nil {
			return true, nil, apierrors.NewNotFound(routes, action.(k8stesting.GetAction).GetName())
		}
		return true, a.live.DeepCopy(), nil
	})
	c.PrependReactor("delete", "httproutes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.live == nil {
			return true, nil, apierrors.NewNotFound(routes, action.(k8stesting.DeleteAction).GetName())
		}
		a.live = nil
		return true, nil, nil
	})
}

func (a *routeAPI) bump() {
	a.rv++
	a.live.ResourceVersion = strconv.Itoa(a.rv)
}

// accept is the gateway accepting the live route's current generation.
func (a *routeAPI) accept() {
	a.mu.Lock()
	defer a.mu.Unlock()
	conds := []metav1.Condition{
		{Type: string(gwapiv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: a.live.Generation},
		{Type: string(gwapiv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: "ResolvedRefs", ObservedGeneration: a.live.Generation},
	}
	a.live.Status.Parents = []gwapiv1.RouteParentStatus{{ParentRef: a.live.Spec.ParentRefs[0], ControllerName: "example.com/gateway", Conditions: conds}}
	a.bump()
}

func (a *routeAPI) get() *gwapiv1.HTTPRoute {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live == nil {
		return nil
	}
	return a.live.DeepCopy()
}

// delayedStore is an informer cache that holds what the API held when deliver was last
// called.
type delayedStore struct {
	api   *routeAPI
	mu    sync.Mutex
	route *gwapiv1.HTTPRoute
}

func (s *delayedStore) deliver() {
	route := s.api.get()
	s.mu.Lock()
	s.route = route
	s.mu.Unlock()
}

func (s *delayedStore) Route(string, string) (*gwapiv1.HTTPRoute, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.route, nil
}

func (s *delayedStore) Services(httproute.Source) ([]*corev1.Service, error) { return nil, nil }

var cfg = httproute.Config{Gateway: types.NamespacedName{Namespace: "prod", Name: "global"}}

func plan(t *testing.T, drains ...weights.Drain) *sink.Plan {
	t.Helper()
	res, err := weights.Compute(weights.Input{Drains: drains, Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1},
	}})
	require.NoError(t, err)
	return &sink.Plan{Namespace: "prod", Name: "chat", UID: "tm-uid", Generation: 1, Service: "chat",
		GlobalHost: "chat.example.com", Result: res, Drains: drains}
}

// planWeights are the route weights p stands for.
func planWeights(t *testing.T, p *sink.Plan) map[string]int32 {
	t.Helper()
	d, err := httproute.Build(cfg, httproute.Source{Namespace: p.Namespace, Name: p.Name, Service: p.Service, GlobalHost: p.GlobalHost},
		p.Result, httproute.Inputs{Generation: p.Generation, Drains: p.Drains})
	require.NoError(t, err)
	w, _ := httproute.RouteWeights(d.Route)
	return w
}

func newSink(t *testing.T, requireAccepted bool) (*routesink.Sink, *routeAPI, *delayedStore) {
	t.Helper()
	gw := gwfake.NewClientset()
	api := &routeAPI{}
	api.install(gw)
	store := &delayedStore{api: api}
	writer := httproute.NewWriter(kubefake.NewClientset(), gw, "trafficmap-publisher")
	return routesink.New(routesink.Config{Route: cfg, RequireAccepted: requireAccepted}, writer, store), api, store
}

// TestApplyStaleCache replays drain → undrain → re-drain faster than the route informer:
// the sink never says the route is in place (or carried) for weights the live route does
// not hold, and once the cache catches up it confirms the live weights.
func TestApplyStaleCache(t *testing.T) {
	for _, requireAccepted := range []bool{true, false} {
		t.Run("requireAccepted="+strconv.FormatBool(requireAccepted), func(t *testing.T) {
			s, api, store := newSink(t, requireAccepted)
			undrained := plan(t)
			drained := plan(t, weights.Drain{ID: "m-a", Cluster: "worker-a", Reason: "maintenance"})
			apply := func(p *sink.Plan) sink.Confirmation {
				t.Helper()
				c, err := s.Apply(t.Context(), p)
				require.NoError(t, err)
				live, _ := httproute.RouteWeights(api.get())
				if c.State == sink.InPlace {
					assert.Equal(t, planWeights(t, p), live, "in place for weights the live route does not hold")
				}
				if s.Carries(p) {
					assert.Equal(t, planWeights(t, p), live, "carries weights the live route does not hold")
				}
				return c
			}

			apply(undrained)
			api.accept()
			store.deliver() // the cache is current: the undrained route, accepted
			assert.Equal(t, sink.InPlace, apply(undrained).State)

			apply(drained) // drain; the cache keeps the undrained route from here on
			api.accept()
			assert.False(t, s.Carries(undrained), "the live route holds the drained weights")
			undrainedConf := apply(undrained) // undrain: must be written, the cache's copy is stale
			assert.Equal(t, planWeights(t, undrained), func() map[string]int32 { w, _ := httproute.RouteWeights(api.get()); return w }())
			if requireAccepted {
				assert.Equal(t, sink.Pending, undrainedConf.State, undrainedConf.Message)
			}
			apply(drained) // re-drain
			api.accept()
			store.deliver()
			rv := api.get().ResourceVersion
			c := apply(drained)
			assert.Equal(t, sink.InPlace, c.State, c.Message)
			assert.Equal(t, rv, api.get().ResourceVersion, "the route already holds the drained weights: no write")
		})
	}
}

// TestDeleteBeforeCache removes a route the cache has not delivered yet.
func TestDeleteBeforeCache(t *testing.T) {
	s, api, _ := newSink(t, false)
	_, err := s.Apply(t.Context(), plan(t))
	require.NoError(t, err)
	require.NotNil(t, api.get())
	n, err := s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Nil(t, api.get())
}

// The route the sink writes names the plan's TrafficMap as its owner (by UID), so the
// garbage collector deletes it with the map.
func TestApplyWritesOwnerReference(t *testing.T) {
	s, api, _ := newSink(t, false)
	p := plan(t)
	_, err := s.Apply(t.Context(), p)
	require.NoError(t, err)
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap", Name: p.Name, UID: types.UID(p.UID)}},
		api.get().OwnerReferences)
}
