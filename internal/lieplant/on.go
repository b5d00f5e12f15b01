//go:build lieplant

package lieplant

import (
	"os"
	"sync"
)

// On is true in a binary built with the tag lieplant.
const On = true

// planted is the kind EnvVar names ("" plants nothing).
var planted = Kind(os.Getenv(EnvVar))

// Is reports whether k is the kind planted.
func Is(k Kind) bool { return k == planted }

// kept holds Keep's values, by key; mu guards it.
var (
	mu   sync.Mutex
	kept = map[string]keptValue{}
)

// keptValue is what Keep remembers of one key: the value and whether it is latched.
type keptValue struct {
	v       any
	latched bool
}

// Keep returns v and remembers it for key until hold is true for key once; from then on it
// returns what it remembered last before (v when nothing).
func Keep[T any](key string, v T, hold bool) T {
	mu.Lock()
	defer mu.Unlock()
	k, ok := kept[key]
	if ok && (k.latched || hold) {
		if t, isT := k.v.(T); isT {
			kept[key] = keptValue{v: t, latched: true}
			return t
		}
	}
	kept[key] = keptValue{v: v, latched: hold}
	return v
}
