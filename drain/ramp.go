package drain

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/weights"
)

// ErrRampAnnotation refuses a --ramp on a service whose ramp annotation the publisher
// cannot read: starting a ramp over it would lose the ramps it holds.
var ErrRampAnnotation = errors.New("ramp refused: the existing " + weights.RampAnnotation + " annotation is malformed; fix or remove it first")

// ErrRampDuration refuses a --ramp duration or step count out of bounds.
var ErrRampDuration = fmt.Errorf("ramp refused: --ramp must be a duration of at least 1s and at most %s, and --ramp-steps between 1 and %d",
	weights.MaxRampDuration, weights.MaxRampSteps)

// RampSpec is what the operator asked for with --ramp: ease the change in over Duration in
// Steps equal steps.
type RampSpec struct {
	Duration time.Duration
	Steps    int
}

// Validate checks the bounds of s.
func (s RampSpec) Validate() error {
	if s.Duration < time.Second || s.Duration > weights.MaxRampDuration || s.Steps < 1 || s.Steps > weights.MaxRampSteps {
		return ErrRampDuration
	}
	return nil
}

// RampChange is the change of the publisher's ramp annotation (weights.RampAnnotation) that
// goes with a drain, undrain, taint or untaint so the publisher eases it in. The publisher
// then publishes the steps, each once the one before is in place on every sink, and keeps
// Published False (reason Ramping) until the last.
type RampChange struct {
	// Ramp is the cluster's ramp after the change.
	Ramp weights.Ramp
	// Op and Value are the annotation change (Value "" with OpRemove).
	Op    Op
	Value string
}

// PlanRamp returns the ramp annotation change, on a service with annotations, that eases
// in a drain (dir down) or an undrain (dir up) of cluster by hold (a drain ID, or a taint
// as weights.Taint.String) over spec, started at now. from is the cluster's effective
// weight before a drain, ignoring ramps (the weight it ramps down from).
//
// What a ramp already under way for the cluster does:
//   - down, and another ramped drain comes: hold joins the ramp, whose schedule stays;
//   - the other direction (an undrain during a down ramp, a drain during an up ramp): the
//     new ramp starts from the share the old one had reached (step Steps−k, its start set
//     back to match), so the weight turns around without a jump;
//   - an undrain removes hold from every down ramp of the cluster (a down ramp left with no
//     hold ends).
//
// A nil change and a nil error mean there is nothing to ramp: a drain of a cluster with no
// traffic (from 0), or an undrain that leaves the cluster held by something else
// (stillHeld).
func PlanRamp(annotations map[string]string, dir weights.RampDirection, cluster, hold string, from int32, stillHeld bool, spec RampSpec, now time.Time) (*RampChange, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	raw, present := annotations[weights.RampAnnotation]
	ramps, err := weights.ParseRamps(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRampAnnotation, err)
	}
	i := slices.IndexFunc(ramps, func(r weights.Ramp) bool { return r.Cluster == cluster })
	var old *weights.Ramp
	if i >= 0 {
		old = &ramps[i]
	}
	fresh := weights.Ramp{Cluster: cluster, Direction: dir, Start: now.UTC(), Duration: spec.Duration, Steps: spec.Steps}
	var next *weights.Ramp
	switch dir {
	case weights.RampDown:
		switch {
		case from <= 0:
			return nil, nil
		case old != nil && !old.Done() && old.Direction == weights.RampDown:
			r := *old
			r.Holds = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(r.Holds), hold))))
			next = &r
		default:
			fresh.From, fresh.Holds = from, []string{hold}
			turnAround(&fresh, old)
			next = &fresh
		}
	case weights.RampUp:
		if old != nil && old.Direction == weights.RampDown {
			left := slices.DeleteFunc(slices.Clone(old.Holds), func(h string) bool { return h == hold })
			if len(left) > 0 || stillHeld {
				if len(left) == 0 {
					return remove(ramps, i, present)
				}
				r := *old
				r.Holds = left
				next = &r
				break
			}
		}
		if stillHeld {
			return nil, nil
		}
		turnAround(&fresh, old)
		next = &fresh
	default:
		return nil, fmt.Errorf("ramp direction %q must be %q or %q", dir, weights.RampDown, weights.RampUp)
	}
	if i >= 0 {
		ramps[i] = *next
	} else {
		ramps = append(ramps, *next)
	}
	op := OpAdd
	if present {
		op = OpReplace
	}
	return &RampChange{Ramp: *next, Op: op, Value: weights.EncodeRamps(ramps)}, nil
}

// turnAround starts r from the share a ramp under way in the other direction reached.
func turnAround(r *weights.Ramp, old *weights.Ramp) {
	if old == nil || old.Done() || old.Direction == r.Direction {
		return
	}
	r.Step = r.Steps - old.Step*r.Steps/old.Steps
	r.Start = r.Start.Add(-time.Duration(int64(r.Duration) * int64(r.Step) / int64(r.Steps)))
}

// remove is the change that drops ramps[i].
func remove(ramps []weights.Ramp, i int, present bool) (*RampChange, error) {
	r := ramps[i]
	r.Step = r.Steps
	left := slices.Delete(slices.Clone(ramps), i, i+1)
	if len(left) == 0 && present {
		return &RampChange{Ramp: r, Op: OpRemove}, nil
	}
	return &RampChange{Ramp: r, Op: OpReplace, Value: weights.EncodeRamps(left)}, nil
}

// RampTarget is an InferenceService a ramp change is written to, as read.
type RampTarget struct {
	Namespace, Name, UID, ResourceVersion string
}

// RampPatch is the JSON merge patch that sets (or, for OpRemove, removes) the ramp
// annotation on t, guarded by its UID and resourceVersion like Plan.Patch.
func (c *RampChange) RampPatch(t RampTarget) []byte {
	var value *string
	if c.Op != OpRemove {
		value = &c.Value
	}
	doc := mergePatch{Metadata: mergeMetadata{UID: types.UID(t.UID), ResourceVersion: t.ResourceVersion,
		Annotations: map[string]*string{weights.RampAnnotation: value}}}
	b, _ := json.Marshal(doc) // strings only: cannot fail
	return b
}

// Describe says in words what the ramp does, for previews.
func (c *RampChange) Describe() string {
	r := c.Ramp
	if r.Done() {
		return fmt.Sprintf("the ramp of %s ends: no hold is left for it", r.Cluster)
	}
	span := "100% -> 0%"
	if r.Direction == weights.RampUp {
		span = "0% -> 100%"
	}
	s := fmt.Sprintf("%s %s of its weight in %d steps over %s, a step every %s once the step before is in place on every sink",
		r.Cluster, span, r.Steps, r.Duration, r.Duration/time.Duration(r.Steps))
	if r.Step > 0 {
		s += fmt.Sprintf(", from step %d (where the ramp under way had reached)", r.Step)
	}
	return s + "; PUBLISHED stays False (reason Ramping) until the last step"
}
