package xds

import (
	"maps"
	"reflect"
	"slices"
	"sync"
)

// wants holds the plans the pipeline gave the sink (Sink.Serve, Sink.Apply), in the sink's
// form, by map key: what each map's resources must be. The rebuild loop serves from it
// alone; a map the pipeline could not plan, or that an enabled sink refused, is not given
// again, so its last given plan stays. It marks the maps whose given content changed since
// the rebuild loop last took them. Safe for concurrent use (one lock).
type wants struct {
	mu    sync.Mutex
	plans map[string]Service
	dirty map[string]bool // maps whose given content changed since the last take
	full  bool            // the next rebuild looks at every map
}

func newWants() *wants {
	return &wants{plans: map[string]Service{}, dirty: map[string]bool{}, full: true}
}

// give records svc (Sealed) as its map's wanted content and reports whether it differs from
// what was given before (the map is then marked dirty).
func (w *wants) give(svc Service) bool {
	key := svc.Key()
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.plans[key]; ok && reflect.DeepEqual(prev, svc) {
		return false
	}
	w.plans[key] = svc
	w.dirty[key] = true
	return true
}

// forget drops the map's wanted content (a deleted map) and marks it dirty.
func (w *wants) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.plans, key)
	w.dirty[key] = true
}

// get returns the map's wanted content, false when none was given.
func (w *wants) get(key string) (Service, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	svc, ok := w.plans[key]
	return svc, ok
}

// keys lists the maps given content, sorted.
func (w *wants) keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.plans))
}

// take returns and clears the maps marked dirty, and whether every map is.
func (w *wants) take() (map[string]bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys, full := w.dirty, w.full
	w.dirty, w.full = map[string]bool{}, false
	return keys, full
}

// mark marks keys dirty again (a rebuild that put them off).
func (w *wants) mark(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range keys {
		w.dirty[key] = true
	}
}

// markFull makes the next rebuild look at every map (after a failed one).
func (w *wants) markFull() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.full = true
}
