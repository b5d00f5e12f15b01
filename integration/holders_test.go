package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/statusapply"
	"github.com/trafficmap/publisher/publish"
)

// Issue 27, two publishers: a map whose claim journal names another publisher is that
// publisher's. Publisher a holds the map; b, started next with another name, writes neither
// the route nor the journal nor the condition (a wrote it at the map's generation): it
// records a Warning Event PublisherChanged. A change of the map is published by a alone, and
// the two do not flip the condition. A journal naming a publisher that is not running (a
// silent holder) gets Published False/PublisherChanged naming it and how to take it over.
func TestTwoPublishersOneMap(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	startNamed(t, f, "pub-a")
	held := f.waitPublished()
	require.NotNil(t, held.Status.Publisher)
	require.Equal(t, "pub-a", held.Status.Publisher.PublisherName)

	startNamed(t, f, "pub-b")
	waitEvent(t, f, "pub-b", corev1.EventTypeWarning, string(model.ReasonPublisherChanged), `held by publisher "pub-a"`, "--take-over-from pub-a")

	updated := f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Weight = 3 })
	now := f.waitPublished()
	assert.Equal(t, updated.Generation, now.Generation)
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 3}, f.routeWeights("worker-a", "worker-b"))
	assert.Equal(t, "pub-a", now.Status.Publisher.PublisherName, "the holder's journal stays")
	assert.Equal(t, []string{"pub-a"}, routeWriters(t, f), "only the holder writes the route")
	for _, e := range f.events() {
		if e.Source.Component == "pub-b" {
			assert.Equal(t, string(model.ReasonPublisherChanged), e.Reason, "b records nothing else: %s", e.Message)
		}
	}
	// No flipping: the map stays as the holder wrote it (each publisher writes only on a real
	// difference).
	rv := f.getMap().ResourceVersion
	assert.Never(t, func() bool { return f.getMap().ResourceVersion != rv }, 2*time.Second, 100*time.Millisecond, "the map is not written again")

	// A silent holder: the journal names a publisher that is not running.
	g := newFixture(t)
	g.createMap(seedEntries())
	writeJournal(t, g, &v1beta1.TrafficMapPublisherStatus{PublisherName: "ghost", ClaimedTargets: []string{"hostname:chat." + g.ns + ".example.com"}})
	g.startPublisher(func(c *publish.Config) { c.KnownPublishers = []string{"ghost"} })
	told := g.waitCondition(metav1.ConditionFalse, string(model.ReasonPublisherChanged), `held by publisher "ghost"`, "--take-over-from ghost")
	assert.False(t, told.Status.Published)
	assert.Equal(t, "ghost", told.Status.Publisher.PublisherName, "the holder's journal is not touched")
	assert.Nil(t, g.route(), "no route is written for a held map")
	assert.Empty(t, g.ownedServices(), "no Service is written for a held map")
}

// Issue 27: --take-over-from hands a map over without a gap. Publisher a holds the map; b
// starts with --take-over-from pub-a: its journal replaces a's, it adopts a's route in place
// (same labels: ours), and a, seeing the map held by b, stops writing and deletes nothing.
// A watch on the route through the hand-over and a change of weights afterwards sees the
// route never absent, never recreated, and its weights only ever the map's.
func TestTakeOverFromHandsOverWithoutGap(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	startNamed(t, f, "pub-a")
	f.waitPublished()
	before := f.route()
	require.NotNil(t, before)
	names := map[string]string{}
	for _, c := range []string{"worker-a", "worker-b"} {
		names[httproute.ServiceName(f.ns, service, c)] = c
	}
	w := watchRoute(t, f, before, names, map[string]int32{"worker-a": 1, "worker-b": 1}, map[string]int32{"worker-a": 1, "worker-b": 3})

	startNamed(t, f, "pub-b", func(c *publish.Config) { c.TakeOverFrom = "pub-a" })
	waitHolder(t, f, "pub-b")
	f.waitPublished()
	waitEvent(t, f, "pub-a", corev1.EventTypeWarning, string(model.ReasonPublisherChanged), `held by publisher "pub-b"`)

	f.updateMap(func(s *v1beta1.TrafficMapSpec) { s.Entries[1].Weight = 3 })
	now := f.waitPublished()
	assert.Equal(t, "pub-b", now.Status.Publisher.PublisherName)
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 3}, f.routeWeights("worker-a", "worker-b"))
	after := f.route()
	assert.Equal(t, before.UID, after.UID, "the route was adopted in place")
	assert.Contains(t, routeWriters(t, f), "pub-b", "the new holder wrote the new weights")
	assert.Len(t, f.ownedServices(), 2, "the Services stay")
	w.check(t)
}

// Issue 27: a map migrated from OME's built-in publisher. OME's publisher (the stand-in, as
// reference 5.8 documents it) published the map: its route chat-global and tmb- Services with
// OME's labels, its journal naming gatewayapi. Without the hand-over the route is OME's
// (RouteConflict; here the map is held: PublisherChanged). With --take-over-from gatewayapi
// the map is handed over, the route is adopted in place (our labels and content, OME's
// labels removed) after our Services exist, and OME's Services are pruned once the route no
// longer refers to them. The route is never absent and its weights are always the map's.
func TestMigrateFromOMEPublisher(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	host := service + "." + f.ns + ".example.com"
	ome := standin.OMEPublisher{Kube: kube, Gateway: gw, Maps: tmc, GatewayNamespace: f.ns, GatewayName: gatewayName, Port: 443}
	omeRoute, err := ome.Publish(ctxFor(t), f.ns, service, host)
	require.NoError(t, err)
	names := map[string]string{}
	for _, c := range []string{"worker-a", "worker-b"} {
		names[httproute.ServiceName(f.ns, service, c)] = c
		names[standin.OMEServiceName(f.ns, service, c)] = c
	}
	w := watchRoute(t, f, omeRoute, names, map[string]int32{"worker-a": 1, "worker-b": 1})

	// Without --take-over-from the map stays OME's.
	plain := f.startPublisher()
	f.waitCondition(metav1.ConditionTrue, "Published", `published by publisher "gatewayapi"`)
	waitEvent(t, f, publish.DefaultFieldManager, corev1.EventTypeWarning, string(model.ReasonPublisherChanged), `held by publisher "gatewayapi"`)
	plain.stop(t)

	f.startPublisher(func(c *publish.Config) { c.TakeOverFrom = model.OMEPublisherName })
	waitHolder(t, f, publish.DefaultFieldManager)
	tm := f.waitPublishedWith("accepted by gateway")
	for _, target := range tm.Status.Publisher.ClaimedTargets {
		assert.False(t, strings.HasPrefix(target, "v1:httproute:"), "OME's claims are dropped: %s", target)
	}
	route := f.route()
	require.NotNil(t, route)
	assert.Equal(t, omeRoute.UID, route.UID, "the route was adopted in place, never deleted and created again")
	assert.True(t, httproute.Owned(route.Labels, httproute.Source{Namespace: f.ns, Name: service}))
	for _, k := range []string{httproute.LabelOMEManagedBy, httproute.LabelOMESourceName, httproute.LabelOMESourceNS} {
		assert.NotContains(t, route.Labels, k, "OME's ownership labels are removed")
	}
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	assert.Len(t, f.ownedServices(), 2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := kube.CoreV1().Services(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: httproute.LabelOMEManagedBy})
		require.NoError(c, err)
		assert.Empty(c, list.Items, "OME's Services are pruned")
	}, waitTimeout, tick)
	w.check(t)
}

// waitHolder waits until the map's claim journal names publisher, with claims and the last
// positive plan it published.
func waitHolder(t *testing.T, f *fixture, publisher string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		tm := f.getMap()
		require.NotNil(c, tm.Status.Publisher)
		assert.Equal(c, publisher, tm.Status.Publisher.PublisherName)
		assert.NotEmpty(c, tm.Status.Publisher.ClaimedTargets)
		assert.NotNil(c, tm.Status.Publisher.LastPositive)
	}, waitTimeout, tick)
}

// startNamed starts a publisher whose field manager and publisherName are name.
func startNamed(t *testing.T, f *fixture, name string, mutate ...func(*publish.Config)) *runningPublisher {
	t.Helper()
	cfg := f.publisherConfig(append([]func(*publish.Config){func(c *publish.Config) {
		c.FieldManager = name
		c.KnownPublishers = []string{"pub-a", "pub-b"} // each knows the other (--known-publishers)
	}}, mutate...)...)
	return startPublisherWith(t, cfg, restCfg, zaptest.NewLogger(t).Named(name))
}

// waitEvent waits for an Event on the map from the publisher component with type and
// reason, whose message contains every string in want.
func waitEvent(t *testing.T, f *fixture, component, typ, reason string, want ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		found := slices.ContainsFunc(f.events(), func(e corev1.Event) bool {
			if e.Source.Component != component || e.Type != typ || e.Reason != reason {
				return false
			}
			for _, w := range want {
				if !strings.Contains(e.Message, w) {
					return false
				}
			}
			return true
		})
		assert.True(c, found, "a %s Event %s from %s", typ, reason, component)
	}, waitTimeout, tick)
}

// routeWriters are the field managers that wrote the map's route (apart from the gateway's
// status writes), sorted.
func routeWriters(t *testing.T, f *fixture) []string {
	t.Helper()
	r := f.route()
	require.NotNil(t, r)
	seen := map[string]bool{}
	for _, m := range r.ManagedFields {
		if m.Subresource == "" {
			seen[m.Manager] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// writeJournal writes journal as the map's claim journal, as another publisher would.
func writeJournal(t *testing.T, f *fixture, journal *v1beta1.TrafficMapPublisherStatus) {
	t.Helper()
	tm := f.getMap()
	_, err := tmc.OmeV1beta1().TrafficMaps(f.ns).ApplyStatus(ctxFor(t), statusapply.Apply(tm, false, 0, nil, nil, journal),
		metav1.ApplyOptions{FieldManager: journal.PublisherName, Force: true})
	require.NoError(t, err)
}

// routeWatcher records every state of the map's route a watch delivers that breaks the
// no-gap rule: the route deleted, or weights that are none of the allowed ones.
type routeWatcher struct {
	mu         sync.Mutex
	violations []string
	seen       int
	cancel     context.CancelFunc
	done       chan struct{}
}

// watchRoute watches the route from from's resourceVersion; names maps backend Service
// names to clusters, allowed lists the weights (by cluster) the route may hold.
func watchRoute(t *testing.T, f *fixture, from *gwapiv1.HTTPRoute, names map[string]string, allowed ...map[string]int32) *routeWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := gw.GatewayV1().HTTPRoutes(f.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", from.Name).String(),
		ResourceVersion: from.ResourceVersion,
	})
	require.NoError(t, err)
	rw := &routeWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			if ctx.Err() != nil {
				return // stopped: the watch ends with an error event
			}
			rw.observe(ev, names, allowed)
		}
	}()
	t.Cleanup(rw.stop)
	return rw
}

func (rw *routeWatcher) observe(ev watch.Event, names map[string]string, allowed []map[string]int32) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.seen++
	route, ok := ev.Object.(*gwapiv1.HTTPRoute)
	switch {
	case ev.Type == watch.Deleted:
		rw.violations = append(rw.violations, "the route was deleted")
		return
	case ev.Type == watch.Error || !ok:
		rw.violations = append(rw.violations, fmt.Sprintf("watch error: %v", apierrors.FromObject(ev.Object)))
		return
	}
	got := map[string]int32{}
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			c, known := names[string(ref.Name)]
			if !known || ref.Weight == nil {
				rw.violations = append(rw.violations, "unknown backend "+string(ref.Name))
				continue
			}
			got[c] = *ref.Weight
		}
	}
	if !slices.ContainsFunc(allowed, func(w map[string]int32) bool { return maps.Equal(w, got) }) {
		rw.violations = append(rw.violations, fmt.Sprintf("weights %v at resourceVersion %s", got, route.ResourceVersion))
	}
}

func (rw *routeWatcher) stop() {
	rw.cancel()
	<-rw.done
}

// check stops the watch and asserts that it saw the route change and nothing wrong.
func (rw *routeWatcher) check(t *testing.T) {
	t.Helper()
	rw.stop()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	assert.Empty(t, rw.violations)
	assert.Positive(t, rw.seen, "the watch saw the route's writes")
}
