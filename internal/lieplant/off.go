//go:build !lieplant

package lieplant

// On is false without the tag lieplant: every hook is dead code.
const On = false

// Is reports whether k is the kind planted: never without the tag.
func Is(Kind) bool { return false }

// Keep returns v: nothing is kept without the tag.
func Keep[T any](_ string, v T, _ bool) T { return v }
