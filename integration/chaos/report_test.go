package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteSection(t *testing.T) {
	const heading = "## Reliability: Published under overlapping faults (make chaos)\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"new file", "", heading + "\nT1\n\n"},
		{"appended", "# B\n\ntext\n", "# B\n\ntext\n\n" + heading + "\nT1\n\n"},
		{"replaced, the next section kept", "# B\n\n" + heading + "\nold\n\n## Next\nkeep\n", "# B\n\n" + heading + "\nT1\n\n## Next\nkeep\n"},
		{"replaced at the end", "# B\n\n" + heading + "\nold\n", "# B\n\n" + heading + "\nT1\n\n"},
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
	c.settleRaces(at.Add(40*time.Second), func(time.Time) time.Duration { return 0 })
	var lied []string
	for _, l := range c.lies {
		lied = append(lied, l.Map)
	}
	assert.Equal(t, []string{"chaos/late", "chaos/never"}, lied)
	assert.Equal(t, 300*time.Millisecond, c.races[0].Retracted)
	assert.Zero(t, c.races[3].Retracted, "not retracted yet, within the bound")
}

// The longest Published=False window waiting for sinks is attributed to every fault during
// which (or up to 5 s after which) it started, and to the workload alone when none; a window
// with a reason from the inputs is the workload's own.
func TestLongestFalse(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Second) }
	r := &result{
		faults: []injection{{Kind: faultAPIStall, Start: s(10), End: s(13)}, {Kind: faultFreeze, Start: s(40), End: s(45)}},
		checks: checkResults{Windows: []falseWindow{
			{Map: "a", Start: s(11), End: s(20), Reasons: []string{"Publishing"}},                    // the stall
			{Map: "z", Start: s(5), End: s(60), Reasons: []string{"Publishing"}},                     // started before any fault
			{Map: "b", Start: s(17), End: s(18), Reasons: []string{"Publishing", "XDSRejected"}},     // within 5 s after the stall
			{Map: "c", Start: s(30), End: s(32), Reasons: []string{"Publishing"}},                    // no fault
			{Map: "d", Start: s(44), End: s(50), Reasons: []string{"Publishing"}},                    // the freeze
			{Map: "e", Start: s(0), End: s(60), Reasons: []string{"Publishing", "HostnameConflict"}}, // the workload's input
		}},
	}
	count, longest := r.longestFalse()
	assert.Equal(t, map[string]int{faultAPIStall: 1, faultFreeze: 1}, count)
	assert.Equal(t, 9*time.Second, longest[faultAPIStall])
	assert.Equal(t, 6*time.Second, longest[faultFreeze])
	assert.Equal(t, 55*time.Second, longest[""])
	assert.Equal(t, time.Minute, longest["input"])
}
