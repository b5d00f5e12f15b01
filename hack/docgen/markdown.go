package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// doc accumulates a Markdown page.
type doc struct{ bytes.Buffer }

// newDoc starts a page with the generated-code header, its title and its purpose.
func newDoc(title, purpose string) *doc {
	d := &doc{}
	d.WriteString(header)
	fmt.Fprintf(d, "# %s\n\n%s\n%s\n", title, wrap(purpose), wrap(regenerate))
	return d
}

// para writes a paragraph: its lines of prose are joined and wrapped at maxLine columns, an
// empty line separates paragraphs and the lines of a fenced code block are kept as given.
func (d *doc) para(lines ...string) {
	var out, prose []string
	flush := func() {
		if len(prose) > 0 {
			out = append(out, wrap(strings.Join(prose, " ")))
			prose = nil
		}
	}
	fenced := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "```"):
			flush()
			fenced = !fenced
			out = append(out, l)
		case fenced:
			out = append(out, l)
		case l == "":
			flush()
			out = append(out, l)
		default:
			prose = append(prose, l)
		}
	}
	flush()
	d.WriteString("\n" + strings.Join(out, "\n") + "\n")
}

// maxLine is the longest line of prose (the house rule for Markdown).
const maxLine = 100

// word is a word of prose; a Markdown link is one word, so that no link is broken.
var word = regexp.MustCompile(`\[[^\]]*\]\([^)]*\)\S*|\S+`)

// wrap breaks s between words so that no line is longer than maxLine, unless one word is.
func wrap(s string) string {
	if len(s) <= maxLine {
		return s
	}
	var b strings.Builder
	n := 0
	for _, w := range word.FindAllString(s, -1) {
		switch {
		case n == 0:
		case n+1+len(w) > maxLine:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// table writes a Markdown table with head as its header row.
func (d *doc) table(head []string, rows [][]string) {
	d.WriteString("\n| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		d.WriteString(" --- |")
	}
	d.WriteString("\n")
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = cell(c)
		}
		d.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
}

// cell makes s safe inside a table cell: one line, pipes escaped, and outside code spans
// "<" escaped, so that a placeholder such as <name> is not taken for HTML.
func cell(s string) string {
	parts := strings.Split(strings.Join(strings.Fields(s), " "), "`")
	for i := 0; i < len(parts); i += 2 { // the even parts are outside code spans
		parts[i] = strings.ReplaceAll(parts[i], "<", `\<`)
	}
	return strings.ReplaceAll(strings.Join(parts, "`"), "|", `\|`)
}

// code renders s as inline code, or "" for an empty s. A value holding a backtick is
// wrapped in double backticks.
func code(s string) string {
	switch {
	case s == "":
		return ""
	case strings.Contains(s, "`"):
		return "`` " + s + " ``"
	default:
		return "`" + s + "`"
	}
}
