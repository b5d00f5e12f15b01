package mdsection

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReplace(t *testing.T) {
	const doc = "# B\n\nintro\n\n## Method\n\nhow\n\n## Results: A\n\nold A\n\n## Results: C\n\nold C\n\n```sh\n## not a heading\n```\n\n## History\n\n- one\n"
	beforeC := func(h string) bool { return h == "## Results: C" || h == "## History" }
	for _, tc := range []struct {
		name, doc, heading string
		before             func(string) bool
		want               string
	}{
		{"replaces the right section, leaves the others", doc, "## Results: A", beforeC,
			strings.Replace(doc, "old A", "NEW", 1)},
		{"a heading inside a fenced block does not end a section", doc, "## Results: C", nil,
			"# B\n\nintro\n\n## Method\n\nhow\n\n## Results: A\n\nold A\n\n## Results: C\n\nNEW\n\n## History\n\n- one\n"},
		{"replaces the last section", doc, "## History", nil,
			"# B\n\nintro\n\n## Method\n\nhow\n\n## Results: A\n\nold A\n\n## Results: C\n\nold C\n\n```sh\n## not a heading\n```\n\n## History\n\nNEW\n"},
		{"adds a missing section before the first that sorts after it", doc, "## Results: B", beforeC,
			strings.Replace(doc, "## Results: C", "## Results: B\n\nNEW\n\n## Results: C", 1)},
		{"adds a missing section at the end when none sorts after it", doc, "## Results: Z", nil,
			doc + "\n## Results: Z\n\nNEW\n"},
		{"adds to a document without a newline at its end", "# B", "## Results: A", beforeC,
			"# B\n\n## Results: A\n\nNEW\n"},
		{"adds to an empty document", "", "## Results: A", beforeC, "## Results: A\n\nNEW\n"},
		{"a heading that only starts the same is another section", "## Results: AB\n\nx\n", "## Results: A", nil,
			"## Results: AB\n\nx\n\n## Results: A\n\nNEW\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Replace(tc.doc, tc.heading, "NEW\n", tc.before))
		})
	}
}

// Replacing a section with what it holds changes nothing, so a run that measures the same
// leaves the document as it was.
func TestReplaceIsStable(t *testing.T) {
	const doc = "# B\n\n## One\n\nbody one\n\n## Two\n\nbody two\n"
	assert.Equal(t, doc, Replace(doc, "## One", "body one", nil))
	assert.Equal(t, doc, Replace(doc, "## Two", "body two\n\n", nil))
}

// Prose lines stay within the width; a word longer than the width is not cut.
func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		text  string
		width int
		want  string
	}{
		{"one two three", 100, "one two three\n"},
		{"one two three", 7, "one two\nthree\n"},
		{"one  two\nthree", 8, "one two\nthree\n"},
		{"a verylongword b", 4, "a\nverylongword\nb\n"},
	} {
		assert.Equal(t, tc.want, Wrap(tc.text, tc.width), tc.text)
	}
}
