package httproute_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// liveStore reads the fake API directly: a cache that is never behind.
type liveStore struct {
	kube *kubefake.Clientset
	gw   *gwfake.Clientset
}

func (s liveStore) Route(namespace, name string) (*gwapiv1.HTTPRoute, error) {
	r, err := s.gw.GatewayV1().HTTPRoutes(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return r, err
}

// RoutesSeen implements httproute.Store: a live read holds every write.
func (liveStore) RoutesSeen(string) string { return "" }

// ServicesSeen implements httproute.Store, as RoutesSeen.
func (liveStore) ServicesSeen(string) string { return "" }

func (s liveStore) Services(src httproute.Source) ([]*corev1.Service, error) {
	list, err := s.kube.CoreV1().Services(src.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Service
	for i := range list.Items {
		if httproute.Owned(list.Items[i].Labels, src) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// kindFixture is a Writer with every backend kind over fake clients, and a switch for the
// gateway's verdict on the stored route.
type kindFixture struct {
	kube    *kubefake.Clientset
	gw      *gwfake.Clientset
	dyn     *dynfake.FakeDynamicClient
	w       *httproute.Writer
	settled bool
}

func newKindFixture(t *testing.T) *kindFixture {
	t.Helper()
	f := &kindFixture{kube: kubefake.NewClientset(), gw: gwfake.NewClientset()}
	f.dyn = dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{httproute.EnvoyBackendGVR: "BackendList"})
	// The fake dynamic client's tracker does not create on apply: do it as the API server.
	f.dyn.PrependReactor("patch", "backends", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pa := a.(clienttesting.PatchAction)
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(pa.GetPatch()); err != nil {
			return true, nil, err
		}
		tracker := f.dyn.Tracker()
		if _, err := tracker.Get(httproute.EnvoyBackendGVR, pa.GetNamespace(), pa.GetName()); apierrors.IsNotFound(err) {
			return true, obj, tracker.Create(httproute.EnvoyBackendGVR, obj, pa.GetNamespace())
		}
		return true, obj, tracker.Update(httproute.EnvoyBackendGVR, obj, pa.GetNamespace())
	})
	f.w = httproute.NewWriter(f.kube, f.gw, "trafficmap-publisher").
		WithBackendKinds(f.dyn, func() bool { return true }, func(*gwapiv1.HTTPRoute) bool { return f.settled })
	return f
}

func (f *kindFixture) sync(t *testing.T, kind httproute.BackendKind) *httproute.Desired {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: seed()})
	require.NoError(t, err)
	d, err := httproute.Build(prodConfig, prodSource, res, httproute.Inputs{Generation: 1, Backends: httproute.Backends{Kind: kind,
		Addresses: map[string][]netip.Addr{
			"chat.worker-a.example.com": {netip.MustParseAddr("198.18.0.1")},
			"chat.worker-b.example.com": {netip.MustParseAddr("198.18.0.2")},
		}}})
	require.NoError(t, err)
	_, err = f.w.Sync(t.Context(), prodSource, d, liveStore{kube: f.kube, gw: f.gw})
	require.NoError(t, err)
	return d
}

// stored lists what the API holds for the map: Services as "name type", slices and
// Backends by name, and the names the route's backendRefs point at.
func (f *kindFixture) stored(t *testing.T) (services, slicesStored, backends, refs []string) {
	t.Helper()
	ctx := t.Context()
	svcs, err := f.kube.CoreV1().Services("prod").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range svcs.Items {
		services = append(services, s.Name+" "+string(s.Spec.Type))
	}
	eps, err := f.kube.DiscoveryV1().EndpointSlices("prod").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range eps.Items {
		slicesStored = append(slicesStored, s.Name)
	}
	bes, err := f.dyn.Resource(httproute.EnvoyBackendGVR).Namespace("prod").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, b := range bes.Items {
		backends = append(backends, b.GetName())
	}
	route, err := liveStore{gw: f.gw}.Route("prod", httproute.RouteName("chat"))
	require.NoError(t, err)
	if route != nil {
		for _, r := range route.Spec.Rules[0].BackendRefs {
			refs = append(refs, string(*r.Kind)+"/"+string(r.Name))
		}
	}
	for _, l := range [][]string{services, slicesStored, backends} {
		slices.Sort(l)
	}
	return services, slicesStored, backends, refs
}

func names(d *httproute.Desired) (services, slicesWanted, backends, refs []string) {
	for _, s := range d.Services {
		services = append(services, s.Name+" "+string(s.Spec.Type))
	}
	for _, s := range d.EndpointSlices {
		slicesWanted = append(slicesWanted, s.Name)
	}
	for _, b := range d.Backends {
		backends = append(backends, b.GetName())
	}
	for _, r := range d.Route.Spec.Rules[0].BackendRefs {
		refs = append(refs, string(*r.Kind)+"/"+string(r.Name))
	}
	slices.Sort(services)
	return services, slicesWanted, backends, refs
}

// TestKindSwitchWithoutGap moves a map through every kind: at each switch the new kind's
// objects are written and the route points at them, while the old kind's objects stay
// until the gateway settled on the route; then only the new kind's objects are left.
// Delete removes every kind.
func TestKindSwitchWithoutGap(t *testing.T) {
	f := newKindFixture(t)
	f.settled = true
	prev := f.sync(t, httproute.BackendExternalName)
	for _, kind := range []httproute.BackendKind{httproute.BackendEndpointSlice, httproute.BackendEnvoyGateway, httproute.BackendExternalName} {
		t.Run(string(kind), func(t *testing.T) {
			oldSvcs, oldSlices, oldBackends, _ := names(prev)

			f.settled = false
			d := f.sync(t, kind)
			svcs, sl, bes, refs := names(d)
			gotSvcs, gotSlices, gotBackends, gotRefs := f.stored(t)
			assert.Equal(t, refs, gotRefs, "the route points at the new kind")
			assert.Equal(t, sorted(append(oldSvcs, svcs...)), gotSvcs, "old and new Services while the gateway has not settled")
			assert.Equal(t, sorted(append(oldSlices, sl...)), gotSlices)
			assert.Equal(t, sorted(append(oldBackends, bes...)), gotBackends)

			f.settled = true
			f.sync(t, kind)
			gotSvcs, gotSlices, gotBackends, _ = f.stored(t)
			assert.Equal(t, svcs, gotSvcs, "only the new kind once the gateway settled")
			assert.Equal(t, sorted(sl), gotSlices)
			assert.Equal(t, sorted(bes), gotBackends)
			prev = d
		})
	}
	t.Run("delete", func(t *testing.T) {
		f.settled = false
		f.sync(t, httproute.BackendEndpointSlice)
		f.sync(t, httproute.BackendEnvoyGateway) // objects of three kinds are stored now
		_, err := f.w.Delete(t.Context(), prodSource, liveStore{kube: f.kube, gw: f.gw})
		require.NoError(t, err)
		svcs, sl, bes, refs := f.stored(t)
		assert.Empty(t, refs, "no route")
		assert.Empty(t, svcs)
		assert.Empty(t, sl)
		assert.Empty(t, bes)
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s) == 0 {
		return nil
	}
	return s
}

// fakeResolver answers from a table: addresses and the error of the latest lookup.
type fakeResolver map[string]struct {
	addrs []netip.Addr
	err   error
}

func (r fakeResolver) Resolve(_ context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	e, ok := r[host]
	if !ok {
		return nil, errors.New("not resolved yet")
	}
	return e.addrs, e.err
}

// A hostname that never resolved keeps the map unpublished (Pending, BackendUnresolved,
// naming the map, the entry and the host) and writes nothing; a failed latest lookup keeps
// the last addresses and says so; auto names the controller that chose the kind.
func TestSinkBackendKinds(t *testing.T) {
	one := []netip.Addr{netip.MustParseAddr("198.18.0.1")}
	resolver := fakeResolver{"chat.worker-a.example.com": {addrs: one}}
	s, api, _ := newSinkWith(t, httproute.SinkConfig{Route: cfg, BackendKind: httproute.BackendEndpointSlice, Resolver: resolver})
	p := plan(t)
	require.Nil(t, s.Check(p), "an unresolved hostname is not a refusal")
	c, err := s.Apply(t.Context(), p, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State)
	assert.Equal(t, model.ReasonBackendUnresolved, c.Reason)
	assert.Contains(t, c.Message, `trafficmap prod/chat entry "worker-b" endpoint host "chat.worker-b.example.com"`)
	assert.Nil(t, api.get(), "no route written")
	assert.False(t, s.Carries(p))

	resolver["chat.worker-b.example.com"] = struct {
		addrs []netip.Addr
		err   error
	}{addrs: one, err: errors.New("lookup timed out")}
	c, err = s.Apply(t.Context(), p, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Contains(t, c.Message, "backends: endpointslice (--backend-kind)")
	assert.Contains(t, c.Message, `the last good addresses stay in the EndpointSlices (still served): entry "worker-b" host chat.worker-b.example.com (lookup timed out)`)
	assert.Equal(t, "endpointslice", api.get().Annotations[httproute.AnnotationBackendKind])

	for controller, want := range map[string]string{
		"traefik.io/gateway-controller": "backends: endpointslice (auto: controller traefik.io/gateway-controller)",
		"istio.io/gateway-controller":   "backends: service-externalname (auto: controller istio.io/gateway-controller)",
		"example.com/unknown":           "backends: service-externalname (auto: controller example.com/unknown is not in the table)",
		"":                              "backends: service-externalname (auto: the GatewayClass of gateway prod/global is not known)",
	} {
		s, _, _ := newSinkWith(t, httproute.SinkConfig{Route: cfg, BackendKind: httproute.BackendAuto, Resolver: resolver,
			ControllerNames: func(gw types.NamespacedName) (string, error) {
				assert.Equal(t, types.NamespacedName{Namespace: "prod", Name: "global"}, gw)
				return controller, nil
			}})
		c, err := s.Apply(t.Context(), p, model.Standing{})
		require.NoError(t, err)
		assert.Contains(t, c.Message, want)
	}
}

func TestKindForController(t *testing.T) {
	for _, row := range httproute.ControllerKinds {
		got, known := httproute.KindForController(row.Controller)
		assert.True(t, known)
		assert.Equal(t, row.Kind, got)
		assert.NotEqual(t, httproute.BackendAuto, got)
	}
	got, known := httproute.KindForController("example.com/gateway")
	assert.False(t, known)
	assert.Equal(t, httproute.BackendExternalName, got)
	for _, k := range httproute.BackendKinds {
		parsed, err := httproute.ParseBackendKind(string(k))
		require.NoError(t, err)
		assert.Equal(t, k, parsed)
	}
	_, err := httproute.ParseBackendKind("externalname")
	assert.ErrorContains(t, err, `unknown backend kind "externalname"`)
}

// docs/reference/backends.md shows ControllerKinds: every row, with its kind.
func TestBackendsDocTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "reference", "backends.md"))
	require.NoError(t, err)
	for _, row := range httproute.ControllerKinds {
		assert.Contains(t, string(doc), fmt.Sprintf("| `%s` | %s | `%s` |", row.Controller, row.Implementation, row.Kind))
	}
}
