package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

const seedDrain = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`

// S2: the seed's drain gives 0/1, Published goes False then True; removing it gives 1/1. With
// the routing controller also applying the drain, the cluster stays drained until it
// recomputes the entry.
func TestSeedDrainAndUndrain(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	gen := f.waitPublished().Generation

	w := f.watchPublished()
	f.drain(seedDrain)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	requireFalseBeforeTrue(t, w, gen)

	// OME's routing controller applies the same drain to the map.
	_, err := f.routing.ApplyDrain(ctxFor(t), f.ns, service, "worker-a", "maintenance-a")
	require.NoError(t, err)
	assert.Equal(t, gen+1, f.waitPublishedWith("worker-a=0 (drained by maintenance-a)").Generation)

	// Undrain: the annotation is gone, but the map still holds worker-a at 0 with its
	// drainRefs until the routing controller recomputes it.
	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := f.route()
		assert.Equal(c, "{}", r.Annotations[httproute.AnnotationDrains])
	}, waitTimeout, tick)
	f.waitPublishedWith("worker-a=0 (drained by maintenance-a)")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	_, err = f.routing.Recompute(ctxFor(t), f.ns, service, "worker-a", 1)
	require.NoError(t, err)
	f.waitPublishedWith("worker-a=1, worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
}

// S3: two drains hold one cluster; it comes back only when both are gone.
func TestTwoDrainsHoldOneCluster(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	f.drain(`{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"},"kernel-a":{"cluster":"worker-a","reason":"kernel upgrade"}}`)
	f.waitPublishedWith("worker-a=0 (drained by kernel-a,maintenance-a)")

	f.drain(`{"kernel-a":{"cluster":"worker-a","reason":"kernel upgrade"}}`)
	f.waitPublishedWith("worker-a=0 (drained by kernel-a), worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	f.drain(`{}`)
	f.waitPublishedWith("worker-a=1, worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
}

// S4: a drain naming a cluster with no entry changes nothing and is reported; when that
// cluster's entry appears it enters at weight 0.
func TestPendingDrain(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	f.drain(`{"pre-arm-c":{"cluster":"worker-c","reason":"not ready for traffic"}}`)
	f.waitPublishedWith("pending drains (no such entry): pre-arm-c on worker-c")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	f.updateMap(func(spec *v1beta1.TrafficMapSpec) {
		spec.Entries = append(spec.Entries, v1beta1.TrafficMapEntry{Cluster: "worker-c", Endpoint: "https://chat.worker-c.example.com", Weight: 1})
	})
	tm := f.waitPublishedWith("worker-c=0 (drained by pre-arm-c)")
	assert.NotContains(t, published(tm).Message, "pending")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1, "worker-c": 0}, f.routeWeights("worker-a", "worker-b", "worker-c"))
	assert.Len(t, f.ownedServices(), 3)
}

// S5: draining every cluster publishes all-zero weights and says so.
func TestDrainEverythingApplyCurrent(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()

	f.drain(`{"all-a":{"cluster":"worker-a","reason":"dc move"},"all-b":{"cluster":"worker-b","reason":"dc move"}}`)
	tm := f.waitPublishedWith("every effective weight is 0, so no traffic is routed")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 0}, f.routeWeights("worker-a", "worker-b"))
	assert.True(t, tm.Status.Published)
}

// S5: with RetainLastPositive the last positive weights stay, and the condition says so.
func TestDrainEverythingRetainLastPositive(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher(func(c *publish.Config) { c.NoPositivePolicy = publish.RetainLastPositive })
	f.waitPublished()

	f.drain(`{"all-a":{"cluster":"worker-a","reason":"dc move"},"all-b":{"cluster":"worker-b","reason":"dc move"}}`)
	tm := f.waitCondition(metav1.ConditionFalse, string(model.ReasonLastPositiveRetained))
	assert.Contains(t, published(tm).Message, "RetainLastPositive keeps the last positive weights")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))

	f.drain(`{"all-b":{"cluster":"worker-b","reason":"dc move"}}`)
	f.waitPublishedWith("worker-a=1, worker-b=0 (drained by all-b)")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 0}, f.routeWeights("worker-a", "worker-b"))
}
