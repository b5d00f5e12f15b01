package drain

import (
	"bytes"
	"encoding/json"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/weights"
)

// Annotation is the annotation the action changes, and the only one.
const Annotation = weights.DrainAnnotation

// Labels and annotations that mark placement's derived copies (and labels that were never
// valid on a source); such objects are refused.
var derivedKeys = []string{"ome.io/placement-origin", "ome.io/placement-origin-uid", "ome.io/placement-control-plane"}
var derivedLabelsOnly = []string{"ome.io/accelerator-requirements", "ome.io/cluster-selector"}

// obsoleteEligibility are the annotations that make a service without spec.placement
// eligible for routing.
var obsoleteEligibility = []string{"ome.io/accelerator-requirements", "ome.io/cluster-selector"}

// Target is the InferenceService as read, reduced to what the action checks.
type Target struct {
	Namespace       string
	Name            string
	UID             types.UID
	ResourceVersion string
	Generation      int64
	Deleting        bool
	Labels          map[string]string
	Annotations     map[string]string // nil when the object has none
	Finalizers      []string
	Placement       bool // spec.placement is set
	Conditions      int  // len(status.conditions)
	Components      int  // len(status.components)
	PayloadBytes    int  // size of the object as JSON
}

// TargetOf reduces an InferenceService read from the API.
func TargetOf(u *unstructured.Unstructured) Target {
	t := Target{
		Namespace:       u.GetNamespace(),
		Name:            u.GetName(),
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Generation:      u.GetGeneration(),
		Deleting:        u.GetDeletionTimestamp() != nil,
		Labels:          u.GetLabels(),
		Annotations:     u.GetAnnotations(),
		Finalizers:      u.GetFinalizers(),
	}
	if p, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "placement"); ok && p != nil {
		t.Placement = true
	}
	if c, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "conditions"); ok {
		if list, ok := c.([]any); ok {
			t.Conditions = len(list)
		}
	}
	if c, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "components"); ok {
		if m, ok := c.(map[string]any); ok {
			t.Components = len(m)
		}
	}
	if b, err := json.Marshal(u.Object); err == nil {
		t.PayloadBytes = len(b)
	} else {
		t.PayloadBytes = MaxPayloadBytes + 1
	}
	return t
}

// Op is what the patch does to the annotation.
type Op string

// Patch operations on the annotation.
const (
	OpAdd     Op = "add"
	OpReplace Op = "replace"
	OpRemove  Op = "remove"
)

// Plan is a validated action on one exact object.
type Plan struct {
	Request Request
	Target  Target
	// Cluster is the drained cluster: the request's for drain, the removed drain's for undrain.
	Cluster string
	// Before and After count the drains.
	Before, After int
	// Op and Value are the annotation change (add: absent before; replace: present before;
	// remove: delete the key); Value is empty for OpRemove.
	Op    Op
	Value string
	// Ramp, when set, is the ramp annotation change the same patch carries (--ramp).
	Ramp *RampChange
}

// Prepare checks the target and its existing drains against req and returns the plan, or
// the first refusal in OME's order. req must have passed Validate.
func Prepare(req Request, t Target) (*Plan, error) {
	raw, present := t.Annotations[Annotation]
	if err := checkTarget(t, raw); err != nil {
		return nil, err
	}
	var existing []weights.Drain
	if present {
		var err error
		if existing, err = ExistingDrains(raw); err != nil {
			return nil, err
		}
	}
	if len(existing) > MaxDrains {
		return nil, ErrBounds
	}
	p := &Plan{Request: req, Target: t, Before: len(existing)}
	after, cluster, err := applyRequest(req, existing)
	if err != nil {
		return nil, err
	}
	p.Cluster, p.After = cluster, len(after)
	if err := p.setPatch(after, present); err != nil {
		return nil, err
	}
	return p, nil
}

// checkTarget refuses, in OME's order, a target the annotation cannot be written on: an
// object or annotation out of bounds, one carrying derived labels or annotations, one
// not eligible, one with an unsafe identity, or one being deleted. raw is the target's
// drain annotation.
func checkTarget(t Target, raw string) error {
	if objectOutOfBounds(t) || len(raw) > MaxAnnotationBytes {
		return ErrBounds
	}
	for _, k := range derivedKeys {
		if _, ok := t.Labels[k]; ok {
			return ErrDerived
		}
		if _, ok := t.Annotations[k]; ok {
			return ErrDerived
		}
	}
	for _, k := range derivedLabelsOnly {
		if _, ok := t.Labels[k]; ok {
			return ErrDerived
		}
	}
	if !eligible(t) {
		return ErrIneligible
	}
	if !SafeScalar(t.Namespace) || !ValidName(t.Name) || !SafeScalar(string(t.UID)) || !SafeScalar(t.ResourceVersion) || t.Generation <= 0 {
		return ErrIdentity
	}
	if t.Deleting {
		return ErrDeleting
	}
	return nil
}

// applyRequest returns the drains after req (existing is never modified) and the cluster
// req drains or undrains: a drain adds one with a new ID, an undrain removes the one with
// req's ID.
func applyRequest(req Request, existing []weights.Drain) (after []weights.Drain, cluster string, err error) {
	switch req.Action {
	case ActionDrain:
		for _, d := range existing {
			if d.ID == req.ID {
				return nil, "", ErrIDExists
			}
		}
		after = append(append([]weights.Drain{}, existing...), weights.Drain{ID: req.ID, Cluster: req.Cluster, Reason: req.Reason})
		return after, req.Cluster, nil
	case ActionUndrain:
		i := sort.Search(len(existing), func(i int) bool { return existing[i].ID >= req.ID })
		if i == len(existing) || existing[i].ID != req.ID {
			return nil, "", ErrIDMissing
		}
		after = append(append([]weights.Drain{}, existing[:i]...), existing[i+1:]...)
		return after, existing[i].Cluster, nil
	default:
		return nil, "", ErrAction
	}
}

// setPatch sets p's annotation change to after (present: the annotation exists now) and
// refuses a patch that would leave the drains, the annotation or the object's metadata out
// of bounds.
func (p *Plan) setPatch(after []weights.Drain, present bool) error {
	switch {
	case len(after) == 0 && p.Request.Action == ActionUndrain:
		p.Op = OpRemove
	case present:
		p.Op = OpReplace
	default:
		p.Op = OpAdd
	}
	if p.Op != OpRemove {
		p.Value = Encode(after)
	}
	if p.After > MaxDrains || len(p.Value) > MaxAnnotationBytes {
		return ErrBounds
	}
	if p.Op == OpAdd && len(p.Target.Annotations) >= MaxAnnotations {
		return ErrBounds
	}
	if projectedMetadataBytes(p.Target, p) > MaxMetadataBytes {
		return ErrBounds
	}
	return nil
}

// ExistingDrains parses an existing annotation value strictly (weights.ParseDrains, the
// publisher's parser) and applies the request rules to every entry, so state that a drain
// could not have written is refused rather than normalized away.
func ExistingDrains(raw string) ([]weights.Drain, error) {
	drains, err := weights.ParseDrains(raw)
	if err != nil {
		return nil, ErrUnsafeAnnotation
	}
	for _, d := range drains {
		if (Request{Action: ActionDrain, ID: d.ID, Cluster: d.Cluster, Reason: d.Reason}).Validate() != nil {
			return nil, ErrUnsafeAnnotation
		}
	}
	return drains, nil
}

func objectOutOfBounds(t Target) bool {
	return len(t.Annotations) > MaxAnnotations || len(t.Labels) > MaxLabels || len(t.Finalizers) > MaxFinalizers ||
		t.Conditions > MaxConditions || t.Components > MaxStatusComponents || t.PayloadBytes > MaxPayloadBytes
}

func eligible(t Target) bool {
	if t.Placement {
		return true
	}
	for _, k := range obsoleteEligibility {
		if _, ok := t.Annotations[k]; ok {
			return true
		}
	}
	return false
}

// projectedMetadataBytes is the size of annotations, labels and finalizers after the patch.
func projectedMetadataBytes(t Target, p *Plan) int {
	n := 0
	for k, v := range t.Annotations {
		if k != Annotation {
			n += len(k) + len(v)
		}
	}
	if p.Op != OpRemove {
		n += len(Annotation) + len(p.Value)
	}
	for k, v := range t.Labels {
		n += len(k) + len(v)
	}
	for _, f := range t.Finalizers {
		n += len(f)
	}
	return n
}

type drainValue struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

// Encode renders drains as the annotation value: a JSON object keyed by ID, keys sorted,
// each value {"cluster","reason"}. HTML characters are not escaped.
func Encode(drains []weights.Drain) string {
	m := make(map[string]drainValue, len(drains))
	for _, d := range drains {
		m[d.ID] = drainValue{Cluster: d.Cluster, Reason: d.Reason}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(m) // a map of strings always encodes
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// AnnotationsAfter returns the target's annotations as the patch leaves them (a copy).
func (p *Plan) AnnotationsAfter() map[string]string {
	out := make(map[string]string, len(p.Target.Annotations)+1)
	for k, v := range p.Target.Annotations {
		out[k] = v
	}
	if p.Op == OpRemove {
		delete(out, Annotation)
	} else {
		out[Annotation] = p.Value
	}
	if p.Ramp != nil {
		if p.Ramp.Op == OpRemove {
			delete(out, weights.RampAnnotation)
		} else {
			out[weights.RampAnnotation] = p.Ramp.Value
		}
	}
	return out
}

// mergePatch is the patch's document; field order fixes its encoding.
type mergePatch struct {
	Metadata mergeMetadata `json:"metadata"`
}

type mergeMetadata struct {
	UID             types.UID          `json:"uid"`
	ResourceVersion string             `json:"resourceVersion"`
	Annotations     map[string]*string `json:"annotations"`
}

// Patch returns the JSON merge patch (RFC 7386, application/merge-patch+json): the read UID
// and resourceVersion, and the one annotation set to Value, or null for OpRemove. The API
// server enforces the resourceVersion itself: a patch whose resourceVersion is not the
// stored object's is refused with 409 Conflict, which covers any change after the read,
// including a delete and re-create. A different UID at the same resourceVersion is refused
// as an immutable field. A merge patch always applies, so those refusals are the only ones
// a changed object can produce. Other annotations and drain IDs are not in it; with a
// ramp, the ramp annotation is set (or removed) in the same patch.
func (p *Plan) Patch() []byte {
	var value *string
	if p.Op != OpRemove {
		value = &p.Value
	}
	annotations := map[string]*string{Annotation: value}
	if p.Ramp != nil {
		var ramp *string
		if p.Ramp.Op != OpRemove {
			ramp = &p.Ramp.Value
		}
		annotations[weights.RampAnnotation] = ramp
	}
	doc := mergePatch{Metadata: mergeMetadata{UID: p.Target.UID, ResourceVersion: p.Target.ResourceVersion,
		Annotations: annotations}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(doc) // strings and a map of strings always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
