package httproute

import (
	"encoding/json"
	"maps"
	"slices"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/weights"
)

// Annotations recording, on the route, the last valid fleet-drain inputs the weights were
// computed with, so that a malformed taint or toleration list keeps the same state, also
// across publisher restarts.
const (
	// AnnotationClusterTaints records the NoExecute taints of every entry cluster, as a JSON
	// object keyed by cluster whose values are taint lists ([] for an untainted cluster).
	AnnotationClusterTaints = "publisher.trafficmap.dev/cluster-taints"
	// AnnotationServiceTolerations records the service's tolerations as a JSON list.
	AnnotationServiceTolerations = "publisher.trafficmap.dev/service-tolerations"
)

type taintJSON struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

type tolerationJSON struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// encodeTaints renders taints in the JSON shape ParseTaints reads.
func encodeTaints(taints []weights.Taint) []taintJSON {
	out := make([]taintJSON, 0, len(taints))
	for _, t := range taints {
		out = append(out, taintJSON{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	return out
}

// EncodeTaints returns taints as the JSON list ParseTaints reads ("[]" for none).
func EncodeTaints(taints []weights.Taint) string {
	b, _ := json.Marshal(encodeTaints(taints)) // strings only: cannot fail
	return string(b)
}

// EncodeTolerations returns tolerations as the JSON list ParseTolerations reads ("[]" for
// none).
func EncodeTolerations(tols []weights.Toleration) string {
	out := make([]tolerationJSON, 0, len(tols))
	for _, t := range tols {
		out = append(out, tolerationJSON{Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect)})
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return string(b)
}

func encodeClusterTaints(taints map[string][]weights.Taint) string {
	rec := make(map[string][]taintJSON, len(taints))
	for _, c := range slices.Sorted(maps.Keys(taints)) {
		rec[c] = encodeTaints(taints[c])
	}
	b, _ := json.Marshal(rec) // strings only: cannot fail; map keys are sorted
	return string(b)
}

// RecordedTaints returns the per-cluster taints recorded on a route built by Build, and
// whether the route carried a valid record. Each list is parsed with weights.ParseTaints.
func RecordedTaints(route *gwapiv1.HTTPRoute) (map[string][]weights.Taint, bool) {
	if route == nil {
		return nil, false
	}
	v, ok := route.Annotations[AnnotationClusterTaints]
	if !ok {
		return nil, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
		return nil, false
	}
	out := make(map[string][]weights.Taint, len(raw))
	for c, list := range raw {
		taints, err := weights.ParseTaints(string(list))
		if err != nil {
			return nil, false
		}
		out[c] = taints
	}
	return out, true
}

// RecordedTolerations returns the tolerations recorded on a route built by Build, and
// whether the route carried a valid record.
func RecordedTolerations(route *gwapiv1.HTTPRoute) ([]weights.Toleration, bool) {
	if route == nil {
		return nil, false
	}
	v, ok := route.Annotations[AnnotationServiceTolerations]
	if !ok {
		return nil, false
	}
	tols, err := weights.ParseTolerations(v)
	if err != nil {
		return nil, false
	}
	return tols, true
}
