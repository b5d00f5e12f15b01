package weights

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// TaintsAnnotation is the annotation on an OME WorkloadCluster (whose schema has no taints)
// that lists the cluster's taints as JSON, in the shape of Modelplane's
// InferenceCluster spec.taints:
//
//	[{"key":"maintenance","value":"planned","effect":"NoExecute"}]
const TaintsAnnotation = "publisher.trafficmap.dev/taints"

// TolerationsAnnotation is the InferenceService annotation that lists the service's
// tolerations as JSON, in the shape of Modelplane's spec.template.spec.tolerations:
//
//	[{"key":"maintenance","operator":"Exists","effect":"NoExecute"}]
const TolerationsAnnotation = "publisher.trafficmap.dev/tolerations"

// Effect is what a taint does. Only NoExecute moves traffic.
type Effect string

// Taint effects, as Modelplane defines them.
const (
	// EffectNoSchedule stops new placement on the cluster; it never moves traffic.
	EffectNoSchedule Effect = "NoSchedule"
	// EffectNoExecute also moves what already runs there: an untolerated NoExecute taint
	// drains the cluster for the service.
	EffectNoExecute Effect = "NoExecute"
)

// Operator is how a toleration compares its value with a taint's.
type Operator string

// Toleration operators. The empty operator means OperatorEqual.
const (
	// OperatorEqual matches a taint with the same key and value.
	OperatorEqual Operator = "Equal"
	// OperatorExists matches any value of the key; with an empty key, every taint.
	OperatorExists Operator = "Exists"
)

// Taint is one taint on a workload cluster.
type Taint struct {
	Key    string
	Value  string // optional
	Effect Effect
}

// String formats the taint as key=value:Effect, or key:Effect without a value.
func (t Taint) String() string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// compareTaints orders taints by key, effect, then value.
func compareTaints(a, b Taint) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Effect, b.Effect), cmp.Compare(a.Value, b.Value))
}

// Toleration is one toleration of a service.
type Toleration struct {
	Key      string   // empty only with OperatorExists: tolerates every taint
	Operator Operator // OperatorExists or OperatorEqual; empty means OperatorEqual
	Value    string   // compared by OperatorEqual; empty with OperatorExists
	Effect   Effect   // empty matches both effects
}

// String formats the toleration as key[=value|:Exists][:Effect], e.g. "maintenance:Exists",
// "maintenance=planned:NoExecute" or "*:Exists" for the empty key.
func (tol Toleration) String() string {
	key := tol.Key
	if key == "" {
		key = "*"
	}
	s := key
	if tol.Operator == OperatorExists {
		s += ":Exists"
	} else {
		s += "=" + tol.Value
	}
	if tol.Effect != "" {
		s += ":" + string(tol.Effect)
	}
	return s
}

// Tolerates reports whether tol matches t, with Modelplane's (and Kubernetes') rules: the
// effects must be equal unless tol's is empty (then it matches both); OperatorExists ignores
// the value and, with an empty key, matches every key; OperatorEqual (or an empty operator)
// needs the key and the value to be equal. An unknown operator matches nothing.
func (tol Toleration) Tolerates(t Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	switch tol.Operator {
	case OperatorExists:
		return tol.Key == "" || tol.Key == t.Key
	case OperatorEqual, "":
		return tol.Key == t.Key && tol.Value == t.Value
	}
	return false
}

// Untolerated returns the NoExecute taints among taints that no toleration in tols
// tolerates, sorted and deduplicated; nil when none. These are the taints that drain a
// cluster for a service: a service stays on a cluster only if it tolerates every NoExecute
// taint there, and NoSchedule taints never move traffic. The inputs are not mutated.
func Untolerated(taints []Taint, tols []Toleration) []Taint {
	var out []Taint
	for _, t := range taints {
		if t.Effect != EffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tols, func(tol Toleration) bool { return tol.Tolerates(t) }) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, compareTaints)
	return slices.Clip(slices.Compact(out))
}

// ParseTaints parses a JSON list of taints strictly: each element is an object with a
// "key" (required), an optional "value" and an "effect" (required, NoSchedule or
// NoExecute), all strings; unknown or duplicate fields, two taints with the same key and
// effect, and anything after the list are errors. Keys must be qualified names
// ([prefix/]name, as Kubernetes label keys) and values valid label values. "null" and "[]"
// yield an empty, non-nil slice. The result is sorted by key, effect and value; any error
// yields nil.
func ParseTaints(value string) ([]Taint, error) {
	objs, err := parseObjectList(value, "taint", []string{"key", "value", "effect"})
	if err != nil {
		return nil, err
	}
	taints := make([]Taint, 0, len(objs))
	seen := make(map[[2]string]int, len(objs))
	for i, o := range objs {
		t := Taint{Key: o["key"], Value: o["value"], Effect: Effect(o["effect"])}
		if _, ok := o["key"]; !ok {
			return nil, fmt.Errorf("taint [%d]: field \"key\" is required", i)
		}
		if err := checkQualifiedName(t.Key); err != nil {
			return nil, fmt.Errorf("taint [%d]: key %q: %w", i, t.Key, err)
		}
		if err := checkLabelValue(t.Value); err != nil {
			return nil, fmt.Errorf("taint [%d] (key %q): value %q: %w", i, t.Key, t.Value, err)
		}
		switch t.Effect {
		case EffectNoSchedule, EffectNoExecute:
		case "":
			return nil, fmt.Errorf("taint [%d] (key %q): field \"effect\" is required (NoSchedule or NoExecute)", i, t.Key)
		default:
			return nil, fmt.Errorf("taint [%d] (key %q): effect %q must be NoSchedule or NoExecute", i, t.Key, t.Effect)
		}
		k := [2]string{t.Key, string(t.Effect)}
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("taint [%d]: duplicate of taint [%d]: key %q and effect %s must be unique", i, j, t.Key, t.Effect)
		}
		seen[k] = i
		taints = append(taints, t)
	}
	slices.SortFunc(taints, compareTaints)
	return taints, nil
}

// ParseTolerations parses a JSON list of tolerations strictly: each element is an object
// with optional string fields "key", "operator" (Exists or Equal, default Equal), "value"
// and "effect" (NoSchedule, NoExecute or empty for both); unknown or duplicate fields and
// anything after the list are errors. As in Kubernetes, an empty key needs operator Exists,
// and operator Exists takes no value. "null" and "[]" yield an empty, non-nil slice.
// The result keeps the input order; any error yields nil.
func ParseTolerations(value string) ([]Toleration, error) {
	objs, err := parseObjectList(value, "toleration", []string{"key", "operator", "value", "effect"})
	if err != nil {
		return nil, err
	}
	tols := make([]Toleration, 0, len(objs))
	for i, o := range objs {
		tol := Toleration{Key: o["key"], Operator: Operator(o["operator"]), Value: o["value"], Effect: Effect(o["effect"])}
		if tol.Key != "" {
			if err := checkQualifiedName(tol.Key); err != nil {
				return nil, fmt.Errorf("toleration [%d]: key %q: %w", i, tol.Key, err)
			}
		}
		switch tol.Operator {
		case OperatorExists:
			if tol.Value != "" {
				return nil, fmt.Errorf("toleration [%d] (key %q): value %q must be empty with operator Exists", i, tol.Key, tol.Value)
			}
		case OperatorEqual, "":
			if tol.Key == "" {
				return nil, fmt.Errorf("toleration [%d]: an empty key needs operator Exists", i)
			}
			if err := checkLabelValue(tol.Value); err != nil {
				return nil, fmt.Errorf("toleration [%d] (key %q): value %q: %w", i, tol.Key, tol.Value, err)
			}
		default:
			return nil, fmt.Errorf("toleration [%d] (key %q): operator %q must be Exists or Equal", i, tol.Key, tol.Operator)
		}
		switch tol.Effect {
		case "", EffectNoSchedule, EffectNoExecute:
		default:
			return nil, fmt.Errorf("toleration [%d] (key %q): effect %q must be NoSchedule, NoExecute or empty", i, tol.Key, tol.Effect)
		}
		tols = append(tols, tol)
	}
	return tols, nil
}

// parseObjectList decodes a JSON array (or null) of objects whose fields are all strings
// from the allowed set, each at most once. what names an element in errors.
func parseObjectList(value, what string, allowed []string) ([]map[string]string, error) {
	dec := json.NewDecoder(strings.NewReader(value))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("decode %s list: %w", what, err)
	}
	var out []map[string]string
	switch d, ok := tok.(json.Delim); {
	case tok == nil: // null: no elements
	case !ok || d != '[':
		return nil, fmt.Errorf("%s list must be a JSON array of objects, got %s", what, describeToken(tok))
	default:
		out = []map[string]string{}
		for i := 0; dec.More(); i++ {
			obj, err := parseStringObject(dec, fmt.Sprintf("%s [%d]", what, i), allowed)
			if err != nil {
				return nil, err
			}
			out = append(out, obj)
		}
		if tok, err := dec.Token(); err != nil {
			return nil, fmt.Errorf("close %s list: %w", what, unexpectedEOF(err))
		} else if d, ok := tok.(json.Delim); !ok || d != ']' { // unreachable: More reported the end
			return nil, fmt.Errorf("close %s list: expected ']', got %s", what, describeToken(tok))
		}
	}
	switch tok, err := dec.Token(); {
	case err == io.EOF:
	case err != nil:
		return nil, fmt.Errorf("unexpected trailing JSON after the %s list: %w", what, err)
	default:
		return nil, fmt.Errorf("unexpected trailing JSON after the %s list: got %s", what, describeToken(tok))
	}
	return out, nil
}

func parseStringObject(dec *json.Decoder, what string, allowed []string) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: decode value: %w", what, unexpectedEOF(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%s must be a JSON object, got %s", what, describeToken(tok))
	}
	obj := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: decode field name: %w", what, unexpectedEOF(err))
		}
		field, _ := tok.(string) // the decoder only yields strings as object keys
		if !slices.Contains(allowed, field) {
			return nil, fmt.Errorf("%s has unknown field %q (allowed: %s)", what, field, strings.Join(allowed, ", "))
		}
		if _, dup := obj[field]; dup {
			return nil, fmt.Errorf("%s has duplicate field %q", what, field)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s field %q: decode value: %w", what, field, unexpectedEOF(err))
		}
		s, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%s field %q must be a string: got %s", what, field, describeToken(tok))
		}
		obj[field] = s
	}
	if err := closeObject(dec); err != nil {
		return nil, fmt.Errorf("%s: close object: %w", what, err)
	}
	return obj, nil
}

var (
	errNameEmpty = errors.New("must be non-empty")
	errNameShape = errors.New("must be a qualified name: an optional DNS subdomain prefix and '/', then 1-63 characters of a-z, A-Z, 0-9, '-', '_' or '.', starting and ending with a letter or digit")
	errValue     = errors.New("must be at most 63 characters of a-z, A-Z, 0-9, '-', '_' or '.', starting and ending with a letter or digit")
)

// checkQualifiedName applies Kubernetes' qualified-name rule (label and taint keys).
func checkQualifiedName(s string) error {
	if s == "" {
		return errNameEmpty
	}
	name := s
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		prefix := s[:i]
		name = s[i+1:]
		if checkCluster(prefix) != nil {
			return errNameShape
		}
	}
	if name == "" || checkLabelValue(name) != nil {
		return errNameShape
	}
	return nil
}

// checkLabelValue applies Kubernetes' label-value rule; the empty value is valid.
func checkLabelValue(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 63 {
		return errValue
	}
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !alnum(c) && c != '-' && c != '_' && c != '.' {
			return errValue
		}
	}
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errValue
	}
	return nil
}
