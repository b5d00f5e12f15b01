package weights

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
)

// The encoders of this file write what the parsers beside them (ParseTaints,
// ParseTolerations, ParseClusterTaints, ParseDrains) read back: Parse(Encode(x)) is x, up
// to the order the parser sorts by. Encoding is deterministic.

// taintJSON is one taint in the sources' JSON shape; field order fixes its encoding.
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

type drainJSON struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

func taintList(taints []Taint) []taintJSON {
	out := make([]taintJSON, 0, len(taints))
	for _, t := range taints {
		out = append(out, taintJSON{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	return out
}

// EncodeTaints returns taints as the JSON list ParseTaints reads, the shape of an
// InferenceCluster's spec.taints and of TaintsAnnotation: {"key","value","effect"}
// objects, value omitted when empty ("[]" for none).
func EncodeTaints(taints []Taint) string {
	b, _ := json.Marshal(taintList(taints)) // strings only: cannot fail
	return string(b)
}

// EncodeTolerations returns tolerations as the JSON list ParseTolerations reads ("[]" for
// none).
func EncodeTolerations(tols []Toleration) string {
	out := make([]tolerationJSON, 0, len(tols))
	for _, t := range tols {
		out = append(out, tolerationJSON{Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect)})
	}
	b, _ := json.Marshal(out) // strings only: cannot fail
	return string(b)
}

// EncodeClusterTaints returns taints by cluster as the JSON object ParseClusterTaints
// reads: keyed by cluster, each value an EncodeTaints list ("[]" for an untainted cluster).
func EncodeClusterTaints(taints map[string][]Taint) string {
	rec := make(map[string][]taintJSON, len(taints))
	for _, c := range slices.Sorted(maps.Keys(taints)) {
		rec[c] = taintList(taints[c])
	}
	b, _ := json.Marshal(rec) // strings only: cannot fail; map keys are sorted
	return string(b)
}

// ParseClusterTaints parses an EncodeClusterTaints object: every value is parsed with
// ParseTaints. null, a non-object or any malformed list is an error.
func ParseClusterTaints(value string) (map[string][]Taint, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, errNullClusterTaints
	}
	out := make(map[string][]Taint, len(raw))
	for c, list := range raw {
		taints, err := ParseTaints(string(list))
		if err != nil {
			return nil, err
		}
		out[c] = taints
	}
	return out, nil
}

// EncodeDrains returns drains as the DrainAnnotation object ParseDrains reads, keyed by
// drain ID ("{}" for none).
func EncodeDrains(drains []Drain) string {
	m := make(map[string]drainJSON, len(drains))
	for _, d := range drains {
		m[d.ID] = drainJSON{Cluster: d.Cluster, Reason: d.Reason}
	}
	b, _ := json.Marshal(m) // strings only: cannot fail; map keys are sorted
	return string(b)
}

var errNullClusterTaints = errors.New("cluster taints must be a JSON object keyed by cluster, not null")
