package weights

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var rampStart = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func TestParseRamps(t *testing.T) {
	got, err := ParseRamps(`{"worker-b":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"5m","step":2},` +
		`"worker-a":{"direction":"down","start":"2026-12-03T10:00:00.5Z","duration":"10m0s","steps":4,"from":70,"holds":["m-2","m-1"]}}`)
	require.NoError(t, err)
	assert.Equal(t, []Ramp{
		{Cluster: "worker-a", Direction: RampDown, Start: rampStart.Add(500 * time.Millisecond), Duration: 10 * time.Minute, Steps: 4, From: 70, Holds: []string{"m-1", "m-2"}},
		{Cluster: "worker-b", Direction: RampUp, Start: rampStart, Duration: 5 * time.Minute, Steps: DefaultRampSteps, Step: 2},
	}, got, "sorted by cluster, steps defaulted, holds sorted")
	assert.JSONEq(t, `{"worker-a":{"direction":"down","start":"2026-12-03T10:00:00.5Z","duration":"10m0s","steps":4,"step":0,"from":70,"holds":["m-1","m-2"]},`+
		`"worker-b":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"5m0s","steps":10,"step":2}}`, EncodeRamps(got))
	again, err := ParseRamps(EncodeRamps(got))
	require.NoError(t, err)
	assert.Equal(t, got, again)

	none, err := ParseRamps(" ")
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.Empty(t, EncodeRamps(nil))

	const ok = `"start":"2026-12-03T10:00:00Z","duration":"1m"`
	for _, tt := range []struct{ value, want string }{
		{`{`, "unexpected end of JSON input"},
		{`{"Worker_A":{"direction":"up",` + ok + `}}`, `cluster "Worker_A"`},
		{`{"worker-a":{"direction":"sideways",` + ok + `}}`, `cluster worker-a: direction "sideways" must be "down" or "up"`},
		{`{"worker-a":{"direction":"up","start":"yesterday","duration":"1m"}}`, `start "yesterday" must be an RFC 3339 time`},
		{`{"worker-a":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"0s"}}`, `duration "0s" must be a positive duration of at most 24h0m0s`},
		{`{"worker-a":{"direction":"up","start":"2026-12-03T10:00:00Z","duration":"48h"}}`, `duration "48h"`},
		{`{"worker-a":{"direction":"up",` + ok + `,"steps":101}}`, `steps 101 must be between 1 and 100`},
		{`{"worker-a":{"direction":"up",` + ok + `,"steps":4,"step":5}}`, `step 5 must be between 0 and steps (4)`},
		{`{"worker-a":{"direction":"down",` + ok + `,"holds":["m"],"from":1000001}}`, `from 1000001 must be between 0 and 1000000`},
		{`{"worker-a":{"direction":"down",` + ok + `}}`, `holds must name the drains or taints a down ramp eases in`},
		{`{"worker-a":{"direction":"up",` + ok + `,"holds":["m"]}}`, `holds and from are for down ramps only`},
	} {
		_, err := ParseRamps(tt.value)
		require.ErrorIs(t, err, ErrInvalidRamp, tt.value)
		assert.Contains(t, err.Error(), tt.want, tt.value)
		assert.Contains(t, err.Error(), RampAnnotation)
	}
}

// A down ramp over every step: the ramping weight falls strictly and stays positive until the
// last step, which is exactly the drain's target; the other entries keep their ratio.
func TestRampScheduleDown(t *testing.T) {
	for _, tt := range []struct {
		name         string
		from, b, c   int32
		steps        int
		wantFactor   int32
		wantFirstTwo []int32
	}{
		{"divisible weights are not scaled", 100, 50, 30, 10, 1, []int32{100, 90}},
		{"small weights are scaled to stay exact", 1, 1, 2, 10, 10, []int32{10, 9}},
		{"three steps", 7, 3, 0, 3, 3, []int32{21, 14}},
		{"too large to scale: rounds up", 999_999, 1_000_000, 1, 10, 1, []int32{999_999, 900_000}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := Result{Entries: []EffectiveEntry{
				{Cluster: "worker-a", Weight: 0, Effective: 0, HeldBy: []string{"m-1"}}, // OME zeroed the weight at once
				{Cluster: "worker-b", Weight: tt.b, Effective: tt.b},
				{Cluster: "worker-c", Weight: tt.c, Effective: tt.c},
			}}
			prev := int32(-1)
			var shares []string
			for k := 0; k <= tt.steps; k++ {
				r := Ramp{Cluster: "worker-a", Direction: RampDown, Start: rampStart, Duration: time.Minute, Steps: tt.steps, Step: k, From: tt.from, Holds: []string{"m-1"}}
				got, progress := ApplyRamps(res, []Ramp{r})
				a := got.Entries[0].Effective
				if k == tt.steps {
					assert.Equal(t, res, got, "the last step is the drain's weights exactly")
					assert.Empty(t, progress)
					break
				}
				require.Len(t, progress, 1)
				if k < 2 {
					assert.Equal(t, tt.wantFirstTwo[k], a, "step %d", k)
				}
				assert.Positive(t, a, "step %d of %d stays positive", k, tt.steps)
				if prev >= 0 {
					assert.Less(t, a, prev, "step %d falls", k)
				}
				prev = a
				assert.Equal(t, tt.b*tt.wantFactor, got.Entries[1].Effective, "other entries scale by one factor")
				assert.Equal(t, tt.c*tt.wantFactor, got.Entries[2].Effective)
				assert.Equal(t, tt.from*tt.wantFactor, progress[0].Full)
				assert.Equal(t, a, progress[0].Weight)
				assert.Equal(t, r.StepTime(k+1), progress[0].Next)
				assert.Equal(t, rampStart.Add(time.Minute), progress[0].End)
				shares = append(shares, fmt.Sprint(progress[0].Percent()))
			}
			assert.Len(t, shares, tt.steps)
			assert.Equal(t, int32(0), res.Entries[0].Effective, "res is not modified")
		})
	}
}

func TestRampScheduleUp(t *testing.T) {
	res := Result{Entries: []EffectiveEntry{
		{Cluster: "worker-a", Weight: 3, Effective: 3},
		{Cluster: "worker-b", Weight: 5, Effective: 5},
	}}
	var got []int32
	for k := 0; k <= 4; k++ {
		out, _ := ApplyRamps(res, []Ramp{{Cluster: "worker-a", Direction: RampUp, Start: rampStart, Duration: time.Minute, Steps: 4, Step: k}})
		got = append(got, out.Entries[0].Effective, out.Entries[1].Effective)
	}
	// factor 4: worker-a 0, 3, 6, 9 of 12 against worker-b 20; then unscaled 3 against 5.
	assert.Equal(t, []int32{0, 20, 3, 20, 6, 20, 9, 20, 3, 5}, got)
}

func TestApplyRampsOnlyShapesWhatItEasesIn(t *testing.T) {
	ramp := func(cluster string, dir RampDirection, holds ...string) Ramp {
		return Ramp{Cluster: cluster, Direction: dir, Start: rampStart, Duration: time.Minute, Steps: 10, Step: 5, Holds: holds}
	}
	taint := Taint{Key: "maintenance", Value: "planned", Effect: EffectNoExecute}
	res := Result{Entries: []EffectiveEntry{
		{Cluster: "a-drained", Weight: 10, Effective: 0, HeldBy: []string{"m-1"}},
		{Cluster: "b-two-drains", Weight: 10, Effective: 0, HeldBy: []string{"m-1", "m-2"}},
		{Cluster: "c-tainted", Weight: 10, Effective: 0, Taints: []Taint{taint}},
		{Cluster: "d-undrained", Weight: 10, Effective: 10},
		{Cluster: "e-still-drained", Weight: 10, Effective: 0, HeldBy: []string{"m-3"}},
	}}
	got, progress := ApplyRamps(res, []Ramp{
		ramp("a-drained", RampDown, "m-1"),
		ramp("b-two-drains", RampDown, "m-1"), // m-2 was not ramped: it takes effect at once
		ramp("c-tainted", RampDown, taint.String()),
		ramp("d-undrained", RampDown, "m-1"), // undrained during the down ramp: full weight at once
		ramp("e-still-drained", RampUp),      // another hold remains: stays 0
		ramp("z-no-entry", RampDown, "m-9"),
	})
	var eff []int32
	for _, e := range got.Entries {
		eff = append(eff, e.Effective)
	}
	assert.Equal(t, []int32{5, 0, 5, 10, 0}, eff)
	require.Len(t, progress, 2)
	assert.Equal(t, "a-drained", progress[0].Cluster)
	assert.Equal(t, "c-tainted", progress[1].Cluster)
	assert.Equal(t, 50, progress[0].Percent())

	same, none := ApplyRamps(res, nil)
	assert.Equal(t, res, same)
	assert.Nil(t, none)
}

func TestAdvanceRamps(t *testing.T) {
	down := Ramp{Cluster: "worker-a", Direction: RampDown, Start: rampStart, Duration: 10 * time.Second, Steps: 10, Step: 3, From: 10, Holds: []string{"m-1"}}
	idle := Ramp{Cluster: "worker-b", Direction: RampUp, Start: rampStart, Duration: 10 * time.Second, Steps: 10}
	shaping := []RampProgress{{Cluster: "worker-a"}}

	next, changed, due := AdvanceRamps([]Ramp{down, idle}, shaping, rampStart.Add(3500*time.Millisecond))
	assert.False(t, changed, "step 4 is not due yet")
	assert.Equal(t, []Ramp{down, idle}, next)
	assert.Equal(t, rampStart.Add(4*time.Second), due)

	next, changed, due = AdvanceRamps([]Ramp{down, idle}, shaping, rampStart.Add(8*time.Second))
	assert.True(t, changed)
	assert.Equal(t, 4, next[0].Step, "one step at a time, even when behind the schedule")
	assert.Equal(t, 3, down.Step, "ramps is not modified")
	assert.Equal(t, rampStart.Add(5*time.Second), due, "step 5 is already due")

	last := down
	last.Step = 9
	next, changed, _ = AdvanceRamps([]Ramp{last, idle}, shaping, rampStart.Add(10*time.Second))
	assert.True(t, changed)
	assert.Empty(t, next, "the finished ramp and the idle ramp past its end are removed")

	next, changed, due = AdvanceRamps([]Ramp{idle}, nil, rampStart.Add(time.Second))
	assert.False(t, changed, "an idle ramp stays until its schedule ends")
	assert.Equal(t, []Ramp{idle}, next)
	assert.Equal(t, rampStart.Add(10*time.Second), due)
}
