package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// transition is one distinct state of the Published condition seen by a watcher.
type transition struct {
	Generation int64 // the condition's observedGeneration
	Status     metav1.ConditionStatus
	Reason     string
	Message    string
}

func (tr transition) String() string {
	return fmt.Sprintf("gen=%d %s/%s", tr.Generation, tr.Status, tr.Reason)
}

// publishedWatcher records every distinct Published condition a watch on the map delivers.
type publishedWatcher struct {
	mu     sync.Mutex
	seen   []transition
	cancel context.CancelFunc
	done   chan struct{}
}

// watchPublished starts watching the fixture's map from its current resourceVersion.
func (f *fixture) watchPublished() *publishedWatcher {
	f.t.Helper()
	tm := f.getMap()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", service).String(),
		ResourceVersion: tm.ResourceVersion,
	})
	require.NoError(f.t, err)
	pw := &publishedWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(*v1beta1.TrafficMap)
			if !ok {
				continue
			}
			if c := published(obj); c != nil {
				pw.add(transition{c.ObservedGeneration, c.Status, c.Reason, c.Message})
			}
		}
	}()
	f.t.Cleanup(pw.stop)
	return pw
}

func (pw *publishedWatcher) add(tr transition) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if n := len(pw.seen); n > 0 && pw.seen[n-1] == tr {
		return
	}
	pw.seen = append(pw.seen, tr)
}

func (pw *publishedWatcher) stop() {
	pw.cancel()
	<-pw.done
}

// transitions stops the watch and returns what it saw, in order.
func (pw *publishedWatcher) transitions() []transition {
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]transition(nil), pw.seen...)
}

// requireFalseBeforeTrue waits until the watcher has seen Published True for generation
// gen (a watch can lag a GET), then asserts that the first state it saw for gen was False
// with reason Publishing.
func requireFalseBeforeTrue(t *testing.T, w *publishedWatcher, gen int64) {
	t.Helper()
	var seen []transition
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		seen = seen[:0]
		for _, tr := range w.snapshot() {
			if tr.Generation == gen {
				seen = append(seen, tr)
			}
		}
		require.NotEmpty(c, seen, "no Published state at generation %d", gen)
		assert.Equal(c, metav1.ConditionTrue, seen[len(seen)-1].Status, "last state: %v", seen)
	}, waitTimeout, tick)
	require.Equal(t, metav1.ConditionFalse, seen[0].Status, "first state after the change: %v", seen)
	require.Equal(t, "Publishing", seen[0].Reason, "first state after the change: %v", seen)
}

// snapshot returns what the watcher has seen so far, in order.
func (pw *publishedWatcher) snapshot() []transition {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]transition(nil), pw.seen...)
}
