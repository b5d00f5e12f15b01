package model

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DefaultFieldManager is the field manager of every write the publisher with the default
// name makes, and of the operator commands' status writes for the maps it holds, so that
// the publisher's next write replaces theirs.
const DefaultFieldManager = "trafficmap-publisher"

// maxFieldManager is the longest field manager FieldManagerFor returns: the API server
// takes at most 128 bytes, and the publisher also writes as the manager with "-held" added.
const maxFieldManager = 128 - len("-held")

// FieldManagerFor is the field manager of the publisher named name (--publisher-name), so
// that managedFields tell publishers apart: DefaultFieldManager for the default name (or
// ""), else DefaultFieldManager + "/" + name. A name that would make it longer than 123
// bytes, or that holds a byte other than printable ASCII, is shortened to its printable
// ASCII prefix and the first 12 hex digits of its SHA-256, so the result is deterministic,
// distinct per name and one the API server accepts.
func FieldManagerFor(name string) string {
	if name == "" || name == DefaultFieldManager {
		return DefaultFieldManager
	}
	m := DefaultFieldManager + "/" + name
	printable := !strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r > '~' })
	if printable && len(m) <= maxFieldManager {
		return m
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:12]
	var b strings.Builder
	b.WriteString(DefaultFieldManager + "/")
	for _, r := range name {
		if b.Len()+len(suffix) >= maxFieldManager {
			break
		}
		if r >= ' ' && r <= '~' {
			b.WriteRune(r)
		}
	}
	return b.String() + suffix
}
