package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchDoc is a small BENCHMARKS.md in the published layout.
const benchDoc = `# Benchmarks

## Method

how

## Results: N = 1,000, realistic mix

old 1000 realistic

## Results: N = 10,000, stress mix

old 10000 stress

## Chaos run

chaos table

## History

- one
`

// A run replaces the section of its N and mix and nothing else; a missing one is added
// in N and mix order, after the method and before what follows the results.
func TestReportWrite(t *testing.T) {
	for _, tc := range []struct {
		name, old string
		n         int
		mix       string
		// where the new section starts: right after this text of old
		after string
		// the section whose body was replaced, empty when the section was added
		replaced string
	}{
		{name: "replaces its own section", old: benchDoc, n: 1000, mix: "realistic", replaced: "old 1000 realistic"},
		{name: "replaces a section in the middle", old: benchDoc, n: 10000, mix: "stress", replaced: "old 10000 stress"},
		{name: "adds N = 1,000 stress after N = 1,000 realistic", old: benchDoc, n: 1000, mix: "stress", after: "old 1000 realistic\n\n"},
		{name: "adds N = 10,000 realistic before N = 10,000 stress", old: benchDoc, n: 10000, mix: "realistic", after: "old 1000 realistic\n\n"},
		{name: "adds N = 100,000 after the results, before the chaos run", old: benchDoc, n: 100000, mix: "realistic", after: "old 10000 stress\n\n"},
		{name: "adds N = 100 after the method", old: benchDoc, n: 100, mix: "stress", after: "how\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
			require.NoError(t, os.WriteFile(path, []byte(tc.old), 0o644))
			r := testReport(tc.n, tc.mix)
			require.NoError(t, r.write(path))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			got := string(b)

			section := r.meta.heading() + "\n\n" + r.markdown() + "\n"
			assert.Contains(t, got, section)
			assert.Equal(t, 1, strings.Count(got, r.meta.heading()+"\n"), "one section per N and mix")
			if tc.replaced != "" {
				assert.Equal(t, strings.Replace(tc.old, tc.replaced+"\n", r.markdown(), 1), got)
				return
			}
			i := strings.Index(tc.old, tc.after) + len(tc.after)
			assert.Equal(t, tc.old[:i]+section+tc.old[i:], got)
		})
	}
}

// A run writing to a file that does not exist yet makes a document of its section alone.
func TestReportWriteNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	r := testReport(1000, "stress")
	require.NoError(t, r.write(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "# Benchmarks\n\n## Results: N = 1,000, stress mix\n\n"+
		"N = 1,000 maps x 8 clusters, C = 100 xDS clients, stress mix: who.\n"+
		"Measured 2026-12-04 at abc1234 on 2 cores, go1.26.8; phases cold, memory. Publisher flags:\n`--workers 8`.\n"+
		"Written by `go run ./integration/bench`: the next run of this N and mix replaces this section.\n\n"+
		"| Figure | Measured | Target | Met |\n|---|---|---|---|\n"+
		"| P2 cold start | 49s | <= 23.8s | **no** |\n", string(got))
}

func testReport(n int, mix string) *report {
	r := &report{meta: runMeta{N: n, C: 100, Mix: mix + " mix: who", MixName: mix, Cores: 2,
		Date: "2026-12-04", Go: "go1.26.8", Commit: "abc1234", Phases: "cold, memory", Flags: "--workers 8"}}
	r.add("P2 cold start", "49s", "<= 23.8s", false)
	return r
}

// The heading of each N and mix is the one other documents link to.
func TestRunMetaHeading(t *testing.T) {
	for _, tc := range []struct {
		n    int
		mix  string
		want string
	}{
		{100, "stress", "## Results: N = 100, stress mix"},
		{1000, "realistic", "## Results: N = 1,000, realistic mix"},
		{10000, "stress", "## Results: N = 10,000, stress mix"},
		{1234567, "realistic", "## Results: N = 1,234,567, realistic mix"},
	} {
		m := runMeta{N: tc.n, MixName: tc.mix}
		assert.Equal(t, tc.want, m.heading())
		n, mix, ok := resultsKey(m.heading())
		assert.True(t, ok)
		assert.Equal(t, tc.n, n)
		assert.Equal(t, tc.mix, mix)
	}
	_, _, ok := resultsKey("## Results of something else")
	assert.False(t, ok)
}
