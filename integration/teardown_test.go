package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// routeVersionSeen is one version of the map's route a watch delivered.
type routeVersionSeen struct {
	deleted  bool
	weights  []int32 // the backendRefs' weights, in order
	accepted bool    // the gateway accepted this very generation
}

func (v routeVersionSeen) String() string {
	if v.deleted {
		return "deleted"
	}
	return fmt.Sprintf("weights %v accepted %t", v.weights, v.accepted)
}

// routeVersions records every version of the fixture's route a watch delivers.
type routeVersions struct {
	mu   sync.Mutex
	seen []routeVersionSeen
}

func (f *fixture) watchRoute() *routeVersions {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	w, err := gw.GatewayV1().HTTPRoutes(f.ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(f.t, err)
	rw := &routeVersions{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			route, ok := ev.Object.(*gwapiv1.HTTPRoute)
			if !ok || route.Name != httproute.RouteName(service) {
				continue
			}
			v := routeVersionSeen{deleted: ev.Type == watch.Deleted}
			for _, r := range route.Spec.Rules {
				for _, b := range r.BackendRefs {
					v.weights = append(v.weights, *b.Weight)
				}
			}
			for _, p := range route.Status.Parents {
				c := meta.FindStatusCondition(p.Conditions, string(gwapiv1.RouteConditionAccepted))
				v.accepted = v.accepted || c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == route.Generation
			}
			rw.mu.Lock()
			rw.seen = append(rw.seen, v)
			rw.mu.Unlock()
		}
	}()
	return rw
}

func (rw *routeVersions) versions() []routeVersionSeen {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return slices.Clone(rw.seen)
}

// zeroAcceptedBeforeDeleted reports whether the route was deleted, and a version with every
// weight 0 that the gateway accepted was seen before.
func zeroAcceptedBeforeDeleted(seen []routeVersionSeen) (zeroAccepted, deleted bool) {
	for _, v := range seen {
		if v.deleted {
			return zeroAccepted, true
		}
		if v.accepted && len(v.weights) > 0 && !slices.ContainsFunc(v.weights, func(w int32) bool { return w != 0 }) {
			zeroAccepted = true
		}
	}
	return zeroAccepted, false
}

// removalClient is a protocol-level gRPC-flavour ADS client subscribed to the map's names
// (as grpc-go is once it dialed the map). It ACKs every response, except while frozen (it
// keeps the latest of each type unanswered until thawed), and it holds the first listener
// response without the map's listener after one with it (the removal), and any listener
// response after it, until released.
type removalClient struct {
	mu       sync.Mutex
	stream   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     string
	names    map[string][]string
	frozen   bool
	unacked  map[string]*discoveryv3.DiscoveryResponse
	listened bool // a listener response carried the map's listener
	removal  *discoveryv3.DiscoveryResponse
	released bool
}

func startRemovalClient(t *testing.T, r *runningPublisher, nodeID string, names map[string][]string) *removalClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := adsClient(t, r).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	c := &removalClient{stream: stream, node: nodeID, names: names, unacked: map[string]*discoveryv3.DiscoveryResponse{}}
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: grpcNode(nodeID), TypeUrl: typ, ResourceNames: names[typ]}))
	}
	go func() {
		for resp := range xdstest.Stream(stream.Recv) {
			c.mu.Lock()
			switch {
			case resp.GetTypeUrl() == resource.ListenerType && c.hasListener(resp):
				c.listened = true
				c.answer(resp)
			case resp.GetTypeUrl() == resource.ListenerType && c.listened && !c.released:
				c.removal = resp // held (the latest one) until release
			default:
				c.answer(resp)
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// hasListener reports whether resp carries the map's listener.
func (c *removalClient) hasListener(resp *discoveryv3.DiscoveryResponse) bool {
	for _, a := range resp.GetResources() {
		var l listenerv3.Listener
		if a.UnmarshalTo(&l) == nil && slices.Contains(c.names[resource.ListenerType], l.GetName()) {
			return true
		}
	}
	return false
}

// answer ACKs resp, or keeps it while frozen; c.mu must be held.
func (c *removalClient) answer(resp *discoveryv3.DiscoveryResponse) {
	if c.frozen {
		c.unacked[resp.GetTypeUrl()] = resp
		return
	}
	c.ack(resp)
}

// ack answers resp; c.mu must be held (a stream's Send is not safe for concurrent use).
func (c *removalClient) ack(resp *discoveryv3.DiscoveryResponse) {
	_ = c.stream.Send(&discoveryv3.DiscoveryRequest{Node: grpcNode(c.node), TypeUrl: resp.GetTypeUrl(),
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: c.names[resp.GetTypeUrl()]})
}

func (c *removalClient) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

func (c *removalClient) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = false
	for typ, resp := range c.unacked {
		c.ack(resp)
		delete(c.unacked, typ)
	}
}

// heldRemoval reports whether the client holds the response that removed the map's
// listener.
func (c *removalClient) heldRemoval() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removal != nil
}

// release ACKs the removal, and every response after it.
func (c *removalClient) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	c.ack(c.removal)
}

// waitMapGone waits until the fixture's map is gone from the API server.
func (f *fixture) waitMapGone() {
	f.t.Helper()
	require.EventuallyWithT(f.t, func(c *assert.CollectT) {
		_, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Get(context.Background(), service, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "map gone: %v", err)
	}, waitTimeout, tick)
}

// requireHeld requires the fixture's map to be terminating and held by the finalizer.
func (f *fixture) requireHeld(msg string) *v1beta1.TrafficMap {
	f.t.Helper()
	tm := f.getMap()
	require.NotNil(f.t, tm.DeletionTimestamp, msg)
	require.Contains(f.t, tm.Finalizers, model.Finalizer, msg)
	return tm
}

// Deleting a published map tears it down in order: the finalizer holds the map while the
// route goes to weight 0 (stored and accepted by the gateway) and the relevant xDS client
// ACKs the zeros, then the route and the xDS resources go, and the map goes only once the
// client ACKed the removal of its listener.
func TestTeardownInOrder(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck = []string{publish.SinkHTTPRoute, publish.SinkXDS}, "127.0.0.1:0", true
		c.TeardownTimeout = 10 * time.Minute // a wait that ended by time would fail the test
	})
	client := startRemovalClient(t, pub, "teardown-client", mapNames(f.ns))
	f.waitPublishedWith("ACKed by 1/1 clients")
	assert.Contains(t, f.getMap().Finalizers, model.Finalizer, "added before the first write")
	routes := f.watchRoute()

	client.freeze()
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonFinalizing), model.FinalizingMessage)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		zero, _ := zeroAcceptedBeforeDeleted(routes.versions())
		assert.True(c, zero, "the route at weight 0, accepted: %v", routes.versions())
	}, waitTimeout, tick)
	f.requireHeld("held while the xds client has not ACKed the zeros")
	require.NotNil(t, f.route(), "nothing is removed before every sink confirmed the zeros")

	client.thaw()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, deleted := zeroAcceptedBeforeDeleted(routes.versions())
		assert.True(c, deleted, "the route is removed once the zeros are confirmed")
		assert.True(c, client.heldRemoval(), "the client was sent its listener's removal")
	}, waitTimeout, tick)
	f.requireHeld("held until the xds client ACKed the removal")
	assert.Empty(t, f.ownedServices(), "the route's Services are removed with it")

	client.release()
	f.waitMapGone()
	zero, deleted := zeroAcceptedBeforeDeleted(routes.versions())
	assert.True(t, zero && deleted, "every version of the route: %v", routes.versions())
}

// With the publisher stopped the finalizer holds the deleted map (and its route stays);
// restarted, the publisher completes the teardown, weights 0 first, also when the map's
// InferenceService went meanwhile (the zero plan is then made from the map alone).
func TestTeardownResumesAfterRestart(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	f.waitPublished()
	pub.stop(t)

	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	require.NoError(t, dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.requireHeld("the finalizer holds the map while no publisher runs")
	require.NotNil(t, f.route(), "and its route")

	routes := f.watchRoute()
	f.startPublisher()
	f.waitMapGone()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		zero, deleted := zeroAcceptedBeforeDeleted(routes.versions())
		assert.True(c, zero && deleted, "weight 0 accepted, then removed: %v", routes.versions())
	}, waitTimeout, tick)
	f.waitGone()
}

// A map the publisher never wrote for (its InferenceService does not exist: nothing is
// planned, claimed or published) gets no finalizer, and goes at once when deleted;
// release-finalizers releases a held map without touching its route.
func TestFinalizerOnlyOnMapsWrittenFor(t *testing.T) {
	f := newFixture(t)
	maps := tmc.OmeV1beta1().TrafficMaps(f.ns)
	_, err := maps.Create(ctxFor(t), &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: f.ns},
		Spec:       v1beta1.TrafficMapSpec{Service: "ghost", Mode: "All", Entries: seedEntries(), ObservedISVCGeneration: 1},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.createMap(seedEntries())
	pub := f.startPublisher()
	f.waitPublished()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ghost, err := maps.Get(context.Background(), "ghost", metav1.GetOptions{})
		require.NoError(c, err)
		cond := published(ghost)
		require.NotNil(c, cond)
		assert.Equal(c, string(model.ReasonSourceNotFound), cond.Reason)
	}, waitTimeout, tick)
	ghost, err := maps.Get(ctxFor(t), "ghost", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, ghost.Finalizers, model.Finalizer, "never written for: no finalizer")
	assert.Contains(t, f.getMap().Finalizers, model.Finalizer, "published: the finalizer")
	require.NoError(t, maps.Delete(ctxFor(t), "ghost", metav1.DeleteOptions{}))
	_, err = maps.Get(ctxFor(t), "ghost", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "gone at once: %v", err)

	// The escape hatch: a held map, the publisher stopped.
	pub.stop(t)
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.requireHeld("held while no publisher runs")
	got := admin(t).run(t, "release-finalizers", "-n", f.ns)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, "trafficmap "+f.ns+"/"+service+" released\n1 trafficmap(s) released\n", got.stdout)
	f.waitMapGone()
	assert.NotNil(t, f.route(), "release-finalizers touches no route (the garbage collector takes it through its ownerReference)")
}

// Issue 44, D5, one holder rule: a map OME's publisher (`gatewayapi`) published and holds
// with the shared finalizer, deleted before it was handed over, is torn down by this
// publisher run with --take-over-from gatewayapi, as a live map would be taken over: OME's
// route is set to weight 0 in place (adopted), then removed with every backend Service, and
// the finalizer is released. Before, the teardown was left to `gatewayapi` (which no
// longer writes the map), so the finalizer held the map forever and OME's route kept its
// hostname.
func TestTakenOverMapTornDown(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	host := service + "." + f.ns + ".example.com"
	ome := standin.OMEPublisher{Kube: kube, Gateway: gw, Maps: tmc, GatewayNamespace: f.ns, GatewayName: gatewayName, Port: 443}
	omeRoute, err := ome.Publish(ctxFor(t), f.ns, service, host)
	require.NoError(t, err)
	// OME's publisher holds the map it wrote for with the shared finalizer.
	patch := []byte(`{"metadata":{"finalizers":["` + model.Finalizer + `"]}}`)
	_, err = tmc.OmeV1beta1().TrafficMaps(f.ns).Patch(ctxFor(t), service, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: standin.OMEFieldManager})
	require.NoError(t, err)
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(f.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	f.requireHeld("OME's finalizer holds the deleted map")
	routes := f.watchRoute()

	f.startPublisher(func(c *publish.Config) { c.TakeOverFrom = model.OMEPublisherName })
	f.waitMapGone()
	f.waitGone()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		zero, deleted := zeroAcceptedBeforeDeleted(routes.versions())
		assert.True(c, zero && deleted, "OME's route at weight 0, accepted, then removed: %v", routes.versions())
		list, err := kube.CoreV1().Services(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: httproute.LabelOMEManagedBy})
		require.NoError(c, err)
		assert.Empty(c, list.Items, "OME's Services are removed")
	}, waitTimeout, tick)
	_, err = gw.GatewayV1().HTTPRoutes(f.ns).Get(ctxFor(t), omeRoute.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no route keeps the hostname %s: %v", host, err)
}
