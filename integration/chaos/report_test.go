package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run replaces the chaos run's section and nothing else; a missing one goes before the
// history, or at the end.
func TestWriteSection(t *testing.T) {
	const heading = "## Chaos run\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"new file", "", heading + "\nT1\n"},
		{"appended", "# B\n\ntext\n", "# B\n\ntext\n\n" + heading + "\nT1\n"},
		{"added before the history", "# B\n\n## Results: N = 1,000, stress mix\n\nr\n\n## History\n\n- h\n",
			"# B\n\n## Results: N = 1,000, stress mix\n\nr\n\n" + heading + "\nT1\n\n## History\n\n- h\n"},
		{"replaced, the sections around it kept", "# B\n\n## Results: N = 1,000, stress mix\n\nr\n\n" + heading + "\nold\n\nmore old\n\n## Next\nkeep\n",
			"# B\n\n## Results: N = 1,000, stress mix\n\nr\n\n" + heading + "\nT1\n\n## Next\nkeep\n"},
		{"replaced at the end", "# B\n\n" + heading + "\nold\n", "# B\n\n" + heading + "\nT1\n"},
		{"a longer heading is another section", "# B\n\n## Chaos runs elsewhere\n\nx\n", "# B\n\n## Chaos runs elsewhere\n\nx\n\n" + heading + "\nT1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "B.md")
			if tc.old != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.old), 0o644))
			}
			require.NoError(t, writeSection(path, "T1\n"))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

// A race (a True about the inputs just before a change during its write) stays a race only
// when the condition changes again within retractWithin.
func TestSettleRaces(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	c := newChecker(checkerConfig{Probes: func() []*probe { return nil }})
	c.races = []race{
		{Map: "chaos/retracted", RV: "10", At: at, Changed: 9},
		{Map: "chaos/late", RV: "20", At: at, Changed: 19},
		{Map: "chaos/never", RV: "30", At: at, Changed: 29},
		{Map: "chaos/recent", RV: "40", At: at.Add(39 * time.Second), Changed: 39},
	}
	c.changes["chaos/retracted"] = []time.Time{at.Add(-time.Second), at, at.Add(300 * time.Millisecond)}
	c.changes["chaos/late"] = []time.Time{at, at.Add(31 * time.Second)}
	c.settleRaces(at.Add(40*time.Second), func(time.Time, time.Duration) time.Duration { return 0 })
	var lied []string
	for _, l := range c.lies {
		lied = append(lied, l.Map)
	}
	assert.Equal(t, []string{"chaos/late", "chaos/never"}, lied)
	assert.Equal(t, 300*time.Millisecond, c.races[0].Retracted)
	assert.Zero(t, c.races[3].Retracted, "not retracted yet, within the bound")
}

// The time to publish after the inputs stopped moving (a False window waiting for sinks,
// from the last input change in it to its True) is attributed to every fault on during it
// or up to 5 s before it, and to the workload alone when none; a window with a reason from
// the inputs is the workload's own, measured whole.
func TestLongestFalse(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	sec := func(d int) time.Duration { return time.Duration(d) * time.Second }
	faults := []injection{{Kind: faultAPIStall, Start: s(10), End: s(13)}, {Kind: faultFreeze, Start: s(40), End: s(45)}}
	publishing := []string{"Publishing"}
	for _, tc := range []struct {
		name   string
		window falseWindow
		want   map[string]time.Duration
	}{
		{"started during a fault, inputs still", falseWindow{Start: s(11), End: s(20), Reasons: publishing},
			map[string]time.Duration{faultAPIStall: sec(9)}},
		{"no Settled: measured from the start", falseWindow{Start: s(11), End: s(20), Reasons: []string{"Publishing", "XDSRejected"}},
			map[string]time.Duration{faultAPIStall: sec(9)}},
		{"inputs moved until 5 s after the fault: not its cost", falseWindow{Start: s(11), Settled: s(18), End: s(20), Reasons: publishing},
			map[string]time.Duration{"": sec(2)}},
		{"inputs stopped within 5 s after the fault", falseWindow{Start: s(5), Settled: s(17), End: s(19), Reasons: publishing},
			map[string]time.Duration{faultAPIStall: sec(2)}},
		{"a fault that begins during the wait", falseWindow{Start: s(30), Settled: s(35), End: s(42), Reasons: publishing},
			map[string]time.Duration{faultFreeze: sec(7)}},
		{"a fault that begins at the True: not its cost", falseWindow{Start: s(30), Settled: s(35), End: s(40), Reasons: publishing},
			map[string]time.Duration{"": sec(5)}},
		{"inputs moving for a minute, then published at once", falseWindow{Start: s(0), Settled: s(58), End: s(60), Reasons: publishing},
			map[string]time.Duration{"": sec(2)}},
		{"the wait overlaps both faults", falseWindow{Start: s(2), Settled: s(12), End: s(41), Reasons: publishing},
			map[string]time.Duration{faultAPIStall: sec(29), faultFreeze: sec(29)}},
		{"no fault", falseWindow{Start: s(30), End: s(32), Reasons: publishing},
			map[string]time.Duration{"": sec(2)}},
		{"the workload's own input: the whole window", falseWindow{Start: s(0), Settled: s(59), End: s(60), Reasons: []string{"Publishing", "HostnameConflict"}},
			map[string]time.Duration{"input": time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &result{faults: faults, checks: checkResults{Windows: []falseWindow{tc.window}}}
			count, longest := r.longestFalse()
			assert.Equal(t, map[string]int{faultAPIStall: 1, faultFreeze: 1}, count)
			assert.Equal(t, tc.want, longest)
		})
	}
}

// Of several windows, the longest per kind counts.
func TestLongestFalseKeepsTheLongest(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	r := &result{
		faults: []injection{{Kind: faultAPIStall, Start: s(10), End: s(13)}},
		checks: checkResults{Windows: []falseWindow{
			{Map: "a", Start: s(11), End: s(14), Reasons: []string{"Publishing"}},
			{Map: "b", Start: s(0), Settled: s(12), End: s(20), Reasons: []string{"Publishing"}},
			{Map: "c", Start: s(12), End: s(15), Reasons: []string{"RouteNotAccepted"}},
		}},
	}
	_, longest := r.longestFalse()
	assert.Equal(t, map[string]time.Duration{faultAPIStall: 8 * time.Second}, longest)
}

// The run's section says what ran, at which commit, and keeps its prose within the width.
func TestMarkdownLines(t *testing.T) {
	r := &result{opts: options{maps: 200, seed: 9, duration: 30 * time.Minute, faultEvery: 10 * time.Second,
		opEvery: 250 * time.Millisecond, taintEvery: 25 * time.Second}, commit: "abc1234", refused: 7,
		probes: map[string]probeStats{"envoy-a envoy-sotw": {Responses: 1}, "grpc-a-delta grpc-delta": {Responses: 2}}}
	md := r.markdown(false)
	assert.True(t, strings.HasPrefix(md, "N = 200 maps, seed 9, 30m0s of faults."), md)
	assert.Contains(t, md, "-seed 9 -fault-every 10s")
	assert.Contains(t, md, " at abc1234, wall ")
	assert.Contains(t, md, "| **Lies** | **0** |")
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			assert.LessOrEqual(t, len(line), 100, line)
		}
	}
}

// The section in BENCHMARKS.md is brief: a lie is one row (its timeline is in the run's
// output), at most ten of them, and at most five items of each list.
func TestMarkdownBrief(t *testing.T) {
	r := &result{opts: options{maps: 200, seed: 9, duration: 30 * time.Minute}, commit: "abc1234"}
	for i := range 12 {
		r.checks.Lies = append(r.checks.Lies, lie{Map: fmt.Sprintf("chaos/svc-%04d", i), Rule: "True not retracted",
			Detail: strings.Repeat("x", 400), Timeline: "  a timeline\n"})
	}
	for i := range 7 {
		r.lost = append(r.lost, fmt.Sprintf("trafficmap chaos/svc-%04d", i))
	}
	brief, whole := r.markdown(true), r.markdown(false)
	assert.NotContains(t, brief, "a timeline")
	assert.Contains(t, whole, "a timeline")
	assert.Contains(t, brief, "| chaos/svc-0009 |")
	assert.NotContains(t, brief, "| chaos/svc-0010 |")
	assert.Contains(t, brief, "| ... and 2 more | | | |")
	assert.Contains(t, brief, "- ... and 2 more")
	assert.Contains(t, brief, strings.Repeat("x", 300)+"…")
	for _, line := range strings.Split(brief, "\n") {
		if !strings.HasPrefix(line, "|") {
			assert.LessOrEqual(t, len(line), 100, line)
		}
	}
}
