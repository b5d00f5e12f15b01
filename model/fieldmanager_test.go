package model

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestFieldManagerFor(t *testing.T) {
	long := strings.Repeat("p", 128)
	for _, tc := range []struct {
		name, publisher, want string
	}{
		{"default name keeps the manager", DefaultFieldManager, "trafficmap-publisher"},
		{"no name is the default", "", "trafficmap-publisher"},
		{"another name has its own", "pub-a", "trafficmap-publisher/pub-a"},
		{"a name differing in case is another", "Pub-A", "trafficmap-publisher/Pub-A"},
		{"the longest that fits is kept", strings.Repeat("q", 102), "trafficmap-publisher/" + strings.Repeat("q", 102)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, FieldManagerFor(tc.publisher))
		})
	}
	t.Run("long and unprintable names are shortened, distinct and valid", func(t *testing.T) {
		seen := map[string]string{}
		for _, name := range []string{long, long + "x", strings.Repeat("q", 103), "pub\nb", "pub\tb", "püb"} {
			m := FieldManagerFor(name)
			assert.LessOrEqual(t, len(m+"-held"), 128, m)
			assert.True(t, utf8.ValidString(m))
			assert.False(t, strings.ContainsFunc(m, func(r rune) bool { return r < ' ' || r > '~' }), "%q", m)
			assert.True(t, strings.HasPrefix(m, DefaultFieldManager+"/"), m)
			assert.NotContains(t, seen, m, "%q and %q share a manager", name, seen[m])
			seen[m] = name
			assert.Equal(t, m, FieldManagerFor(name), "deterministic")
		}
	})
}
