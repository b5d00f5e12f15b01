package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

// ErrNoTraffic is the last-serving guard's refusal: the change would leave a service with
// no positive effective weight (all its traffic stops), or its weights cannot be computed;
// --allow-no-traffic overrides it. The command's message names the services.
var ErrNoTraffic = errors.New("refused by the last-serving guard")

// NoTrafficPrompt is the confirmation prompt of a change that stops all traffic to the
// services named (namespace/service), accepted with --allow-no-traffic.
func NoTrafficPrompt(services []string) string {
	return fmt.Sprintf("ALL TRAFFIC to %s STOPS: no workload cluster keeps a positive effective weight. %s",
		strings.Join(services, ", "), ConfirmPrompt)
}

// Taint actions.
const (
	ActionTaint   Action = "taint"
	ActionUntaint Action = "untaint"
)

// Source selects the taint source object a taint or untaint writes.
type Source string

// Taint sources. SourceAuto picks the one whose object exists (taint: the InferenceCluster
// when both do; untaint: the one holding the taint).
const (
	SourceAuto             Source = "auto"
	SourceInferenceCluster Source = model.KindInferenceCluster
	SourceWorkloadCluster  Source = model.KindWorkloadCluster
)

// Sources are the --source values.
var Sources = []string{string(SourceAuto), string(SourceInferenceCluster), string(SourceWorkloadCluster)}

// Resource is the API resource of a concrete source.
func (s Source) Resource() schema.GroupVersionResource {
	if s == SourceWorkloadCluster {
		return model.WorkloadClustersResource
	}
	return model.InferenceClustersResource
}

// ParseTaintArg parses KEY[=VALUE]:EFFECT (EFFECT NoExecute or NoSchedule) and validates it
// with the publisher's taint parser (weights.ParseTaints).
func ParseTaintArg(s string) (weights.Taint, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return weights.Taint{}, fmt.Errorf("taint %q: must be KEY[=VALUE]:EFFECT, EFFECT NoExecute or NoSchedule", s)
	}
	t := weights.Taint{Effect: weights.Effect(s[i+1:])}
	t.Key, t.Value, _ = strings.Cut(s[:i], "=")
	if _, err := weights.ParseTaints(weights.EncodeTaints([]weights.Taint{t})); err != nil {
		return weights.Taint{}, fmt.Errorf("taint %q: %w", s, err)
	}
	return t, nil
}

// ParseUntaintArg parses KEY[:EFFECT]; an empty effect removes the key's taints of both
// effects.
func ParseUntaintArg(s string) (string, weights.Effect, error) {
	key, effect, _ := strings.Cut(s, ":")
	probe := weights.Taint{Key: key, Effect: weights.Effect(effect)}
	if effect == "" {
		probe.Effect = weights.EffectNoExecute
	}
	if _, err := weights.ParseTaints(weights.EncodeTaints([]weights.Taint{probe})); err != nil {
		return "", "", fmt.Errorf("untaint %q: must be KEY[:EFFECT]: %w", s, err)
	}
	return key, weights.Effect(effect), nil
}

// ClusterObject is a taint source object as read, reduced to what taint and untaint use.
type ClusterObject struct {
	Source          Source // SourceInferenceCluster or SourceWorkloadCluster
	Name            string
	UID             types.UID
	ResourceVersion string
	// Taints are the object's taints; nil when Err is set.
	Taints []weights.Taint
	// Err is the parse error of a malformed taint list: such an object is not changed.
	Err error
}

// ClusterClient reads and patches taint source objects. It never retries.
type ClusterClient struct {
	Dynamic dynamic.Interface
	Action  Action // names the command in permission errors
}

// Get reads the source object name; found is false when it does not exist or its API is
// not served.
func (c ClusterClient) Get(ctx context.Context, src Source, name string) (obj ClusterObject, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	u, err := c.Dynamic.Resource(src.Resource()).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ClusterObject{}, false, nil
	case err != nil:
		return ClusterObject{}, false, c.apiError(ctx, "get", src, err)
	}
	obj = ClusterObject{Source: src, Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
	var ct model.ClusterTaints
	if src == SourceWorkloadCluster {
		ct = model.WorkloadClusterTaints(u.GetName(), u.GetAnnotations())
	} else {
		ct = model.InferenceClusterTaints(u)
	}
	obj.Taints, obj.Err = ct.Taints, ct.Err
	if !SafeScalar(obj.Name) || !SafeScalar(string(obj.UID)) || !SafeScalar(obj.ResourceVersion) {
		return ClusterObject{}, false, ErrIdentity
	}
	return obj, true, nil
}

// TaintPlan is a validated taint or untaint of one exact source object.
type TaintPlan struct {
	Action Action
	Object ClusterObject
	// Changed are the taints added (taint) or removed (untaint).
	Changed []weights.Taint
	// After is the object's taint list after the patch, sorted.
	After []weights.Taint
}

// PlanTaint adds t to obj's taints. A malformed list, or a taint with t's key and effect
// already there, is refused.
func PlanTaint(obj ClusterObject, t weights.Taint) (*TaintPlan, error) {
	if obj.Err != nil {
		return nil, fmt.Errorf("taint refused: the taints of %s %s are malformed (%w); fix them first", obj.Source, obj.Name, obj.Err)
	}
	for _, old := range obj.Taints {
		if old.Key == t.Key && old.Effect == t.Effect {
			return nil, fmt.Errorf("taint refused: %s %s already has taint %s; untaint %s:%s first to change it", obj.Source, obj.Name, old, t.Key, t.Effect)
		}
	}
	after, err := weights.ParseTaints(weights.EncodeTaints(append(slices.Clone(obj.Taints), t)))
	if err != nil {
		return nil, fmt.Errorf("taint refused: %w", err)
	}
	return &TaintPlan{Action: ActionTaint, Object: obj, Changed: []weights.Taint{t}, After: after}, nil
}

// PlanUntaint removes obj's taints with key and, when set, effect. A malformed list, or
// none to remove, is refused.
func PlanUntaint(obj ClusterObject, key string, effect weights.Effect) (*TaintPlan, error) {
	if obj.Err != nil {
		return nil, fmt.Errorf("untaint refused: the taints of %s %s are malformed (%w); fix them first", obj.Source, obj.Name, obj.Err)
	}
	p := &TaintPlan{Action: ActionUntaint, Object: obj, After: []weights.Taint{}}
	for _, t := range obj.Taints {
		if Matches(t, key, effect) {
			p.Changed = append(p.Changed, t)
		} else {
			p.After = append(p.After, t)
		}
	}
	if len(p.Changed) == 0 {
		return nil, fmt.Errorf("untaint refused: %s %s has no taint %s", obj.Source, obj.Name, untaintName(key, effect))
	}
	return p, nil
}

// Matches reports whether t has key and, when effect is set, effect.
func Matches(t weights.Taint, key string, effect weights.Effect) bool {
	return t.Key == key && (effect == "" || t.Effect == effect)
}

func untaintName(key string, effect weights.Effect) string {
	if effect == "" {
		return key
	}
	return key + ":" + string(effect)
}

// ClusterTaints is the source's view of the cluster after the patch, for model.Compute.
func (p *TaintPlan) ClusterTaints() model.ClusterTaints {
	return model.ClusterTaints{Kind: string(p.Object.Source), Cluster: p.Object.Name, Taints: slices.Clone(p.After)}
}

// Patch returns the JSON merge patch: the read UID and resourceVersion, which the API
// server enforces (a change after the read is 409 Conflict, as for drain), and the whole
// new taint list: spec.taints of an InferenceCluster, the weights.TaintsAnnotation
// annotation of a WorkloadCluster (removed with null when the list is empty).
func (p *TaintPlan) Patch() []byte {
	meta := map[string]any{"uid": p.Object.UID, "resourceVersion": p.Object.ResourceVersion}
	doc := map[string]any{"metadata": meta}
	if p.Object.Source == SourceWorkloadCluster {
		var value *string
		if len(p.After) > 0 {
			v := weights.EncodeTaints(p.After)
			value = &v
		}
		meta["annotations"] = map[string]*string{weights.TaintsAnnotation: value}
	} else {
		doc["spec"] = map[string]any{"taints": json.RawMessage(weights.EncodeTaints(p.After))}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(doc) // maps of strings always encode; map keys are sorted
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Apply sends the plan's merge patch (dryRun=All for a server dry run) and returns the
// stored object's resourceVersion; a refused UID or resourceVersion is ErrConflict.
func (c ClusterClient) Apply(ctx context.Context, p *TaintPlan, dry DryRun) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	opts := metav1.PatchOptions{}
	if dry == DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	u, err := c.Dynamic.Resource(p.Object.Source.Resource()).Patch(ctx, p.Object.Name, types.MergePatchType, p.Patch(), opts)
	if err != nil {
		if isConflict(err) {
			return "", ErrConflict
		}
		return "", c.apiError(ctx, "patch", p.Object.Source, err)
	}
	if u.GetName() != p.Object.Name || u.GetUID() != p.Object.UID {
		return "", ErrResponseUnbound
	}
	if !SafeScalar(u.GetResourceVersion()) {
		return "", ErrResponseUnsafe
	}
	return u.GetResourceVersion(), nil
}

func (c ClusterClient) apiError(ctx context.Context, verb string, src Source, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: cannot %s %s; the %s needs get and patch on inferenceclusters.modelplane.ai or workloadclusters.ome.io, "+
			"list on trafficmaps.ome.io in all namespaces and what status needs", verb, resourceName(src), c.Action)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(ctx.Err(), context.Canceled):
		return context.Canceled
	default:
		return fmt.Errorf("%s %s: %w", verb, resourceName(src), err)
	}
}

func resourceName(src Source) string {
	r := src.Resource()
	return r.Resource + "." + r.Group
}

// ValidClusterName reports whether name is a workload cluster name (a DNS-1123 subdomain).
func ValidClusterName(name string) bool {
	return len(validation.IsDNS1123Subdomain(name)) == 0 && SafeScalar(name)
}

// TaintPreviewInput is what the taint preview shows besides the plan and the impacts.
type TaintPreviewInput struct {
	Context string
	DryRun  DryRun
}

// WriteTaintPreview writes the preview of a taint or untaint: the object and the change,
// then the effective weights before and after of every service whose traffic moves
// (report.WriteImpacts), then what 'status --workload-cluster' confirms afterwards.
func WriteTaintPreview(w io.Writer, p *TaintPlan, in TaintPreviewInput, imps []report.Impact) error {
	changed := make([]string, len(p.Changed))
	for i, t := range p.Changed {
		changed[i] = t.String()
	}
	rows := [][2]string{
		{"Action", "fleet " + string(p.Action)},
		{"Context", in.Context},
		{"Target", string(p.Object.Source) + "/" + p.Object.Name},
		{"UID", string(p.Object.UID)},
		{"ResourceVersion", p.Object.ResourceVersion},
		{"Dry-run", string(in.DryRun)},
		{"Taint", strings.Join(changed, ",")},
		{"Taints after", describe(p.After)},
		{"Services moved", fmt.Sprint(len(imps))},
		{"Follow-up", "publisher status --workload-cluster " + p.Object.Name + " -A"},
	}
	var b strings.Builder
	b.WriteString(previewHeader + "\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "FIELD\tVALUE\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	_ = tw.Flush()
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return report.WriteImpacts(w, imps)
}

func describe(taints []weights.Taint) string {
	if len(taints) == 0 {
		return "<none>"
	}
	parts := make([]string, len(taints))
	for i, t := range taints {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// TaintResult is what a taint or untaint did.
type TaintResult struct {
	APIVersion      string          `json:"apiVersion"`
	Kind            string          `json:"kind"`
	CollectedAt     time.Time       `json:"collectedAt"`
	Action          string          `json:"action"`
	Target          ResultTarget    `json:"target"`
	DryRun          DryRun          `json:"dryRun"`
	Applied         bool            `json:"applied"`
	Taints          []string        `json:"taints"`
	TaintsAfter     []string        `json:"taintsAfter"`
	Services        []report.Impact `json:"services"`
	Message         string          `json:"message"`
	FollowUp        string          `json:"followUp"`
	StoppedServices []string        `json:"stoppedServices,omitempty"`
}

// NewTaintResult returns the result of an accepted taint plan; resourceVersion is the
// object's after the patch (the read one for a client dry run).
func NewTaintResult(p *TaintPlan, dry DryRun, resourceVersion string, imps []report.Impact, now time.Time) TaintResult {
	msg := "API accepted the taint change; not TrafficMap convergence."
	switch dry {
	case DryRunClient:
		msg = MessageClient
	case DryRunServer:
		msg = MessageServer
	}
	r := TaintResult{
		APIVersion: report.APIVersion, Kind: "TaintResult", CollectedAt: now.UTC().Truncate(time.Second),
		Action: "fleet " + string(p.Action),
		Target: ResultTarget{Kind: string(p.Object.Source), Name: p.Object.Name, UID: string(p.Object.UID), ResourceVersion: resourceVersion},
		DryRun: dry, Applied: dry == DryRunNone, Taints: []string{}, TaintsAfter: []string{}, Services: imps, Message: msg,
		FollowUp: "publisher status --workload-cluster " + p.Object.Name + " -A",
	}
	if r.Services == nil {
		r.Services = []report.Impact{}
	}
	for _, t := range p.Changed {
		r.Taints = append(r.Taints, t.String())
	}
	for _, t := range p.After {
		r.TaintsAfter = append(r.TaintsAfter, t.String())
	}
	for _, imp := range imps {
		if imp.StopsTraffic() {
			r.StoppedServices = append(r.StoppedServices, imp.Ref())
		}
	}
	return r
}

// WriteTaintResult writes r as a table (wide: also uid and resource-version), JSON or YAML.
func WriteTaintResult(w io.Writer, r TaintResult, output string) error {
	return writeOutput(w, r, output, func(wide bool) string { return taintTable(r, wide) })
}

func taintTable(r TaintResult, wide bool) string {
	rows := [][2]string{{"action", r.Action}, {"target", r.Target.Kind + "/" + r.Target.Name}}
	if wide {
		rows = append(rows, [2]string{"uid", r.Target.UID}, [2]string{"resource-version", r.Target.ResourceVersion})
	}
	services := make([]string, len(r.Services))
	for i, s := range r.Services {
		services[i] = s.Ref()
	}
	rows = append(rows,
		[2]string{"dry-run", string(r.DryRun)},
		[2]string{"applied", yesNo(r.Applied)},
		[2]string{"taints", strings.Join(r.Taints, ",")},
		[2]string{"taints-after", strings.Join(r.TaintsAfter, ",")},
		[2]string{"services-moved", strings.Join(services, ",")},
		[2]string{"message", r.Message},
		[2]string{"follow-up", r.FollowUp},
	)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "FIELD\tVALUE\n")
	for _, row := range rows {
		v := row[1]
		if v == "" {
			v = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\n", row[0], v)
	}
	_ = tw.Flush()
	return b.String()
}

// TaintedMessage is the Published condition's message for the maps a taint plan moves.
func TaintedMessage(p *TaintPlan, stored bool) string {
	state := "requested"
	if stored {
		state = "stored"
	}
	return fmt.Sprintf("publisher %s of %s %s on %s %s; not yet published", p.Action, string(p.Object.Source), p.Object.Name, describe(p.Changed), state)
}
