package httproute_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
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
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// routeAPI is the HTTPRoute part of an API server for one route: server-side apply (the
// patch's labels, annotations, ownerReferences and spec), get and delete, with a resourceVersion that grows
// on every write and a generation that grows when the spec changes.
type routeAPI struct {
	mu    sync.Mutex
	rv    int
	live  *gwapiv1.HTTPRoute
	reads int // gets
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
		a.reads++
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

// version is the API's latest resourceVersion.
func (a *routeAPI) version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strconv.Itoa(a.rv)
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

// serviceAPI is the Service part of an API server: server-side apply (the patch's labels,
// ownerReferences and spec; a patch naming a UID fails with a conflict unless the live
// Service has it), get and delete (with its UID precondition), with a resourceVersion that
// grows on every write. It counts the requests the sink makes.
type serviceAPI struct {
	mu                      sync.Mutex
	rv, uids                int
	live                    map[string]*corev1.Service
	applies, deletes, reads int
}

var services = schema.GroupResource{Resource: "services"}

func (a *serviceAPI) install(c *kubefake.Clientset) {
	c.PrependReactor("patch", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var in corev1.Service
		if err := json.Unmarshal(action.(k8stesting.PatchAction).GetPatch(), &in); err != nil {
			return true, nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.applies++
		live := a.live[in.Name]
		if in.UID != "" && (live == nil || live.UID != in.UID) {
			return true, nil, apierrors.NewConflict(services, in.Name, errors.New("uid precondition failed"))
		}
		if live == nil {
			a.uids++
			live = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name, UID: types.UID("svc-uid-" + strconv.Itoa(a.uids))}}
			a.live[in.Name] = live
		}
		live.Labels, live.OwnerReferences, live.Spec = in.Labels, in.OwnerReferences, in.Spec
		a.bump(live)
		return true, live.DeepCopy(), nil
	})
	c.PrependReactor("get", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.reads++
		live := a.live[action.(k8stesting.GetAction).GetName()]
		if live == nil {
			return true, nil, apierrors.NewNotFound(services, action.(k8stesting.GetAction).GetName())
		}
		return true, live.DeepCopy(), nil
	})
	c.PrependReactor("delete", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		del := action.(k8stesting.DeleteAction)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.deletes++
		live := a.live[del.GetName()]
		if live == nil {
			return true, nil, apierrors.NewNotFound(services, del.GetName())
		}
		if pre := del.GetDeleteOptions().Preconditions; pre != nil && pre.UID != nil && *pre.UID != live.UID {
			return true, nil, apierrors.NewConflict(services, del.GetName(), errors.New("uid precondition failed"))
		}
		delete(a.live, del.GetName())
		return true, nil, nil
	})
}

// version is the API's latest resourceVersion.
func (a *serviceAPI) version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strconv.Itoa(a.rv)
}

func (a *serviceAPI) bump(svc *corev1.Service) {
	a.rv++
	svc.ResourceVersion = strconv.Itoa(a.rv)
}

// edit is another client changing the live Service name.
func (a *serviceAPI) edit(name string, change func(*corev1.Service)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	change(a.live[name])
	a.bump(a.live[name])
}

// remove is another client deleting the live Service name.
func (a *serviceAPI) remove(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.live, name)
}

// get returns the live Service name, nil when there is none.
func (a *serviceAPI) get(name string) *corev1.Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live[name] == nil {
		return nil
	}
	return a.live[name].DeepCopy()
}

// names returns the live Services' names, sorted.
func (a *serviceAPI) names() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.live))
}

// writes counts the applies and deletes.
func (a *serviceAPI) writes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applies + a.deletes
}

func (a *serviceAPI) snapshot() []*corev1.Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*corev1.Service, 0, len(a.live))
	for _, name := range slices.Sorted(maps.Keys(a.live)) {
		out = append(out, a.live[name].DeepCopy())
	}
	return out
}

// delayedStore is an informer cache that holds what the API held when deliver was last
// called.
type delayedStore struct {
	api      *routeAPI
	svcAPI   *serviceAPI
	mu       sync.Mutex
	route    *gwapiv1.HTTPRoute
	services []*corev1.Service
	// routeSeen and svcSeen are the APIs' resourceVersions at the last deliver.
	routeSeen, svcSeen string
}

// deliver is the informers catching up with the API: the route and the Services.
func (s *delayedStore) deliver() {
	route, svcs := s.api.get(), s.svcAPI.snapshot()
	routeSeen, svcSeen := s.api.version(), s.svcAPI.version()
	s.mu.Lock()
	s.route, s.services, s.routeSeen, s.svcSeen = route, svcs, routeSeen, svcSeen
	s.mu.Unlock()
}

func (s *delayedStore) RoutesSeen(string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routeSeen
}

func (s *delayedStore) ServicesSeen(string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.svcSeen
}

func (s *delayedStore) Route(string, string) (*gwapiv1.HTTPRoute, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.route, nil
}

func (s *delayedStore) Services(src httproute.Source) ([]*corev1.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Service
	for _, svc := range s.services {
		if httproute.Owned(svc.Labels, src) {
			out = append(out, svc)
		}
	}
	return out, nil
}

var cfg = httproute.Config{Gateway: types.NamespacedName{Namespace: "prod", Name: "global"}}

var (
	entryA = weights.Entry{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1}
	entryB = weights.Entry{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1}
)

func plan(t *testing.T, drains ...weights.Drain) *model.Plan {
	t.Helper()
	return planOf(t, []weights.Entry{entryA, entryB}, drains...)
}

// planOf is the plan of map prod/chat with entries.
func planOf(t *testing.T, entries []weights.Entry, drains ...weights.Drain) *model.Plan {
	t.Helper()
	res, err := weights.Compute(weights.Input{Drains: drains, Entries: entries})
	require.NoError(t, err)
	return &model.Plan{Namespace: "prod", Name: "chat", UID: "tm-uid", Generation: 1, Service: "chat",
		GlobalHost: "chat.example.com", Result: res, Drains: drains}
}

// planWeights are the route weights p stands for.
func planWeights(t *testing.T, p *model.Plan) map[string]int32 {
	t.Helper()
	d, err := httproute.Build(cfg, httproute.Source{Namespace: p.Namespace, Name: p.Name, Service: p.Service, GlobalHost: p.GlobalHost},
		p.Result, httproute.Inputs{Generation: p.Generation, Drains: p.Drains})
	require.NoError(t, err)
	w, _ := httproute.RouteWeights(d.Route)
	return w
}

func newSink(t *testing.T, requireAccepted bool) (*httproute.Sink, *routeAPI, *delayedStore) {
	t.Helper()
	return newSinkWith(t, httproute.SinkConfig{Route: cfg, RequireAccepted: requireAccepted})
}

func newSinkWith(t *testing.T, sc httproute.SinkConfig) (*httproute.Sink, *routeAPI, *delayedStore) {
	t.Helper()
	gw := gwfake.NewClientset()
	api := &routeAPI{rv: 1}
	api.install(gw)
	kube := kubefake.NewClientset()
	svcAPI := &serviceAPI{rv: 1, live: map[string]*corev1.Service{}}
	svcAPI.install(kube)
	store := &delayedStore{api: api, svcAPI: svcAPI, routeSeen: "1", svcSeen: "1"} // listed before any write
	writer := httproute.NewWriter(kube, gw, "trafficmap-publisher")
	return httproute.NewSink(sc, writer, store), api, store
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
			apply := func(p *model.Plan) model.Confirmation {
				t.Helper()
				c, err := s.Apply(t.Context(), p, model.Standing{})
				require.NoError(t, err)
				live, _ := httproute.RouteWeights(api.get())
				if c.State == model.InPlace {
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
			assert.Equal(t, model.InPlace, apply(undrained).State)

			apply(drained) // drain; the cache keeps the undrained route from here on
			api.accept()
			assert.False(t, s.Carries(undrained), "the live route holds the drained weights")
			undrainedConf := apply(undrained) // undrain: must be written, the cache's copy is stale
			assert.Equal(t, planWeights(t, undrained), func() map[string]int32 { w, _ := httproute.RouteWeights(api.get()); return w }())
			if requireAccepted {
				assert.Equal(t, model.Pending, undrainedConf.State, undrainedConf.Message)
			}
			apply(drained) // re-drain
			api.accept()
			store.deliver()
			rv := api.get().ResourceVersion
			c := apply(drained)
			assert.Equal(t, model.InPlace, c.State, c.Message)
			assert.Equal(t, rv, api.get().ResourceVersion, "the route already holds the drained weights: no write")
		})
	}
}

// TestDeleteBeforeCache removes a route and Services the cache has not delivered yet.
func TestDeleteBeforeCache(t *testing.T) {
	s, api, store := newSink(t, false)
	_, err := s.Apply(t.Context(), plan(t), model.Standing{})
	require.NoError(t, err)
	require.NotNil(t, api.get())
	require.Len(t, store.svcAPI.names(), 2)
	n, err := s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "the route and both Services")
	assert.Nil(t, api.get())
	assert.Empty(t, store.svcAPI.names())
	assert.Empty(t, httproute.ExpectedServices(s, "prod", "chat"), "a deleted map's expectations are forgotten")
}

// The route the sink writes names the plan's TrafficMap as its owner (by UID), so the
// garbage collector deletes it with the map.
func TestApplyWritesOwnerReference(t *testing.T) {
	s, api, _ := newSink(t, false)
	p := plan(t)
	_, err := s.Apply(t.Context(), p, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap", Name: p.Name, UID: types.UID(p.UID)}},
		api.get().OwnerReferences)
}

// The backend Services of plan(t): one per cluster.
var (
	svcA = httproute.ServiceName("prod", "chat", "worker-a")
	svcB = httproute.ServiceName("prod", "chat", "worker-b")
)

// applied applies p and returns the writes the sink reports.
func applied(t *testing.T, s *httproute.Sink, p *model.Plan) int {
	t.Helper()
	c, err := s.Apply(t.Context(), p, model.Standing{})
	require.NoError(t, err)
	return c.Writes
}

// expectedLive is what ExpectedServices reports when the sink expects the live names.
func expectedLive(api *serviceAPI, names ...string) []string {
	out := make([]string, 0, len(names))
	for _, name := range names {
		out = append(out, name+"@"+api.get(name).ResourceVersion)
	}
	slices.Sort(out)
	return out
}

// A map reconciled again before the Service informer delivers the sink's own writes writes
// nothing: the Services it compares with are its writes, not the cache's missing or older
// copies. It reads nothing back either (issue 47: a cold start read back thousands of the
// objects it had just created): the cache has not received events up to the writes yet, so
// its lack of them says nothing.
func TestServicesNotReappliedWhileCacheLags(t *testing.T) {
	movedA := entryA
	movedA.Endpoint = "https://chat-v2.worker-a.example.com"
	tests := []struct {
		name     string
		setup    func(t *testing.T, s *httproute.Sink, store *delayedStore)
		reads    int
		expected []string // the Services still expected afterwards: those the cache lags on
	}{
		{"cache empty", func(t *testing.T, s *httproute.Sink, _ *delayedStore) {
			assert.Equal(t, 3, applied(t, s, plan(t)), "two Services and the route")
		}, 0, []string{svcA, svcB}},
		{"cache older", func(t *testing.T, s *httproute.Sink, store *delayedStore) {
			applied(t, s, planOf(t, []weights.Entry{movedA, entryB}))
			store.deliver()
			before := store.svcAPI.get(svcA).ResourceVersion
			applied(t, s, plan(t)) // worker-a's Service changes; the cache keeps the older one
			require.NotEqual(t, before, store.svcAPI.get(svcA).ResourceVersion)
		}, 0, []string{svcA}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, store := newSink(t, false)
			tc.setup(t, s, store)
			writes, reads := store.svcAPI.writes(), store.svcAPI.reads
			assert.Equal(t, 0, applied(t, s, plan(t)))
			assert.Equal(t, writes, store.svcAPI.writes(), "no Service written again")
			assert.Equal(t, tc.reads, store.svcAPI.reads-reads, "Services read through the API")
			assert.Equal(t, expectedLive(store.svcAPI, tc.expected...), httproute.ExpectedServices(s, "prod", "chat"))
		})
	}
}

// Once the cache holds the sink's writes, the expectations are met and dropped.
func TestServiceExpectationsDroppedWhenCacheCatchesUp(t *testing.T) {
	s, _, store := newSink(t, false)
	applied(t, s, plan(t))
	assert.Equal(t, expectedLive(store.svcAPI, svcA, svcB), httproute.ExpectedServices(s, "prod", "chat"))
	store.deliver()
	reads := store.svcAPI.reads
	assert.Equal(t, 0, applied(t, s, plan(t)))
	assert.Empty(t, httproute.ExpectedServices(s, "prod", "chat"))
	assert.Equal(t, reads, store.svcAPI.reads, "the cache tells")
}

// A Service changed or deleted by someone else after the sink wrote it is judged from what
// is stored now: from the cache once it holds the newer Service (re-applied only when the
// publisher's fields differ), through the API while the cache cannot tell.
func TestServiceChangedAfterExpectation(t *testing.T) {
	tests := []struct {
		name   string
		change func(store *delayedStore)
		writes int
	}{
		{"spec changed, cache newer", func(store *delayedStore) {
			store.svcAPI.edit(svcA, func(svc *corev1.Service) { svc.Spec.ExternalName = "elsewhere.example.com" })
			store.deliver()
		}, 1},
		{"foreign annotation added, cache newer", func(store *delayedStore) {
			store.svcAPI.edit(svcA, func(svc *corev1.Service) { svc.Annotations = map[string]string{"note.example.com/ticket": "OPS-1"} })
			store.deliver()
		}, 0},
		{"deleted, cache shows it gone", func(store *delayedStore) {
			store.deliver()
			store.svcAPI.remove(svcA)
			store.deliver()
		}, 1},
		{"deleted before the cache held it, known once the cache passed the write", func(store *delayedStore) {
			store.svcAPI.remove(svcA)
			store.deliver()
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, store := newSink(t, false)
			applied(t, s, plan(t))
			want := store.svcAPI.get(svcA).Spec
			tc.change(store)
			assert.Equal(t, tc.writes, applied(t, s, plan(t)))
			require.NotNil(t, store.svcAPI.get(svcA))
			assert.Equal(t, want, store.svcAPI.get(svcA).Spec)
		})
	}
}

// The route, as the Services: while the route informer has not received the sink's write,
// the write is the route the sink judges from, without reading it back; once the cache has
// received events past the write and does not hold the route (deleted behind it), a read
// tells, and the route is written again.
func TestRouteNotReadBackWhileCacheLags(t *testing.T) {
	s, api, store := newSink(t, false)
	assert.Equal(t, 3, applied(t, s, plan(t)))
	assert.Equal(t, 0, applied(t, s, plan(t)), "its own write is the newest known")
	assert.Zero(t, api.reads, "nothing read back")

	api.mu.Lock()
	api.live = nil // deleted by someone else
	api.rv++
	api.mu.Unlock()
	assert.Equal(t, 0, applied(t, s, plan(t)), "the cache is behind: nothing known yet")
	store.deliver()
	assert.Equal(t, 1, applied(t, s, plan(t)), "past the write, the cache lacks it: read, and written again")
	assert.Equal(t, 1, api.reads)
	require.NotNil(t, api.get())
}

// A Service no longer desired is deleted once, whether the cache holds it or only the
// sink's expectation does; it is not deleted again while the cache still holds it, and
// when it is desired again it is created again (the pruned one is never taken for live).
func TestPruneWhileCacheLags(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run("cached="+strconv.FormatBool(cached), func(t *testing.T) {
			s, api, store := newSink(t, false)
			two, one := plan(t), planOf(t, []weights.Entry{entryA})
			assert.Equal(t, 3, applied(t, s, two))
			if cached {
				store.deliver()
			}
			assert.Equal(t, 2, applied(t, s, one), "the route and the pruned Service")
			assert.Equal(t, []string{svcA}, store.svcAPI.names())
			assert.Equal(t, 1, store.svcAPI.deletes)

			assert.Equal(t, 0, applied(t, s, one), "pruned once")
			assert.Equal(t, 1, store.svcAPI.deletes)

			assert.Equal(t, 2, applied(t, s, two), "the Service created again and the route")
			assert.Equal(t, []string{svcA, svcB}, store.svcAPI.names())
			w, _ := httproute.RouteWeights(api.get())
			assert.Equal(t, planWeights(t, two), w)

			store.deliver()
			assert.Equal(t, 0, applied(t, s, two))
			assert.Empty(t, httproute.ExpectedServices(s, "prod", "chat"))
		})
	}
}

// The teardown: a map being deleted gets its stored route at weight 0, whatever the
// no-positive policy, and none created when none is stored; Retire removes the route and
// its Services.
func TestFinalizingAndRetire(t *testing.T) {
	s, api, store := newSinkWith(t, httproute.SinkConfig{Route: cfg, RetainLastPositive: true})
	zero := model.Zeroed(*plan(t))
	finalizing := model.Standing{Finalizing: true}
	c, err := s.Apply(t.Context(), &zero, finalizing)
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, c.Message)
	assert.Nil(t, api.get(), "nothing is created for a map being deleted")

	_, err = s.Apply(t.Context(), plan(t), model.Standing{})
	require.NoError(t, err)
	c, err = s.Apply(t.Context(), &zero, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.ReasonLastPositiveRetained, c.Reason, "the policy keeps the last positive weights while publishing")
	c, err = s.Apply(t.Context(), &zero, finalizing)
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, c.Message)
	w, positive := httproute.RouteWeights(api.get())
	assert.False(t, positive, "the teardown writes the zeros: %v", w)
	assert.Equal(t, planWeights(t, &zero), w)

	c, err = s.Retire(t.Context(), types.NamespacedName{Namespace: "prod", Name: "chat"})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Equal(t, 3, c.Writes, "the route and both Services")
	assert.Nil(t, api.get())
	assert.Empty(t, store.svcAPI.names())
}
