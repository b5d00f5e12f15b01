package model

import (
	"github.com/trafficmap/publisher/weights"
)

// The fallback state: the last valid drains, taints and tolerations a map was published
// with. With the HTTPRoute sink on it is read from the route's annotations; with the sink off
// the publisher keeps it in a ConfigMap of its own (the record), so a malformed input after a
// restart still keeps the last valid state.

// Data keys of the record ConfigMap. Each holds the same JSON as the route annotation of the
// same name (httproute.AnnotationDrains, AnnotationClusterTaints, AnnotationServiceTolerations).
const (
	RecordKeyDrains      = "drains"
	RecordKeyTaints      = "cluster-taints"
	RecordKeyTolerations = "service-tolerations"
	// RecordKeyContent holds Plan.Digest of the plan the record was written for: with
	// the map's Published condition True at its generation, it proves after a restart that
	// the condition is about the content the plan publishes (see recordStore.carries).
	RecordKeyContent = "content"
)

// Recorded is the last valid fleet-drain state of one map, the fallback Compute uses for a
// malformed input. The zero value records nothing.
type Recorded struct {
	// Drains is the recorded drain set; meaningful only when HasDrains.
	Drains    []weights.Drain
	HasDrains bool
	// Taints are the recorded NoExecute taints by cluster; nil when none are recorded.
	Taints map[string][]weights.Taint
	// Tolerations is the recorded toleration list; meaningful only when HasTolerations.
	Tolerations    []weights.Toleration
	HasTolerations bool
}

// RecordedFromData returns the state recorded in a record ConfigMap's data (EncodeRecorded);
// a key that is absent or does not parse records nothing.
func RecordedFromData(data map[string]string) Recorded {
	return RecordedFrom(data, RecordKeyDrains, RecordKeyTaints, RecordKeyTolerations)
}

// RecordedFrom returns the state recorded in m (a record ConfigMap's data, a route's
// annotations) under the keys drains (weights.EncodeDrains), taints
// (weights.EncodeClusterTaints) and tolerations (weights.EncodeTolerations); a key that is
// absent or does not parse records nothing.
func RecordedFrom(m map[string]string, drains, taints, tolerations string) Recorded {
	var r Recorded
	if v, ok := m[drains]; ok {
		if d, err := weights.ParseDrains(v); err == nil {
			r.Drains, r.HasDrains = d, true
		}
	}
	if v, ok := m[taints]; ok {
		if t, err := weights.ParseClusterTaints(v); err == nil {
			r.Taints = t
		}
	}
	if v, ok := m[tolerations]; ok {
		if t, err := weights.ParseTolerations(v); err == nil {
			r.Tolerations, r.HasTolerations = t, true
		}
	}
	return r
}

// EncodeRecorded returns the record ConfigMap data for drains, NoExecute taints by cluster
// and tolerations, in the JSON the route annotations use. It is deterministic.
func EncodeRecorded(drains []weights.Drain, taints map[string][]weights.Taint, tols []weights.Toleration) map[string]string {
	return map[string]string{
		RecordKeyDrains:      weights.EncodeDrains(drains),
		RecordKeyTaints:      weights.EncodeClusterTaints(taints),
		RecordKeyTolerations: weights.EncodeTolerations(tols),
	}
}
