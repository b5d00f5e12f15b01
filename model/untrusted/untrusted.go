// Package untrusted makes text that a client or tenant chose (an xDS node id, a NACK's
// error_detail, a resource name, a type URL) safe to put in a status condition, an Event or
// a log line: Quote escapes it (no raw newline, quote or control character reaches the
// reader) and shortens it to a documented number of bytes, marking the cut; Cut only
// shortens. Every place that shows such text uses these, with MaxID or MaxMessage. Pure:
// standard library only.
package untrusted

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds, in bytes, of client-chosen text as shown (Quote's result, quotes and mark
// included; Cut's result, mark included).
const (
	// MaxID bounds an identifier: a node id, a stream name, a resource name, a type URL,
	// a version.
	MaxID = 128
	// MaxMessage bounds a message: a NACK's error_detail.
	MaxMessage = 512
)

// Mark ends text that was shortened.
const Mark = "…"

// Cut returns s shortened to at most n bytes at a UTF-8 boundary, ending in Mark when it
// was cut (the mark counts in n). Invalid UTF-8 in the kept part is dropped. Cut does not
// escape: use Quote for text a reader sees.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < len(Mark) {
		return Mark[:0]
	}
	return strings.ToValidUTF8(s[:n-len(Mark)], "") + Mark
}

// Quote returns s as a double-quoted Go string literal (strconv.Quote: quotes, backslashes,
// control and non-printable characters and invalid UTF-8 escaped) of at most n bytes: when
// the literal of s is longer, it is the literal of the longest prefix of s (whole
// characters) that fits, followed by Mark after the closing quote. n below 2+len(Mark)
// is taken as 2+len(Mark). The work is bounded by n, not by len(s).
func Quote(s string, n int) string {
	n = max(n, 2+len(Mark))
	if len(s) <= n {
		if q := strconv.Quote(s); len(q) <= n {
			return q
		}
	}
	budget := n - 2 - len(Mark) // the escaped characters between the quotes
	b := make([]byte, 0, n)
	b = append(b, '"')
	var tmp [16]byte
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		esc := strconv.AppendQuote(tmp[:0], s[i:i+w])
		esc = esc[1 : len(esc)-1]
		if len(b)-1+len(esc) > budget {
			break
		}
		b = append(b, esc...)
		i += w
	}
	b = append(b, '"')
	return string(append(b, Mark...))
}
