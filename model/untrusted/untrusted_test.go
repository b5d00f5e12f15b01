package untrusted_test

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/model/untrusted"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short text is quoted whole", "router~10.0.0.1~gw", untrusted.MaxID, `"router~10.0.0.1~gw"`},
		{"newlines and quotes are escaped", "a\"\nStatus: True\r\n", untrusted.MaxID, `"a\"\nStatus: True\r\n"`},
		{"invalid UTF-8 is escaped", "a\xffb", untrusted.MaxID, `"a\xffb"`},
		{"long text is cut with a mark after the quote", strings.Repeat("x", 40), 10, `"xxxxx"` + untrusted.Mark},
		{"an escape is never split", strings.Repeat("\n", 10), 10, `"\n\n"` + untrusted.Mark},
		{"a character is never split", strings.Repeat("é", 10), 10, `"éé"` + untrusted.Mark},
		{"a literal longer than n though the text is not is cut", strings.Repeat("\x00", 6), 12, `"\x00"` + untrusted.Mark},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := untrusted.Quote(tc.in, tc.n)
			assert.Equal(t, tc.want, got)
			assert.LessOrEqual(t, len(got), tc.n)
			assert.NotContains(t, got, "\n")
			assert.True(t, utf8.ValidString(got))
			if !strings.HasSuffix(got, untrusted.Mark) {
				back, err := strconv.Unquote(got)
				assert.NoError(t, err)
				assert.Equal(t, tc.in, back, "an uncut literal reads back as the text")
			}
		})
	}
}

// A 40 KB node id is shown in at most MaxID bytes.
func TestQuoteBoundsHugeText(t *testing.T) {
	got := untrusted.Quote(strings.Repeat("node\n", 8<<10), untrusted.MaxID)
	assert.LessOrEqual(t, len(got), untrusted.MaxID)
	assert.True(t, strings.HasPrefix(got, `"node\nnode\n`))
	assert.True(t, strings.HasSuffix(got, `"`+untrusted.Mark))
}

func TestCut(t *testing.T) {
	assert.Equal(t, "abc", untrusted.Cut("abc", 10))
	got := untrusted.Cut(strings.Repeat("é", 100), 11)
	assert.LessOrEqual(t, len(got), 11)
	assert.True(t, utf8.ValidString(got))
	assert.True(t, strings.HasSuffix(got, untrusted.Mark))
}

func FuzzQuote(f *testing.F) {
	f.Add("node\n\"id\"", 20)
	f.Add("\xff\xfe é", 7)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n%1024 + 1
		if n < 0 {
			n = -n
		}
		got := untrusted.Quote(s, n)
		if len(got) > max(n, 2+len(untrusted.Mark)) {
			t.Fatalf("Quote(%q, %d) = %q: longer than the bound", s, n, got)
		}
		if strings.ContainsAny(got, "\n\r\x00") || !utf8.ValidString(got) {
			t.Fatalf("Quote(%q, %d) = %q: not escaped", s, n, got)
		}
		lit := strings.TrimSuffix(got, untrusted.Mark)
		back, err := strconv.Unquote(lit)
		if err != nil || !strings.HasPrefix(s, back) {
			t.Fatalf("Quote(%q, %d) = %q: not the literal of a prefix (%v)", s, n, got, err)
		}
	})
}
