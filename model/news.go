package model

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// News collects the maps a sink names to the pipeline because of something it learned after
// Apply returned (an ACK, a timer ending), and implements Updater: Add records keys and signals
// on a buffered channel without ever blocking; Updated hands the set over once. Safe for
// concurrent use (one lock).
type News struct {
	mu   sync.Mutex
	keys map[string]bool
	ch   chan struct{}
}

var _ Updater = (*News)(nil)

// NewNews returns an empty News.
func NewNews() *News { return &News{keys: map[string]bool{}, ch: make(chan struct{}, 1)} }

// Add records the map keys ("namespace/name") and signals.
func (n *News) Add(keys ...string) {
	if len(keys) == 0 {
		return
	}
	n.mu.Lock()
	for _, key := range keys {
		n.keys[key] = true
	}
	n.mu.Unlock()
	select {
	case n.ch <- struct{}{}:
	default: // a signal is pending already; it hands over these keys too
	}
}

// Updates implements Updater: it signals when Updated has maps.
func (n *News) Updates() <-chan struct{} { return n.ch }

// Updated implements Updater: the maps added since the last call, sorted, and clears them.
func (n *News) Updated() []types.NamespacedName {
	n.mu.Lock()
	keys := n.keys
	n.keys = map[string]bool{}
	n.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(keys))
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		ns, name, _ := strings.Cut(key, "/")
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	return out
}
