package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// RampAnnotation is the InferenceService annotation, owned by the publisher, that holds
// gradual drains and undrains: a JSON object keyed by workload cluster, for example
//
//	{"worker-a":{"direction":"down","start":"2026-12-03T10:00:00Z","duration":"10m0s",
//	  "steps":10,"step":3,"from":100,"holds":["maint-1"]}}
//
// The operator commands write it with step 0 in the same patch as the drain (or undrain);
// the publisher moves step on, one at a time, once the current step is in place on every
// sink and its time has come, and removes the cluster's ramp when it ends. OME's drain
// annotation stays exactly what OME accepts: a ramp only shapes the weights the publisher
// publishes on the way to what that annotation says.
const RampAnnotation = "publisher.trafficmap.dev/ramp"

// DefaultRampSteps is how many equal steps a ramp moves a cluster's weight in.
const DefaultRampSteps = 10

// MaxRampSteps bounds Ramp.Steps.
const MaxRampSteps = 100

// MaxRampDuration bounds a ramp.
const MaxRampDuration = 24 * time.Hour

// RampDirection says which way a ramp moves a cluster's weight.
type RampDirection string

const (
	// RampDown moves a drained cluster's weight from its weight before the drain to 0.
	RampDown RampDirection = "down"
	// RampUp moves an undrained cluster's weight from 0 to its effective weight.
	RampUp RampDirection = "up"
)

// Ramp is one cluster's gradual drain (down) or undrain (up). Its schedule: step k of Steps
// is due at StepTime(k); the weight at step k is a share (Steps-k)/Steps (down) or k/Steps
// (up) of the cluster's full weight.
type Ramp struct {
	Cluster   string
	Direction RampDirection
	Start     time.Time
	Duration  time.Duration
	// Steps is how many steps the ramp takes (1..MaxRampSteps); Step how many it has taken
	// (0..Steps), moved on by the publisher only once the step before is in place.
	Steps, Step int
	// From (down ramps) is the cluster's effective weight before the drain: OME's routing
	// controller may set the entry's weight to 0 at once. 0 means the entry's weight.
	From int32
	// Holds (down ramps) are what the ramp eases in: drain IDs and taints (Taint.String).
	// The ramp shapes the entry's weight only while everything holding it is listed here,
	// so a drain or taint that was not ramped takes effect at once. Sorted.
	Holds []string
}

// ErrInvalidRamp marks a ramp annotation that does not parse or breaks a rule.
var ErrInvalidRamp = errors.New("invalid ramp annotation")

type rampJSON struct {
	Direction RampDirection `json:"direction"`
	Start     string        `json:"start"`
	Duration  string        `json:"duration"`
	Steps     int           `json:"steps,omitempty"`
	Step      int           `json:"step"`
	From      int64         `json:"from,omitempty"`
	Holds     []string      `json:"holds,omitempty"`
}

// ParseRamps parses a RampAnnotation value into ramps sorted by cluster. Every problem is
// reported, naming the cluster, the field and the rule; an empty value has no ramps. Steps
// defaults to DefaultRampSteps.
func ParseRamps(value string) ([]Ramp, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var raw map[string]rampJSON
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidRamp, RampAnnotation, err)
	}
	var out []Ramp
	var problems []string
	for _, cluster := range slices.Sorted(maps.Keys(raw)) {
		r := raw[cluster]
		bad := func(format string, args ...any) {
			problems = append(problems, "cluster "+cluster+": "+fmt.Sprintf(format, args...))
		}
		if err := checkCluster(cluster); err != nil {
			problems = append(problems, fmt.Sprintf("cluster %q: %s", cluster, err))
			continue
		}
		if r.Direction != RampDown && r.Direction != RampUp {
			bad("direction %q must be %q or %q", r.Direction, RampDown, RampUp)
		}
		start, err := time.Parse(time.RFC3339Nano, r.Start)
		if err != nil {
			bad("start %q must be an RFC 3339 time", r.Start)
		}
		d, err := time.ParseDuration(r.Duration)
		if err != nil || d <= 0 || d > MaxRampDuration {
			bad("duration %q must be a positive duration of at most %s", r.Duration, MaxRampDuration)
		}
		if r.Steps == 0 {
			r.Steps = DefaultRampSteps
		}
		if r.Steps < 1 || r.Steps > MaxRampSteps {
			bad("steps %d must be between 1 and %d", r.Steps, MaxRampSteps)
		}
		if r.Step < 0 || r.Step > r.Steps {
			bad("step %d must be between 0 and steps (%d)", r.Step, r.Steps)
		}
		if r.From < 0 || r.From > MaxWeight {
			bad("from %d must be between 0 and %d", r.From, MaxWeight)
		}
		if r.Direction == RampDown && len(r.Holds) == 0 {
			bad("holds must name the drains or taints a down ramp eases in")
		}
		if r.Direction == RampUp && (len(r.Holds) > 0 || r.From != 0) {
			bad("holds and from are for down ramps only")
		}
		out = append(out, Ramp{Cluster: cluster, Direction: r.Direction, Start: start, Duration: d,
			Steps: r.Steps, Step: r.Step, From: int32(min(max(r.From, 0), MaxWeight)), Holds: slices.Sorted(slices.Values(r.Holds))})
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w %s: %s", ErrInvalidRamp, RampAnnotation, strings.Join(problems, "; "))
	}
	return out, nil
}

// EncodeRamps is the RampAnnotation value of ramps ("" for none); deterministic.
func EncodeRamps(ramps []Ramp) string {
	if len(ramps) == 0 {
		return ""
	}
	raw := make(map[string]rampJSON, len(ramps))
	for _, r := range ramps {
		raw[r.Cluster] = rampJSON{Direction: r.Direction, Start: r.Start.UTC().Format(time.RFC3339Nano), Duration: r.Duration.String(),
			Steps: r.Steps, Step: r.Step, From: int64(r.From), Holds: r.Holds}
	}
	b, _ := json.Marshal(raw) // strings and numbers only: cannot fail; keys are sorted
	return string(b)
}

// StepTime is when step k of the ramp is due.
func (r Ramp) StepTime(k int) time.Time {
	if r.Steps <= 0 {
		return r.Start.Add(r.Duration)
	}
	return r.Start.Add(time.Duration(int64(r.Duration) * int64(k) / int64(r.Steps)))
}

// End is when the ramp's last step is due.
func (r Ramp) End() time.Time { return r.Start.Add(r.Duration) }

// Done reports whether the ramp has taken all its steps.
func (r Ramp) Done() bool { return r.Step >= r.Steps }

// RampProgress is where one ramp that shapes an entry's weight stands.
type RampProgress struct {
	Cluster   string
	Direction RampDirection
	// Step of Steps is in the published weights.
	Step, Steps int
	// Weight is the entry's published weight at Step; Full its weight in the same units
	// with no ramp (the weight before the drain, or the undrained weight). Weight/Full is
	// the share of its traffic the cluster keeps.
	Weight, Full int32
	// Next is when the next step is due; End when the ramp reaches its last step.
	Next, End time.Time
}

// Percent is the cluster's share of its full weight at this step, rounded down.
func (p RampProgress) Percent() int {
	if p.Full <= 0 {
		return 0
	}
	return int(int64(p.Weight) * 100 / int64(p.Full))
}

// rampBase is the weight ramp r moves e between and 0, or 0 when r does not shape e now:
// it is done, or e is in the other state (a down ramp applies to an entry held only by what
// the ramp eases in; an up ramp to an entry nothing holds).
func rampBase(r Ramp, e EffectiveEntry) int32 {
	if r.Done() {
		return 0
	}
	switch r.Direction {
	case RampDown:
		if e.Effective != 0 || !e.Drained() {
			return 0
		}
		for _, id := range e.HeldBy {
			if !slices.Contains(r.Holds, id) {
				return 0
			}
		}
		for _, t := range e.Taints {
			if !slices.Contains(r.Holds, t.String()) {
				return 0
			}
		}
		if r.From > 0 {
			return r.From
		}
		return e.Weight
	case RampUp:
		if e.Drained() {
			return 0
		}
		return e.Effective
	}
	return 0
}

// ApplyRamps returns res with the weights of the entries ramps shape at their current step,
// and the progress of each such ramp, sorted by cluster; res itself when no ramp shapes an
// entry. A ramp that is done, names no entry, or whose entry is in the other state (an
// undrain during a down ramp, a drain during an up ramp, a drain or taint the ramp does not
// list) changes nothing: res's weight stands at once.
//
// The weights stay integers and keep every ratio exact: the entries are scaled by the
// smallest factor that makes each ramping weight, base×(Steps−Step)/Steps down or
// base×Step/Steps up, an integer (the factor depends only on the bases and Steps, so a
// ramp's weights fall or rise monotonically). When that would exceed MaxWeight, nothing is
// scaled and ramping weights round up, so an intermediate step of a down ramp never reaches
// 0 early. res is not modified.
func ApplyRamps(res Result, ramps []Ramp) (Result, []RampProgress) {
	type shaped struct {
		i    int
		r    Ramp
		base int32
	}
	var todo []shaped
	factor := int64(1)
	for _, r := range ramps {
		i := slices.IndexFunc(res.Entries, func(e EffectiveEntry) bool { return e.Cluster == r.Cluster })
		if i < 0 {
			continue
		}
		base := rampBase(r, res.Entries[i])
		if base <= 0 {
			continue
		}
		todo = append(todo, shaped{i, r, base})
		need := int64(r.Steps) / gcd(int64(r.Steps), int64(base))
		factor = factor / gcd(factor, need) * need // lcm
	}
	if len(todo) == 0 {
		return res, nil
	}
	var top int64
	for _, e := range res.Entries {
		top = max(top, int64(e.Effective))
	}
	for _, s := range todo {
		top = max(top, int64(s.base))
	}
	if top*factor > MaxWeight {
		factor = 1
	}
	out := res
	out.Entries = slices.Clone(res.Entries)
	for i := range out.Entries {
		out.Entries[i].Effective = int32(int64(out.Entries[i].Effective) * factor)
	}
	progress := make([]RampProgress, 0, len(todo))
	for _, s := range todo {
		full := int64(s.base) * factor
		taken := int64(s.r.Step)
		if s.r.Direction == RampDown {
			taken = int64(s.r.Steps - s.r.Step)
		}
		w := int32(ceilDiv(full*taken, int64(s.r.Steps)))
		out.Entries[s.i].Effective = w
		progress = append(progress, RampProgress{Cluster: s.r.Cluster, Direction: s.r.Direction, Step: s.r.Step, Steps: s.r.Steps,
			Weight: w, Full: int32(full), Next: s.r.StepTime(s.r.Step + 1), End: s.r.End()})
	}
	slices.SortFunc(progress, func(a, b RampProgress) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out, progress
}

// AdvanceRamps is what the publisher does once the weights of ramps' current steps are in
// place on every sink: each ramp that shapes an entry (progress) and whose next step is due
// at now moves on one step, and is removed when that was its last; a ramp that shapes no
// entry is removed once its schedule has ended. It returns the ramps to store, whether they
// differ from ramps, and when the next step or removal is due (zero when none is; at or
// before now when one already is). ramps is not modified.
func AdvanceRamps(ramps []Ramp, progress []RampProgress, now time.Time) (next []Ramp, changed bool, due time.Time) {
	later := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	for _, r := range ramps {
		shaping := slices.ContainsFunc(progress, func(p RampProgress) bool { return p.Cluster == r.Cluster })
		switch {
		case shaping && !now.Before(r.StepTime(r.Step+1)):
			r.Step++
			changed = true
			if r.Done() {
				continue
			}
			later(r.StepTime(r.Step + 1))
		case shaping:
			later(r.StepTime(r.Step + 1))
		case !now.Before(r.End()):
			changed = true
			continue
		default:
			later(r.End())
		}
		next = append(next, r)
	}
	return next, changed, due
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
