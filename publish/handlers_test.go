package publish

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// A change outranks the fleet's bulk work: a map whose route the gateway accepted during a
// cold start (or that an operator drained) is reconciled before the maps still waiting from
// the informers' initial lists, and a bulk map that changes moves up.
func TestChangesOutrankBulkWork(t *testing.T) {
	f := newOwnershipFixture(t)
	for _, name := range []string{"a", "b", "c"} {
		f.p.router.onTrafficMap(bulkPriority, nil, f.addMap(t, "prod", name, name, 0))
	}
	d := f.addMap(t, "prod", "d", "d", 0)
	f.p.router.onTrafficMap(normalPriority, nil, d)
	c, _ := f.p.caches.trafficMap("prod", "c")
	changed := c.DeepCopy()
	changed.ResourceVersion, changed.Generation = "2", 2
	f.p.router.onTrafficMap(normalPriority, c, changed)
	f.p.router.onTrafficMap(bulkPriority, nil, d) // a resync does not lower it
	assert.Equal(t, []string{"prod/d", "prod/c", "prod/a", "prod/b"}, f.queued())
}

func TestEventPriority(t *testing.T) {
	obj := func(rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: rv}}
	}
	assert.Equal(t, bulkPriority, addPriority(true), "the initial list")
	assert.Equal(t, normalPriority, addPriority(false), "an object created while watching")
	assert.Equal(t, bulkPriority, updatePriority(obj("7"), obj("7")), "a resync")
	assert.Equal(t, normalPriority, updatePriority(obj("7"), obj("8")), "a change")
}

// News from a sink's consumers (an xDS client's ACK) about a map not reconciled yet is bulk
// work; once the map was reconciled, it is a change. A replica that does not lead judges
// nothing and drops such news.
func TestRequeuePriority(t *testing.T) {
	f := newOwnershipFixture(t)
	for _, name := range []string{"a", "b", "c"} {
		f.p.router.onTrafficMap(bulkPriority, nil, f.addMap(t, "prod", name, name, 0))
	}
	a, c := cache.NewObjectName("prod", "a"), cache.NewObjectName("prod", "c")
	f.p.work.requeue(c)
	assert.Equal(t, []string{"prod/a", "prod/b", "prod/c"}, f.queued(), "not leading: the news is dropped")
	for _, name := range []string{"a", "b", "c"} {
		f.p.enqueue(bulkPriority, "prod", name)
	}
	lctx, end := context.WithCancel(t.Context())
	defer end()
	f.p.work.lead.Store(&lctx)
	f.p.work.requeue(c) // every client ACKs the first snapshot: c has not been reconciled
	assert.Equal(t, []string{"prod/a", "prod/b", "prod/c"}, f.queued())
	f.p.work.passed(a)
	f.p.work.passed(c)
	f.p.router.onTrafficMap(bulkPriority, nil, f.addMap(t, "prod", "d", "d", 0))
	f.p.work.requeue(c) // an ACK c waits for
	assert.Equal(t, []string{"prod/c", "prod/d"}, f.queued())

	require.NoError(t, f.p.caches.maps[0].GetIndexer().Delete(&v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "a"}}))
	f.p.work.passed(a) // its delete reconciled
	_, ok := f.p.work.reconciled.Load(a)
	assert.False(t, ok, "a deleted map is forgotten")
}

// fakeUpdater is a sink's news (model.Updater): keys handed over once per signal.
type fakeUpdater struct {
	ch   chan struct{}
	keys chan []types.NamespacedName
}

func (f *fakeUpdater) Updates() <-chan struct{}        { return f.ch }
func (f *fakeUpdater) Updated() []types.NamespacedName { return <-f.keys }

// What a sink learns after Apply (an ACK) reaches the pipeline as queue adds, never as a
// plan: the workers queue the maps it names while this replica leads.
func TestSinkNewsQueueMaps(t *testing.T) {
	f := newOwnershipFixture(t)
	f.addMap(t, "prod", "a", "a", 0)
	lctx, end := context.WithCancel(t.Context())
	defer end()
	f.p.work.lead.Store(&lctx)
	u := &fakeUpdater{ch: make(chan struct{}, 1), keys: make(chan []types.NamespacedName, 1)}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); f.p.work.listen(ctx, u) }()
	u.keys <- []types.NamespacedName{{Namespace: "prod", Name: "a"}}
	u.ch <- struct{}{}
	require.Eventually(t, func() bool { return f.p.queue.Len() == 1 }, 10*time.Second, time.Millisecond)
	stop()
	<-done
	assert.Equal(t, []string{"prod/a"}, f.queued())
}
