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

// kept holds Keep's values, by key.
var kept sync.Map

// Keep returns v and remembers it for key while hold is false; while hold is true it
// returns what it remembered last for key (v when nothing).
func Keep[T any](key string, v T, hold bool) T {
	if !hold {
		kept.Store(key, v)
		return v
	}
	if old, ok := kept.Load(key); ok {
		if t, ok := old.(T); ok {
			return t
		}
	}
	kept.Store(key, v)
	return v
}
