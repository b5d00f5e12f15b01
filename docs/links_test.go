// Package docs_test checks the repository's Markdown: every relative link resolves to a file
// of the repository and, with a #fragment, to a heading of that file under GitHub's anchor
// rules.
package docs_test

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pending are pages other parts of issue 30 add (issue 30's plan names them): a plain link
// to one (no #fragment) is accepted while it does not exist. Once a page exists the test fails
// until it is removed from this list, so the list never hides a broken link for long.
var pending = map[string]bool{}

// TestRepositoryLinksResolve checks README.md, CONTRIBUTING.md, CHANGELOG.md, BENCHMARKS.md,
// docs/**/*.md and charts/publisher/README.md (those that exist).
func TestRepositoryLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	files := existing(root, "README.md", "CONTRIBUTING.md", "CHANGELOG.md", "BENCHMARKS.md",
		"charts/publisher/README.md")
	require.Contains(t, files, "README.md", "run from the docs directory of the repository")
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	require.NoError(t, err)

	assert.Empty(t, brokenLinks(root, files, pending))
	for page := range pending {
		_, err := os.Stat(filepath.Join(root, page))
		assert.True(t, os.IsNotExist(err), "%s exists now: remove it from pending in docs/links_test.go", page)
	}
}

// TestBrokenLinksAreReported shows on a scratch tree that each kind of broken link is found
// and that valid ones are not.
func TestBrokenLinksAreReported(t *testing.T) {
	page := "# Guide\n\n## Install with `Helm` (both modes)\n\n## Step 1\n\n## Step 1\n\n" +
		"```sh\n[not a link](missing.md)\n```\n"
	tests := []struct {
		name    string
		doc     string
		pending map[string]bool
		want    []string
	}{
		{name: "file and heading exist", doc: "[a](guide.md#install-with-helm-both-modes)"},
		{name: "same file anchor", doc: "# Top\n\nSee [top](#top)."},
		{name: "second duplicate heading", doc: "[a](guide.md#step-1-1)"},
		{name: "directory", doc: "[a](sub/)"},
		{name: "absolute URL is not checked", doc: "[a](https://example.com/missing.md#nowhere)"},
		{name: "link in a code span or fence", doc: "`[a](missing.md)`\n\n```\n[a](missing.md)\n```"},
		{name: "link text over two lines", doc: "[a\nb](guide.md#step-1)"},
		{name: "pending page", doc: "[a](later.md)", pending: map[string]bool{"later.md": true}},
		{name: "missing file", doc: "[a](missing.md)", want: []string{`doc.md: link "missing.md": no file missing.md`}},
		{name: "missing heading", doc: "[a](guide.md#nowhere)",
			want: []string{`doc.md: link "guide.md#nowhere": guide.md has no heading #nowhere`}},
		{name: "missing heading of this page", doc: "# Top\n\n[a](#bottom)",
			want: []string{`doc.md: link "#bottom": doc.md has no heading #bottom`}},
		{name: "third duplicate heading does not exist", doc: "[a](guide.md#step-1-2)",
			want: []string{`doc.md: link "guide.md#step-1-2": guide.md has no heading #step-1-2`}},
		{name: "fragment into a pending page", doc: "[a](later.md#x)", pending: map[string]bool{"later.md": true},
			want: []string{`doc.md: link "later.md#x": no file later.md`}},
		{name: "escaping the repository", doc: "[a](../outside.md)",
			want: []string{`doc.md: link "../outside.md": leaves the repository`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "guide.md"), []byte(page), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(root, "doc.md"), []byte(tt.doc), 0o644))
			assert.Equal(t, tt.want, brokenLinks(root, []string{"doc.md"}, tt.pending))
		})
	}
}

func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"Fleet drains: taints and tolerations", "fleet-drains-taints-and-tolerations"},
		{"Gradual drains (`--ramp`)", "gradual-drains---ramp"},
		{"Migrating from OME's publisher", "migrating-from-omes-publisher"},
		{"Deleting a TrafficMap: ordered teardown", "deleting-a-trafficmap-ordered-teardown"},
		{"Reliability: Published under overlapping faults (make chaos)",
			"reliability-published-under-overlapping-faults-make-chaos"},
		{"N = 1,000 maps x 8 clusters", "n--1000-maps-x-8-clusters"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"A [linked](other.md) **bold** word", "a-linked-bold-word"},
		{"Ünïcode letters stay", "ünïcode-letters-stay"},
		{"Trailing space ", "trailing-space"},
	}
	for _, tt := range tests {
		t.Run(tt.heading, func(t *testing.T) {
			assert.Equal(t, tt.want, slug(tt.heading))
		})
	}
}

// existing returns the names of files (slash-separated, relative to root) that exist.
func existing(root string, names ...string) []string {
	var out []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(root, n)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

var (
	fence      = regexp.MustCompile("(?m)^ {0,3}(```|~~~)[^\n]*\n(?s:.*?)^ {0,3}(```|~~~)[ \t]*$")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	atxHeading = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// brokenLinks returns one line per relative link in files (relative to root) that does not
// resolve: its file is missing (a pending file counts as present for a link without a
// fragment), it leaves root, or its fragment names no heading of the target.
func brokenLinks(root string, files []string, pending map[string]bool) []string {
	var problems []string
	anchors := map[string]map[string]bool{}
	for _, file := range files {
		text, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		for _, target := range links(string(text)) {
			if p := checkLink(root, file, target, pending, anchors); p != "" {
				problems = append(problems, fmt.Sprintf("%s: link %q: %s", file, target, p))
			}
		}
	}
	return problems
}

// links returns the targets of the inline links of a Markdown text, outside code.
func links(text string) []string {
	text = fence.ReplaceAllString(text, "")
	text = codeSpan.ReplaceAllString(text, "")
	var out []string
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkLink says why target, a link in file, does not resolve, or "" when it does.
func checkLink(root, file, target string, pending map[string]bool, anchors map[string]map[string]bool) string {
	if u, err := url.Parse(target); err == nil && (u.Scheme != "" || strings.HasPrefix(target, "//")) {
		return ""
	}
	pathPart, fragment, _ := strings.Cut(target, "#")
	resolved := file
	if pathPart != "" {
		p, err := url.PathUnescape(pathPart)
		if err != nil {
			return fmt.Sprintf("bad path: %v", err)
		}
		resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), p))
		if resolved == ".." || strings.HasPrefix(resolved, "../") {
			return "leaves the repository"
		}
	}
	info, err := os.Stat(filepath.Join(root, resolved))
	if err != nil {
		if fragment == "" && pending[resolved] {
			return ""
		}
		return "no file " + resolved
	}
	if fragment == "" || info.IsDir() {
		return ""
	}
	if _, ok := anchors[resolved]; !ok {
		text, err := os.ReadFile(filepath.Join(root, resolved))
		if err != nil {
			return err.Error()
		}
		anchors[resolved] = headingAnchors(string(text))
	}
	if !anchors[resolved][strings.ToLower(fragment)] {
		return fmt.Sprintf("%s has no heading #%s", resolved, fragment)
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives the ATX headings of a Markdown text: the
// slug of each, with -1, -2, ... appended to repeats.
func headingAnchors(text string) map[string]bool {
	text = fence.ReplaceAllString(text, "")
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range atxHeading.FindAllStringSubmatch(text, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor for a heading: the rendered text (links reduced to their text,
// code and emphasis marks dropped), lowercased, every character but letters, digits, spaces,
// '-' and '_' dropped, and spaces turned into '-'.
func slug(heading string) string {
	text := mdLink.ReplaceAllString(strings.TrimSpace(heading), "$1")
	text = strings.NewReplacer("`", "", "**", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
