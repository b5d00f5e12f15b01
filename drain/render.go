package drain

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/weights"
)

// Warnings end every preview.
var Warnings = []string{
	"API acceptance is not TrafficMap convergence or data-plane realization.",
	"The exact InferenceService UID/resourceVersion is tested atomically.",
	"Other annotations and traffic-drain override IDs are preserved.",
	"Run the previewed traffic status command to observe controller evidence.",
}

const (
	previewHeader  = "ALPHA guarded traffic action (not TrafficMap convergence)"
	previewChunk   = 60 // display columns per preview value row
	previewColumns = 80 // warnings are wrapped at this width
	resultCell     = 56 // result table cells are cut to this many characters
	resultHint     = "Use -o json or -o yaml for full values."
	// ConfirmPrompt is written to stderr before reading the answer.
	ConfirmPrompt = "Confirm this exact action? [y/N] "
)

// FollowUp is the status command to run after the action.
func FollowUp(service, namespace, kubeContext string) string {
	s := "publisher status " + service + " -n " + namespace
	if kubeContext != "" {
		s += " --context=" + kubeContext
	}
	return s
}

// PreviewInput is what the preview shows besides the plan.
type PreviewInput struct {
	Context string
	DryRun  DryRun
}

// WritePreview writes the preview of p: a header, a FIELD/VALUE table and the warnings.
func WritePreview(w io.Writer, p *Plan, in PreviewInput) error {
	reason := ""
	if p.Request.Action == ActionDrain {
		reason = strconv.Quote(p.Request.Reason)
	}
	rows := [][2]string{
		{"Action", p.Request.Action.Title()},
		{"Context", in.Context},
		{"Workload NS", p.Target.Namespace},
		{"Target", "InferenceService/" + p.Target.Name},
		{"UID", string(p.Target.UID)},
		{"ResourceVersion", p.Target.ResourceVersion},
		{"Dry-run", string(in.DryRun)},
		{"Override ID", p.Request.ID},
		{"Cluster", p.Cluster},
		{"Reason", reason},
		{"Override count", fmt.Sprintf("%d -> %d", p.Before, p.After)},
		{"Annotation", Annotation},
		{"Follow-up", FollowUp(p.Target.Name, p.Target.Namespace, in.Context)},
	}
	if p.Ramp != nil {
		rows = append(rows[:len(rows)-1], [2]string{"Ramp", p.Ramp.Describe()}, [2]string{"Ramp annotation", weights.RampAnnotation}, rows[len(rows)-1])
	}
	var b strings.Builder
	b.WriteString(previewHeader + "\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "FIELD\tVALUE\n")
	for _, r := range rows {
		for i, chunk := range chunks(r[1], previewChunk) {
			field := r[0]
			if i > 0 {
				field = "(continued)"
			}
			fmt.Fprintf(tw, "%s\t%s\n", field, chunk)
		}
	}
	_ = tw.Flush()
	for _, warning := range Warnings {
		for _, line := range wrap(warning, previewColumns) {
			b.WriteString(line + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// chunks splits v into pieces of at most n runes; an empty v is "<absent>".
func chunks(v string, n int) []string {
	if v == "" {
		return []string{"<absent>"}
	}
	var out []string
	for v != "" {
		i, count := 0, 0
		for i < len(v) && count < n {
			_, size := utf8.DecodeRuneInString(v[i:])
			i += size
			count++
		}
		out = append(out, v[:i])
		v = v[i:]
	}
	return out
}

// wrap breaks s at spaces into lines of at most width runes (a longer word stays whole).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// Result is what the action did, the ActionResult of OME's CLI. The reason is never in it.
type Result struct {
	APIVersion  string        `json:"apiVersion"`
	Kind        string        `json:"kind"`
	CollectedAt time.Time     `json:"collectedAt"`
	Action      string        `json:"action"`
	Target      ResultTarget  `json:"target"`
	DryRun      DryRun        `json:"dryRun"`
	Accepted    bool          `json:"accepted"`
	Applied     bool          `json:"applied"`
	Message     string        `json:"message"`
	FollowUp    string        `json:"followUp"`
	Traffic     ResultTraffic `json:"traffic"`
}

// ResultTarget identifies the object written.
type ResultTarget struct {
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// ResultTraffic is the drain the action added or removed.
type ResultTraffic struct {
	OverrideID      string `json:"overrideID"`
	Cluster         string `json:"cluster"`
	OverridesBefore int    `json:"overridesBefore"`
	OverridesAfter  int    `json:"overridesAfter"`
}

// Result messages per dry-run mode.
const (
	MessageClient = "Validated locally; no patch sent. TrafficMap convergence was not observed."
	MessageServer = "API dry-run accepted; no changes persisted."
	MessageNone   = "API accepted traffic annotation request; not TrafficMap convergence."
)

// NewResult returns the result of an accepted plan. resourceVersion is the object's after
// the patch (the read one for a client dry run).
func NewResult(p *Plan, dry DryRun, resourceVersion, kubeContext string, now time.Time) Result {
	msg := MessageNone
	switch dry {
	case DryRunClient:
		msg = MessageClient
	case DryRunServer:
		msg = MessageServer
	}
	return Result{
		APIVersion:  "cli.ome.io/v1alpha1",
		Kind:        "ActionResult",
		CollectedAt: now.UTC().Truncate(time.Second),
		Action:      p.Request.Action.Title(),
		Target: ResultTarget{Kind: "InferenceService", Namespace: p.Target.Namespace, Name: p.Target.Name,
			UID: string(p.Target.UID), ResourceVersion: resourceVersion},
		DryRun:   dry,
		Accepted: true,
		Applied:  dry == DryRunNone,
		Message:  msg,
		FollowUp: FollowUp(p.Target.Name, p.Target.Namespace, kubeContext),
		Traffic:  ResultTraffic{OverrideID: p.Request.ID, Cluster: p.Cluster, OverridesBefore: p.Before, OverridesAfter: p.After},
	}
}

// Outputs are the -o values.
var Outputs = []string{"table", "wide", "json", "yaml"}

// WriteResult writes r as a table (wide adds uid and resource-version), JSON or YAML.
func WriteResult(w io.Writer, r Result, output string) error {
	return writeOutput(w, r, output, func(wide bool) string { return resultTable(r, wide) })
}

// writeOutput writes v as JSON or YAML, or as table renders it for "table" and "wide".
func writeOutput(w io.Writer, v any, output string, table func(wide bool) string) error {
	var out []byte
	switch output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return ErrWriteResult
		}
		out = append(b, '\n')
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return ErrWriteResult
		}
		out = b
	case "table", "wide":
		out = []byte(table(output == "wide"))
	default:
		return ErrOutput
	}
	if _, err := w.Write(out); err != nil {
		return ErrWriteResult
	}
	return nil
}

func resultTable(r Result, wide bool) string {
	rows := [][2]string{
		{"action", r.Action},
		{"target", r.Target.Kind + "/" + r.Target.Namespace + "/" + r.Target.Name},
	}
	if wide {
		rows = append(rows, [2]string{"uid", r.Target.UID}, [2]string{"resource-version", r.Target.ResourceVersion})
	}
	rows = append(rows,
		[2]string{"dry-run", string(r.DryRun)},
		[2]string{"accepted", yesNo(r.Accepted)},
		[2]string{"applied", yesNo(r.Applied)},
		[2]string{"override-id", r.Traffic.OverrideID},
		[2]string{"cluster", r.Traffic.Cluster},
		[2]string{"overrides", fmt.Sprintf("%d -> %d", r.Traffic.OverridesBefore, r.Traffic.OverridesAfter)},
		[2]string{"message", r.Message},
		[2]string{"follow-up", r.FollowUp},
		[2]string{"hint", resultHint},
	)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "FIELD\tVALUE\n")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], cut(row[1], resultCell))
	}
	_ = tw.Flush()
	return b.String()
}

// cut shortens v to n runes, ending in "...".
func cut(v string, n int) string {
	if utf8.RuneCountInString(v) <= n {
		return v
	}
	r := []rune(v)
	return string(r[:n-3]) + "..."
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}
