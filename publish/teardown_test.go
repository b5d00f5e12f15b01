package publish

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// retiringSink is a fakeSink that takes part in the ordered teardown (model.Retiring): it
// answers Retire with retired (or retireErr) and records the calls.
type retiringSink struct {
	*fakeSink
	retired   model.Confirmation
	retireErr error
	retires   int
}

func (s *retiringSink) Retire(context.Context, types.NamespacedName) (model.Confirmation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retires++
	c := s.retired
	c.Sink = s.name
	return c, s.retireErr
}

// deleting marks the stored and the cached map terminating, as the API server does on a
// delete while a finalizer holds it.
func (f *fixture) deleting() {
	now := metav1.NewTime(f.clock)
	f.api.tm = f.api.tm.DeepCopy()
	f.api.tm.DeletionTimestamp = &now
	f.api.tm.ResourceVersion += "1"
	f.inputs.tm = f.api.tm.DeepCopy()
}

func TestFinalizerAddedBeforeTheFirstWrite(t *testing.T) {
	route := inPlace("route stored")
	f := newFixture(t, route)
	f.api.tm.Finalizers = nil // a new map
	f.inputs.tm = f.api.tm.DeepCopy()
	route.refuses = func(*model.Plan) *model.Confirmation {
		return &model.Confirmation{State: model.Refused, Reason: model.ReasonRouteRefused, Message: "17 entries"}
	}
	_, err := f.run(t)
	require.NoError(t, err)
	assert.False(t, model.HasFinalizer(f.api.tm), "refused before any write: no finalizer")
	assert.Empty(t, route.given)

	route.refuses = nil
	_, err = f.run(t)
	require.NoError(t, err)
	assert.True(t, model.HasFinalizer(f.api.tm), "added before the sinks were handed the plan")
	assert.Equal(t, 1, f.api.finalizerWrites)
	require.Len(t, route.given, 1)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)

	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 1, f.api.finalizerWrites, "added once")
}

// The ordered teardown: Finalizing before any sink moves, the zeros to every sink (only
// what it holds), the removal once they are confirmed, the finalizer last; each step waits
// for the sinks' confirmations, without sleeping, and resumes from what it observes.
func TestTeardownInOrder(t *testing.T) {
	route := &retiringSink{fakeSink: inPlace("route accepted"), retired: model.Confirmation{State: model.InPlace}}
	route.name = "httproute"
	xds := &retiringSink{fakeSink: &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace}},
		retired: model.Confirmation{State: model.Pending, Message: "waiting for xds clients: 0/1"}}
	f := newFixture(t)
	f.rec.sinks = []model.Sink{route, xds}
	f.api.tm.Finalizers = []string{"example.com/keep"}
	f.inputs.tm = f.api.tm.DeepCopy()
	_, err := f.run(t)
	require.NoError(t, err)
	require.Equal(t, []string{"example.com/keep", model.Finalizer}, f.api.tm.Finalizers)
	require.Equal(t, metav1.ConditionTrue, f.published().Status)
	for f.event() != "" {
	}

	f.deleting()
	xds.conf = model.Confirmation{State: model.Pending, Message: "waiting for xds clients: 0/1 ACKed"}
	hold, err := f.run(t)
	require.NoError(t, err)
	c := f.published()
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(model.ReasonFinalizing), c.Reason)
	assert.Equal(t, model.FinalizingMessage, c.Message)
	assert.False(t, f.api.tm.Status.Published)
	assert.Equal(t, "Normal Finalizing "+model.FinalizingMessage, f.event())
	for _, s := range []*retiringSink{route, xds} {
		last := s.given[len(s.given)-1]
		assert.True(t, last.Result.AllZero(), "%s is handed the zero plan", s.name)
		assert.Equal(t, []string{"chat.example.com"}, last.Hostnames, "the same names")
		assert.True(t, s.standing[len(s.standing)-1].Finalizing)
		assert.Zero(t, s.retires, "nothing is removed before the zeros are confirmed")
	}
	assert.Equal(t, 30*time.Second, hold, "waits for the sinks' news, at most the timeout")
	assert.True(t, model.HasFinalizer(f.api.tm))

	xds.conf = model.Confirmation{State: model.InPlace}
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 1, route.retires)
	assert.Equal(t, 1, xds.retires)
	assert.Positive(t, hold, "the xds removal waits for its clients")
	assert.True(t, model.HasFinalizer(f.api.tm), "held until the removal is confirmed")

	xds.retired = model.Confirmation{State: model.InPlace}
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Zero(t, hold)
	assert.Equal(t, []string{"example.com/keep"}, f.api.tm.Finalizers, "only ours goes")
	assert.Equal(t, "Normal Finalized published state removed; finalizer "+model.Finalizer+" removed", f.event())
}

func TestTeardownWaitsAtMostTheTimeout(t *testing.T) {
	route := &retiringSink{fakeSink: &fakeSink{name: "httproute", conf: model.Confirmation{State: model.Pending, Message: "waiting for gateway"}},
		retired: model.Confirmation{State: model.InPlace}}
	f := newFixture(t)
	f.rec.sinks = []model.Sink{route}
	f.api.tm.Finalizers = []string{model.Finalizer}
	f.inputs.tm = f.api.tm.DeepCopy()
	f.deleting()
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Zero(t, route.retires)

	f.clock = f.clock.Add(DefaultTeardownTimeout)
	for f.event() != "" {
	}
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 1, route.retires, "after the timeout the teardown goes on")
	assert.Contains(t, f.event(), "Warning TeardownTimedOut weights 0 not confirmed within --teardown-timeout 30s (httproute sink: waiting for gateway)")
	assert.False(t, model.HasFinalizer(f.api.tm))
}

// Issue 44, D3: a sink whose every try fails (its zeros' Apply, then its Retire) holds the
// finalizer at most --teardown-timeout per step, counted from the step's first failed try
// and kept across the map's requeues: each step is retried with backoff until then, then
// logged, recorded as a Warning Event, counted, and passed, and the finalizer is released.
func TestTeardownFailingSinkHoldsAtMostTheTimeout(t *testing.T) {
	route := &retiringSink{fakeSink: &fakeSink{name: "httproute", err: errors.New("admission webhook denied the request")},
		retireErr: errors.New("admission webhook denied the delete")}
	f := newFixture(t)
	reg := prometheus.NewPedanticRegistry()
	f.rec.metrics = newMetrics(reg)
	f.rec.sinks = []model.Sink{route}
	f.deleting()
	f.clock = f.clock.Add(time.Minute) // the step's first try, not the deletion, starts the clock
	for f.event() != "" {
	}

	_, err := f.run(t)
	require.ErrorContains(t, err, "admission webhook denied the request", "a failed try is retried with backoff")
	f.clock = f.clock.Add(DefaultTeardownTimeout - time.Second)
	_, err = f.run(t)
	require.Error(t, err, "still within the timeout of the first failed try")
	assert.Zero(t, route.retires, "nothing is removed while the zeros may still be set")
	assert.True(t, model.HasFinalizer(f.api.tm))

	f.clock = f.clock.Add(time.Second)
	_, err = f.run(t)
	require.ErrorContains(t, err, "admission webhook denied the delete", "the zeros passed; the removal fails")
	assert.Equal(t, 1, route.retires)
	assert.True(t, model.HasFinalizer(f.api.tm), "the removal's own timeout runs from its first failed try")
	f.clock = f.clock.Add(DefaultTeardownTimeout - time.Second)
	_, err = f.run(t)
	require.Error(t, err)
	assert.True(t, model.HasFinalizer(f.api.tm))

	f.clock = f.clock.Add(time.Second)
	_, err = f.run(t)
	require.NoError(t, err)
	assert.False(t, model.HasFinalizer(f.api.tm), "a failing sink holds the finalizer at most the timeout per step")
	var events []string
	for e := f.event(); e != ""; e = f.event() {
		events = append(events, e)
	}
	warnings := slices.DeleteFunc(slices.Clone(events), func(e string) bool { return !strings.HasPrefix(e, "Warning ") })
	assert.Len(t, warnings, 2, "each step is reported once: %v", warnings)
	assert.Contains(t, events, "Warning TeardownTimedOut weights 0 failed on every try for --teardown-timeout 30s "+
		"(httproute sink: admission webhook denied the request); going on")
	assert.Contains(t, events, "Warning TeardownTimedOut removal failed on every try for --teardown-timeout 30s "+
		"(httproute sink: admission webhook denied the delete); going on")
	want := `
# HELP trafficmap_publisher_teardown_timeouts_total Steps of a deleted map's teardown that ran out of --teardown-timeout and were passed, by step (zeros: weights 0; removal) and cause (unconfirmed: a sink did not confirm the step; failed: the step's tries failed for the whole timeout).
# TYPE trafficmap_publisher_teardown_timeouts_total counter
trafficmap_publisher_teardown_timeouts_total{cause="failed",step="removal"} 1
trafficmap_publisher_teardown_timeouts_total{cause="failed",step="zeros"} 1
trafficmap_publisher_teardown_timeouts_total{cause="unconfirmed",step="removal"} 0
trafficmap_publisher_teardown_timeouts_total{cause="unconfirmed",step="zeros"} 0
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "trafficmap_publisher_teardown_timeouts_total"))
}

func TestDeletedMapsNotHeldAreRemovedAtOnce(t *testing.T) {
	route := &retiringSink{fakeSink: inPlace("route")}
	f := newFixture(t)
	f.rec.sinks = []model.Sink{route}
	f.api.tm.Finalizers = nil
	f.inputs.tm = f.api.tm.DeepCopy()
	f.deleting()
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, []string{"prod/chat"}, route.deleted)
	assert.Empty(t, route.given)
	assert.Zero(t, f.api.finalizerWrites)
	assert.Zero(t, f.api.applies, "no status is written")
}

// A deleted map whose journal names another publisher is that publisher's to tear down in
// its order: this one removes nothing and writes nothing while the map is there (its
// finalizer is not ours to remove), serves its xDS at weight 0, and removes what it may
// hold of the map only once the map is gone.
func TestDeletedMapTornDownByOther(t *testing.T) {
	route := &retiringSink{fakeSink: inPlace("route")}
	xds := &servingSink{fakeSink: &fakeSink{name: "xds"}}
	f := newFixture(t)
	f.rec.sinks = []model.Sink{route, xds}
	f.rec.known = []string{"ome"} // a known publisher (--known-publishers)
	f.api.tm.Finalizers = []string{model.Finalizer}
	f.api.tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: "ome", ClaimedTargets: []string{"hostname:chat.example.com"}}
	f.inputs.tm = f.api.tm.DeepCopy()
	f.deleting()
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Empty(t, route.deleted, "the holder removes its route in its order")
	assert.Empty(t, route.given)
	assert.Zero(t, f.api.finalizerWrites, "a finalizer that is not ours to remove stays")
	assert.Zero(t, f.api.applies, "no status is written")
	last := xds.last("prod/chat")
	require.NotNil(t, last)
	assert.True(t, last.Result.AllZero(), "xds follows the holder's teardown: weight 0")

	f.inputs.tm = nil // gone
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, []string{"prod/chat"}, route.deleted)
}

// A replica that does not lead serves a map the finalizer holds at weight 0 until it is
// gone, and withdraws it only then.
func TestServeHeldMapAtZero(t *testing.T) {
	xds := &servingSink{fakeSink: &fakeSink{name: "xds"}}
	f := newFixture(t)
	f.rec.sinks = []model.Sink{xds}
	f.api.tm.Finalizers = []string{model.Finalizer}
	f.inputs.tm = f.api.tm.DeepCopy()
	f.deleting()
	require.NoError(t, f.rec.serve(f.key))
	last := xds.last("prod/chat")
	require.NotNil(t, last)
	assert.True(t, last.Result.AllZero())
	assert.Equal(t, []string{"chat.example.com"}, last.Hostnames)
	assert.Empty(t, xds.withdrawn)

	f.inputs.noSource = true // the InferenceService is gone: the zero plan from the map alone
	require.NoError(t, f.rec.serve(f.key))
	last = xds.last("prod/chat")
	assert.True(t, last.Result.AllZero())
	assert.Equal(t, []string{"chat.example.com"}, last.Hostnames, "the journaled hostname")
	assert.Empty(t, xds.withdrawn)

	f.inputs.tm = nil
	require.NoError(t, f.rec.serve(f.key))
	assert.Equal(t, []string{"prod/chat"}, xds.withdrawn)
}
