// Package mdsection replaces one level-2 section of a markdown document: how the bench and
// chaos tools keep their current tables in BENCHMARKS.md while leaving the rest alone.
//
// A section is a line starting with "## " (its heading) and every line after it up to the
// next such line outside a fenced code block, or the end of the document.
package mdsection

import "strings"

// section is one "## " section of a document: its heading line (without the newline) and
// the byte offsets of its start (the heading) and its end (the next heading, or the end).
type section struct {
	heading    string
	start, end int
}

// sections lists doc's "## " sections in order; a "## " line inside a fenced code block
// (``` or ~~~) starts none.
func sections(doc string) []section {
	var out []section
	fenced := false
	for off := 0; off < len(doc); {
		line := doc[off:]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fenced = !fenced
		case !fenced && strings.HasPrefix(line, "## "):
			if n := len(out); n > 0 {
				out[n-1].end = off
			}
			out = append(out, section{heading: strings.TrimRight(line, " \r"), start: off, end: len(doc)})
		}
		off += len(line) + 1
	}
	return out
}

// Replace returns doc with the section whose heading line is heading replaced by body
// under that heading: heading, a blank line, body (ending in one newline), a blank line.
// Every other byte of doc is kept. When doc has no such section, the new one goes right
// before the first section for whose heading before returns true (before may be nil), or
// at the end of doc.
func Replace(doc, heading, body string, before func(heading string) bool) string {
	heading = strings.TrimRight(heading, "\n")
	sec := heading + "\n\n" + strings.TrimRight(body, "\n") + "\n\n"
	all := sections(doc)
	for _, s := range all {
		if s.heading == heading && s.end == len(doc) {
			return strings.TrimRight(doc[:s.start]+sec, "\n") + "\n"
		}
		if s.heading == heading {
			return doc[:s.start] + sec + doc[s.end:]
		}
	}
	for _, s := range all {
		if before != nil && before(s.heading) {
			return doc[:s.start] + sec + doc[s.start:]
		}
	}
	switch {
	case doc == "":
	case strings.HasSuffix(doc, "\n\n"):
	case strings.HasSuffix(doc, "\n"):
		doc += "\n"
	default:
		doc += "\n\n"
	}
	return strings.TrimRight(doc+sec, "\n") + "\n"
}

// LineWidth is the longest line of prose the tools write (tables apart), as in the
// project's other documents.
const LineWidth = 100

// Wrap breaks text into lines of at most width bytes at spaces (a longer word stays whole
// on its own line), each ending in a newline.
func Wrap(text string, width int) string {
	var sb strings.Builder
	line := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(w) > width:
			sb.WriteByte('\n')
			line = 0
		default:
			sb.WriteByte(' ')
			line++
		}
		sb.WriteString(w)
		line += len(w)
	}
	sb.WriteByte('\n')
	return sb.String()
}
