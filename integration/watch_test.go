package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
	w, err := tmc.TrafficMaps(f.ns).Watch(ctx, metav1.ListOptions{
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

// requireFalseBeforeTrue asserts that, among the Published states the watcher saw for
// generation gen, the first was False with reason Publishing and the last True.
func requireFalseBeforeTrue(t *testing.T, all []transition, gen int64) {
	t.Helper()
	var seen []transition
	for _, tr := range all {
		if tr.Generation == gen {
			seen = append(seen, tr)
		}
	}
	require.NotEmpty(t, seen, "no Published state at generation %d among %v", gen, all)
	first, last := seen[0], seen[len(seen)-1]
	require.Equal(t, metav1.ConditionFalse, first.Status, "first state after the change: %v", seen)
	require.Equal(t, "Publishing", first.Reason, "first state after the change: %v", seen)
	require.Equal(t, metav1.ConditionTrue, last.Status, "last state: %v", seen)
}
