package model

import (
	"errors"
	"fmt"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

// Inputs is everything one TrafficMap's effective weights are computed from. The publisher
// fills it from its caches; the operator commands fill it from the API, so both compute the
// same weights from the same objects.
type Inputs struct {
	// TrafficMap is the map; it is not modified.
	TrafficMap *v1beta1.TrafficMap
	// SourceAnnotations are the annotations of the InferenceService spec.service names.
	SourceAnnotations map[string]string
	// Recorded is the fallback state: the last valid drain set stands in for a malformed
	// drain annotation, the recorded taints and tolerations for malformed ones. It is read
	// from the publisher's own HTTPRoute (httproute.Recorded) or, with the HTTPRoute sink
	// off, from the publisher's record ConfigMap (RecordedFromData); zero records nothing.
	Recorded Recorded
	// Clusters are the taint sources' views of the workload clusters (InferenceClusterTaints,
	// WorkloadClusterTaints), in any order; those naming no entry cluster are ignored. The
	// service's tolerations are read from SourceAnnotations (weights.TolerationsAnnotation).
	Clusters []ClusterTaints
}

// Computed is the outcome of Compute.
type Computed struct {
	// Result holds the effective weights to publish now: while a ramp shapes an entry
	// (Progress), the ramp's current step.
	Result weights.Result
	// Final is where the weights end once every ramp is over: the weights of the drains,
	// taints and tolerations alone. It equals Result when no ramp shapes an entry.
	Final weights.Result
	// Ramps are the source's ramps (weights.RampAnnotation), sorted by cluster; Progress
	// is where each ramp that shapes Result stands.
	Ramps    []weights.Ramp
	Progress []weights.RampProgress
	// Drains is the drain set Result was computed with: the annotation's, or, when the
	// annotation is malformed, the last valid set recorded on the route.
	Drains []weights.Drain
	// DrainErr is the annotation's parse error, nil when it is absent or valid. When set,
	// Drains is the recorded fallback.
	DrainErr error
	// Taints are the taints Result was computed with, for every entry cluster (nil for an
	// untainted one): the sources' valid taints, or, for a cluster with a malformed source,
	// the last valid NoExecute taints recorded on the route.
	Taints map[string][]weights.Taint
	// TaintErr lists the malformed taint sources whose clusters use the recorded fallback;
	// nil when none.
	TaintErr error
	// Tolerations are the service tolerations Result was computed with (non-nil): the
	// annotation's, or, when it is malformed, the list recorded on the route.
	Tolerations []weights.Toleration
	// TolerationErr is the tolerations annotation's parse error; when set, Tolerations is
	// the recorded fallback.
	TolerationErr error
}

// ErrNoDrainFallback means the drain annotation is malformed and nothing records a last
// valid drain set (Inputs.Recorded), so no weights can be
// computed: a malformed drain is never "no drains".
var ErrNoDrainFallback = errors.New("no route was published before, so there is no last valid drain set to keep and nothing is published")

// Compute returns the effective weights for in. It is pure. Errors: ErrNoDrainFallback,
// ErrNoTolerationFallback or ErrNoTaintFallback (wrapped with the parse error),
// weights.ErrInvalidRamp for a malformed ramp annotation (nothing is published: a ramp is
// never dropped silently), or the weights validation error for an invalid map.
func Compute(in Inputs) (Computed, error) {
	var c Computed
	drains, err := parseDrainAnnotation(in.SourceAnnotations)
	if err != nil {
		fb := in.Recorded
		recorded, ok := fb.Drains, fb.HasDrains
		if !ok {
			return c, fmt.Errorf("annotation %s: %w; %w", weights.DrainAnnotation, err, ErrNoDrainFallback)
		}
		drains, c.DrainErr = recorded, fmt.Errorf("annotation %s: %w", weights.DrainAnnotation, err)
	}
	c.Drains = drains
	if err := fleetInputs(in, &c); err != nil {
		return Computed{}, err
	}
	c.Final, err = weights.Compute(weights.Input{Entries: entries(in.TrafficMap), Drains: drains, Taints: c.Taints, Tolerations: c.Tolerations})
	if err != nil {
		return Computed{}, err
	}
	if c.Ramps, err = weights.ParseRamps(in.SourceAnnotations[weights.RampAnnotation]); err != nil {
		return Computed{}, fmt.Errorf("annotation %s: %w", weights.RampAnnotation, err)
	}
	c.Result, c.Progress = weights.ApplyRamps(c.Final, c.Ramps)
	return c, nil
}

func parseDrainAnnotation(annotations map[string]string) ([]weights.Drain, error) {
	v, ok := annotations[weights.DrainAnnotation]
	if !ok {
		return nil, nil
	}
	return weights.ParseDrains(v)
}

func entries(tm *v1beta1.TrafficMap) []weights.Entry {
	out := make([]weights.Entry, len(tm.Spec.Entries))
	for i, e := range tm.Spec.Entries {
		out[i] = weights.Entry{Cluster: e.Cluster, Endpoint: e.Endpoint, Weight: int64(e.Weight), DrainRefs: e.DrainRefs}
	}
	return out
}

// ReadsSourceAnnotation reports whether the publisher reads the InferenceService annotation
// key: the drains, ramps and tolerations Compute reads from Inputs.SourceAnnotations, and
// the global hostname (v1beta1.AnnotationGlobalHost). A cache of InferenceServices may drop
// every other annotation without changing a decision.
func ReadsSourceAnnotation(key string) bool {
	switch key {
	case weights.DrainAnnotation, weights.RampAnnotation, weights.TolerationsAnnotation, v1beta1.AnnotationGlobalHost:
		return true
	}
	return false
}
