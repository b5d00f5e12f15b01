package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

// taintLong describes taint and untaint; cobra adds the usage and the flags.
const taintLong = `Add (taint) or remove (untaint) a taint on a workload cluster: a fleet drain. An untolerated
NoExecute taint drains the cluster for every service (TrafficMap) with an entry for it, unless
the service tolerates it (annotation publisher.trafficmap.dev/tolerations); NoSchedule moves no
traffic. The taint is written where the publisher reads taints: spec.taints of the Modelplane
InferenceCluster named CLUSTER, or the publisher.trafficmap.dev/taints annotation of the OME
WorkloadCluster named CLUSTER. --source=auto (the default) writes the InferenceCluster when it
exists, else the WorkloadCluster; untaint writes the one that holds the taint.

The taint is validated with the publisher's own parser. The preview, on stderr, lists every
service in every namespace whose traffic moves, with its effective weights per cluster before
and after (the publisher's computation over every drain, taint and toleration), and the
services left with no traffic. A change that leaves a service with no positive effective
weight (or whose weights cannot be computed) is refused with exit 6 unless --allow-no-traffic
is given; then the prompt says that all traffic to them stops. On a terminal you confirm with
y, else --yes is required. Every moved TrafficMap gets Published=False before the patch (and
again after it with --wait); one JSON merge patch then carries the object's exact UID and
resourceVersion, which the API server enforces (exit 3 when it changed after the read).
--wait waits until every moved map is Published with the new weights. Afterwards,
'publisher status --workload-cluster CLUSTER -A' lists the services still routed to CLUSTER.

With --ramp DURATION every moved InferenceService first gets the publisher's ramp annotation,
so its share of the cluster moves in --ramp-steps steps over DURATION (see drain --help).

Exit codes: 0 done, 1 refused or failed, 3 the guarded patch was rejected because the object
changed since it was read, 4 --wait timed out (the patch was applied), 6 refused by the
last-serving guard (nothing was changed).`

type taintFlags struct {
	kube           *kubeFlags
	source         string
	yes            bool
	allowNoTraffic bool
	dryRun, output string
	wait           waitFlag
	ramp           drain.RampSpec
}

// newTaintCommand returns 'publisher taint' or 'publisher untaint'; exit codes as for drain,
// and 6 for the last-serving guard's refusal.
func newTaintCommand(action drain.Action, stdout, stderr io.Writer) *cobra.Command {
	f := taintFlags{kube: newKubeFlags()}
	cmd := &cobra.Command{
		Use:   "taint CLUSTER KEY[=VALUE]:EFFECT [flags]",
		Short: "Taint a workload cluster (fleet drain), with a preview of every service whose traffic moves (guarded)",
		Long:  taintLong,
		Example: `  publisher taint worker-a maintenance=planned:NoExecute
  publisher taint worker-a maintenance=planned:NoExecute --yes --wait
  publisher untaint worker-a maintenance:NoExecute --yes --wait`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return guardedExit(runTaint(cmd.Context(), action, f, args, stdout, stderr))
		},
		ValidArgsFunction: completeClusters(f.kube),
	}
	if action == drain.ActionUntaint {
		cmd.Use = "untaint CLUSTER KEY[:EFFECT] [flags]"
		cmd.Short = "Remove a workload cluster's taint, with a preview of every service whose traffic moves (guarded)"
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&f.source, "source", string(drain.SourceAuto), "where the taint is written: auto, InferenceCluster (modelplane.ai spec.taints) or WorkloadCluster (ome.io, annotation publisher.trafficmap.dev/taints)")
	fs.BoolVar(&f.yes, "yes", false, "skip the prompt (required when stdin is not a terminal)")
	fs.BoolVar(&f.allowNoTraffic, "allow-no-traffic", false, "proceed even when a service is left with no positive effective weight (all traffic to it stops), or its weights cannot be computed")
	fs.DurationVar(&f.ramp.Duration, "ramp", 0, "move each service's share of the cluster gradually, in --ramp-steps equal steps over this duration (1s..24h), "+
		"instead of at once (a ramp annotation on every moved InferenceService, written before the taint)")
	fs.IntVar(&f.ramp.Steps, "ramp-steps", weights.DefaultRampSteps, "how many steps --ramp takes (1..100)")
	fs.StringVar(&f.dryRun, "dry-run", string(drain.DryRunNone), "none, client (no patch is sent) or server (dryRun=All)")
	fs.Var(&f.wait, "wait", "after the patch, wait until every moved TrafficMap is Published again with the new weights; bare: 5m; needs what 'status' needs")
	fs.Lookup("wait").NoOptDefVal = "true"
	fs.StringVarP(&f.output, "output", "o", "table", "table, wide, json or yaml")
	f.kube.AddFlags(fs)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return exit(exitFailure, fmt.Errorf("invalid %s flags: %w; use --help", action, err))
	})
	completeValues(cmd, "source", drain.Sources...)
	completeValues(cmd, "dry-run", string(drain.DryRunNone), string(drain.DryRunClient), string(drain.DryRunServer))
	completeValues(cmd, "output", drain.Outputs...)
	return cmd
}

// taintChange is a parsed taint or untaint argument.
type taintChange struct {
	taint  weights.Taint  // taint
	key    string         // untaint
	effect weights.Effect // untaint; empty: both effects
}

// taintRequest is a taint or untaint command line, checked: everything that can be checked
// before any API client exists.
type taintRequest struct {
	action  drain.Action
	cluster string
	dry     drain.DryRun
	source  drain.Source
	change  taintChange
}

// runTaint runs 'publisher taint' or 'untaint': check the command line, plan the taint
// change and preview the services it moves, guard against stopping traffic, confirm, write
// (ramps, Published=False, the taint), report, and with --wait wait until every moved
// service is published again.
func runTaint(ctx context.Context, action drain.Action, f taintFlags, positional []string, stdout, stderr io.Writer) (int, error) {
	req, err := parseTaintRequest(action, f, positional)
	if err != nil {
		return 0, err
	}
	parent := ctx
	kc, dyn, ctx, cancel, err := actionClients(ctx, f.kube)
	if err != nil {
		return 0, err
	}
	defer cancel()
	client := drain.ClusterClient{Dynamic: dyn, Action: action}
	plan, moved, ramps, err := previewTaint(ctx, kc, client, req, f.ramp, stderr)
	if err != nil {
		return 0, err
	}
	prompt, err := guardTaint(plan, moved, f.allowNoTraffic)
	if err != nil {
		return 0, err
	}
	if !f.yes {
		if err := confirm(ctx, stderr, prompt); err != nil {
			return 0, err
		}
	}
	rv, flips := plan.Object.ResourceVersion, map[string]drain.Flip{}
	if req.dry != drain.DryRunClient {
		w := taintWrite{kc: kc, isvcs: drain.Client{Dynamic: dyn, Action: action}, client: client, plan: plan, dry: req.dry, stderr: stderr}
		if rv, flips, err = w.run(ctx, moved, ramps, f.wait.set); err != nil {
			return 0, err
		}
	}
	res := drain.NewTaintResult(plan, req.dry, rv, moved, time.Now())
	if err := drain.WriteTaintResult(stdout, res, f.output); err != nil {
		return 0, err
	}
	if !f.wait.set {
		return exitOK, nil
	}
	return waitTainted(parent, kc, moved, flips, ramps, f.wait, stderr)
}

// parseTaintRequest checks the positional arguments (the workload cluster and the taint or
// untaint argument) and the flags of a taint or untaint.
func parseTaintRequest(action drain.Action, f taintFlags, positional []string) (taintRequest, error) {
	if len(positional) != 2 {
		return taintRequest{}, fmt.Errorf("exactly a workload cluster and a taint are required: %s", map[drain.Action]string{
			drain.ActionTaint: "taint CLUSTER KEY[=VALUE]:EFFECT", drain.ActionUntaint: "untaint CLUSTER KEY[:EFFECT]"}[action])
	}
	req := taintRequest{action: action, cluster: positional[0], dry: drain.DryRun(f.dryRun), source: drain.Source(f.source)}
	if !drain.ValidClusterName(req.cluster) {
		return taintRequest{}, fmt.Errorf("workload cluster %q must be a DNS-1123 subdomain", req.cluster)
	}
	if !slices.Contains(drain.Outputs, f.output) {
		return taintRequest{}, drain.ErrOutput
	}
	if req.dry != drain.DryRunNone && req.dry != drain.DryRunClient && req.dry != drain.DryRunServer {
		return taintRequest{}, drain.ErrDryRun
	}
	if !slices.Contains(drain.Sources, f.source) {
		return taintRequest{}, fmt.Errorf("--source must be one of %s", strings.Join(drain.Sources, ", "))
	}
	if f.wait.set && req.dry != drain.DryRunNone {
		return taintRequest{}, errors.New("--wait waits for an applied change; a dry run applies none")
	}
	if f.ramp.Duration != 0 {
		if err := f.ramp.Validate(); err != nil {
			return taintRequest{}, err
		}
	}
	var err error
	if action == drain.ActionTaint {
		req.change.taint, err = drain.ParseTaintArg(positional[1])
	} else {
		req.change.key, req.change.effect, err = drain.ParseUntaintArg(positional[1])
	}
	if err != nil {
		return taintRequest{}, err
	}
	return req, nil
}

// previewTaint plans req's change of the cluster object, finds the services it moves and
// writes the preview to stderr; with --ramp (spec set) it plans and previews the ramp of
// every moved service too.
func previewTaint(ctx context.Context, kc kube, client drain.ClusterClient, req taintRequest, spec drain.RampSpec,
	stderr io.Writer) (*drain.TaintPlan, []report.Impact, []serviceRamp, error) {
	plan, err := planTaint(ctx, client, req.action, req.source, req.cluster, req.change)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := newReader(kc, report.Reader{NoHostnames: true})
	if err != nil {
		return nil, nil, nil, err
	}
	moved, objs, err := taintImpacts(ctx, r, plan)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := drain.WriteTaintPreview(stderr, plan, drain.TaintPreviewInput{Context: kc.context, DryRun: req.dry}, moved); err != nil {
		return nil, nil, nil, err
	}
	if spec.Duration == 0 {
		return plan, moved, nil, nil
	}
	ramps, err := planTaintRamps(plan, moved, objs, spec, time.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	for _, sr := range ramps {
		fmt.Fprintf(stderr, "Ramp of InferenceService %s/%s: %s.\n", sr.target.Namespace, sr.target.Name, sr.change.Describe())
	}
	return plan, moved, ramps, nil
}

// guardTaint refuses a change that leaves a moved service with no positive effective
// weight, or whose weights cannot be computed, unless allowNoTraffic; it returns the prompt
// to confirm the change with.
func guardTaint(plan *drain.TaintPlan, moved []report.Impact, allowNoTraffic bool) (string, error) {
	var stopped, unknown []string
	for _, imp := range moved {
		switch {
		case !imp.Computable():
			unknown = append(unknown, imp.Ref())
		case imp.StopsTraffic():
			stopped = append(stopped, imp.Ref())
		}
	}
	guarded := append(slices.Clone(stopped), unknown...)
	if len(guarded) == 0 {
		return drain.ConfirmPrompt, nil
	}
	if allowNoTraffic {
		return drain.NoTrafficPrompt(guarded), nil
	}
	var why []string
	if len(stopped) > 0 {
		why = append(why, "it leaves "+strings.Join(stopped, ", ")+" with no positive effective weight: all traffic to them would stop")
	}
	if len(unknown) > 0 {
		why = append(why, "the effective weights of "+strings.Join(unknown, ", ")+" cannot be computed, so it cannot be shown that their traffic continues")
	}
	return "", fmt.Errorf("%w: %s %s on %s %s: %s; pass --allow-no-traffic to proceed anyway",
		drain.ErrNoTraffic, plan.Action, strings.Join(changedNames(plan), ","), plan.Object.Source, plan.Object.Name, strings.Join(why, "; "))
}

// taintWrite writes a confirmed taint change that is not a client dry run.
type taintWrite struct {
	kc     kube
	isvcs  drain.Client        // writes the ramps
	client drain.ClusterClient // writes the taint
	plan   *drain.TaintPlan
	dry    drain.DryRun
	stderr io.Writer
}

// run writes the ramps first (a ramp waits, idle, until the taint it eases in holds the
// entry; before the flips, so the publisher's reconcile of the ramp's write does not follow
// and undo them), then sets Published=False on every moved map, then the taint; with wait,
// it sets Published=False again after the patch as the wait's baseline. It returns the
// cluster object's resourceVersion after the write and the flips by map key.
func (w taintWrite) run(ctx context.Context, moved []report.Impact, ramps []serviceRamp, wait bool) (string, map[string]drain.Flip, error) {
	maps, err := omeclient.NewForConfig(w.kc.rest)
	if err != nil {
		return "", nil, drain.ErrContext
	}
	for _, sr := range ramps {
		if err := w.isvcs.ApplyRamp(ctx, sr.target, sr.change, w.dry); err != nil {
			return "", nil, fmt.Errorf("ramp of inferenceservice %s/%s: %w", sr.target.Namespace, sr.target.Name, err)
		}
	}
	mc := drain.MapClient{Maps: maps}
	flips := w.markPublishing(ctx, mc, moved)
	rv, err := w.client.Apply(ctx, w.plan, w.dry)
	if err != nil {
		return "", nil, err
	}
	if wait && w.dry == drain.DryRunNone {
		w.markPatched(ctx, mc, moved, flips)
	}
	return rv, flips, nil
}

// markPublishing sets Published=False on every moved map before the taint is written, so
// the column is never stale for this change; a map that cannot be marked gets a warning.
func (w taintWrite) markPublishing(ctx context.Context, mc drain.MapClient, moved []report.Impact) map[string]drain.Flip {
	flips := map[string]drain.Flip{}
	for _, imp := range moved {
		flip, err := mc.Mark(ctx, imp.Namespace, imp.TrafficMap, w.dry, time.Now(), drain.TaintedMessage(w.plan, false))
		switch {
		case errors.Is(err, drain.ErrNoTrafficMap):
		case err != nil:
			fmt.Fprintf(w.stderr, "warning: Published of %s/%s not set to False: %v; PUBLISHED may show the state before this %s until the publisher publishes it "+
				"(setting it needs patch on trafficmaps.ome.io/status)\n", imp.Namespace, imp.TrafficMap, err, w.plan.Action)
		default:
			flips[imp.Namespace+"/"+imp.TrafficMap] = flip
		}
	}
	return flips
}

// markPatched sets Published=False again, after the patch, on every map marked before it:
// the wait's baseline, since a True from before the patch is not this change's.
func (w taintWrite) markPatched(ctx context.Context, mc drain.MapClient, moved []report.Impact, flips map[string]drain.Flip) {
	for _, imp := range moved {
		k := imp.Namespace + "/" + imp.TrafficMap
		if !flips[k].Written() {
			continue
		}
		if again, err := mc.Mark(ctx, imp.Namespace, imp.TrafficMap, drain.DryRunNone, time.Now(), drain.TaintedMessage(w.plan, true)); err == nil {
			flips[k] = again
		} else {
			fmt.Fprintf(w.stderr, "warning: Published of %s not set to False after the patch: %v; --wait may take a True about the weights before this %s\n", k, err, w.plan.Action)
		}
	}
}

// waitTainted waits until every moved service whose weights are computable is published
// with its new weights (--wait), beyond the end of the longest ramp for a bare --wait.
func waitTainted(ctx context.Context, kc kube, moved []report.Impact, flips map[string]drain.Flip, ramps []serviceRamp,
	wait waitFlag, stderr io.Writer) (int, error) {
	var targets []waitTarget
	for _, imp := range moved {
		if !imp.Computable() {
			fmt.Fprintf(stderr, "Not waiting for %s: its effective weights cannot be computed.\n", imp.Ref())
			continue
		}
		targets = append(targets, waitTarget{namespace: imp.Namespace, name: imp.TrafficMap, done: taintPublished(imp, flips[imp.Namespace+"/"+imp.TrafficMap])})
	}
	if len(targets) == 0 {
		fmt.Fprintln(stderr, "No service's traffic moves: nothing to wait for.")
		return exitOK, nil
	}
	timeout := wait.d
	for _, sr := range ramps {
		timeout = max(timeout, rampWait(wait, sr.change))
	}
	return waitMaps(ctx, kc, targets, timeout, stderr)
}

// serviceRamp is the ramp annotation change of one InferenceService a taint moves.
type serviceRamp struct {
	target drain.RampTarget
	change *drain.RampChange
}

// planTaintRamps plans, for every moved service whose weights are computable, the ramp
// annotation change that eases the taint (down) or untaint (up) of the plan's cluster in:
// the hold is the NoExecute taint changed (a NoSchedule taint moves no traffic).
func planTaintRamps(plan *drain.TaintPlan, moved []report.Impact, objs []report.Objects, spec drain.RampSpec, now time.Time) ([]serviceRamp, error) {
	i := slices.IndexFunc(plan.Changed, func(t weights.Taint) bool { return t.Effect == weights.EffectNoExecute })
	if i < 0 {
		return nil, nil
	}
	hold, cluster := plan.Changed[i].String(), plan.Object.Name
	dir := weights.RampDown
	if plan.Action == drain.ActionUntaint {
		dir = weights.RampUp
	}
	after := plan.ClusterTaints()
	var out []serviceRamp
	for k, imp := range moved {
		o := objs[k]
		if !imp.Computable() || o.Source == nil {
			continue
		}
		from, stillHeld, err := rampBounds(o, o.WithClusterTaints(after), cluster)
		if err != nil {
			return nil, fmt.Errorf("--ramp needs the weights of %s: %w", imp.Ref(), err)
		}
		ch, err := drain.PlanRamp(o.Source.Annotations, dir, cluster, hold, from, stillHeld, spec, now)
		if err != nil {
			return nil, fmt.Errorf("ramp of %s: %w", imp.Ref(), err)
		}
		if ch != nil {
			out = append(out, serviceRamp{target: drain.RampTarget{Namespace: o.Source.Namespace, Name: o.Source.Name,
				UID: string(o.Source.UID), ResourceVersion: o.Source.ResourceVersion}, change: ch})
		}
	}
	return out, nil
}

func changedNames(p *drain.TaintPlan) []string {
	out := make([]string, len(p.Changed))
	for i, t := range p.Changed {
		out[i] = t.String()
	}
	return out
}

// planTaint reads the source object the change writes and plans it. For --source=auto a
// taint writes the InferenceCluster when it exists, else the WorkloadCluster; an untaint
// writes the one holding a matching taint (both holding one is refused: name the source).
func planTaint(ctx context.Context, c drain.ClusterClient, action drain.Action, src drain.Source, cluster string, ch taintChange) (*drain.TaintPlan, error) {
	candidates := []drain.Source{src}
	if src == drain.SourceAuto {
		candidates = []drain.Source{drain.SourceInferenceCluster, drain.SourceWorkloadCluster}
	}
	var found []drain.ClusterObject
	for _, s := range candidates {
		obj, ok, err := c.Get(ctx, s, cluster)
		if err != nil {
			return nil, err
		}
		if ok {
			found = append(found, obj)
		}
	}
	if len(found) == 0 {
		names := make([]string, len(candidates))
		for i, s := range candidates {
			names[i] = string(s)
		}
		return nil, fmt.Errorf("%s refused: no %s named %s; the publisher reads a workload cluster's taints from one of them", action, strings.Join(names, " or "), cluster)
	}
	if action == drain.ActionTaint {
		return drain.PlanTaint(found[0], ch.taint)
	}
	if len(found) == 1 {
		return drain.PlanUntaint(found[0], ch.key, ch.effect)
	}
	var holding []drain.ClusterObject
	for _, obj := range found {
		if slices.ContainsFunc(obj.Taints, func(t weights.Taint) bool { return drain.Matches(t, ch.key, ch.effect) }) {
			holding = append(holding, obj)
		}
	}
	switch len(holding) {
	case 0:
		return drain.PlanUntaint(found[0], ch.key, ch.effect) // refused: names the first source
	case 1:
		return drain.PlanUntaint(holding[0], ch.key, ch.effect)
	}
	return nil, fmt.Errorf("untaint refused: both the InferenceCluster and the WorkloadCluster %s hold a taint %s; pass --source for each", cluster, ch.key)
}

// taintImpacts computes, for every TrafficMap in every namespace with an entry for the
// plan's cluster, its effective weights before and after the plan (model.Compute over
// the map's current drains, taints and tolerations, the source's view replaced), and
// returns those whose traffic moves, sorted by namespace and name, with the objects each
// was computed from.
func taintImpacts(ctx context.Context, r report.Reader, p *drain.TaintPlan) ([]report.Impact, []report.Objects, error) {
	list, err := r.Maps.OmeV1beta1().TrafficMaps("").List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, nil, fmt.Errorf("forbidden: cannot list trafficmaps.ome.io in all namespaces; the %s previews every service on the cluster: it needs that and what status needs: %s", p.Action, report.Needs)
	case err != nil:
		return nil, nil, fmt.Errorf("list trafficmaps.ome.io in all namespaces: %w", err)
	}
	after := p.ClusterTaints()
	type movedMap struct {
		imp report.Impact
		obj report.Objects
	}
	var found []movedMap
	for i := range list.Items {
		tm := &list.Items[i]
		if tm.DeletionTimestamp != nil {
			continue // being deleted: the publisher sets its weights to 0 and removes it (teardown)
		}
		if !slices.ContainsFunc(tm.Spec.Entries, func(e v1beta1.TrafficMapEntry) bool { return e.Cluster == after.Cluster }) {
			continue
		}
		o, err := r.Objects(ctx, tm)
		if err != nil {
			return nil, nil, err
		}
		if imp := report.NewImpact(o, o.WithClusterTaints(after)); imp.Moves() {
			found = append(found, movedMap{imp, o})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i].imp, found[j].imp
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.TrafficMap < b.TrafficMap
	})
	moved, objs := []report.Impact{}, make([]report.Objects, 0, len(found))
	for _, m := range found {
		moved, objs = append(moved, m.imp), append(objs, m.obj)
	}
	return moved, objs, nil
}

// taintPublished is --wait's decision for one map a taint or untaint moves: the status's
// effective weights are the preview's after-weights (the change is in the inputs), and the
// map is Published with them (conditionPublished).
func taintPublished(imp report.Impact, flip drain.Flip) func(*v1beta1.TrafficMap, report.Status) (string, bool) {
	return func(tm *v1beta1.TrafficMap, st report.Status) (string, bool) {
		want := map[string]int32{}
		for _, c := range imp.Clusters {
			want[c.Cluster] = *c.After
		}
		got := map[string]int32{}
		for _, c := range st.Clusters {
			if c.Effective != nil {
				got[c.Cluster] = *c.Effective
			}
		}
		if st.Error != "" || !mapsEqual(want, got) {
			return fmt.Sprintf("the effective weights are not yet the previewed ones (%s)", describeWeights(want)), false
		}
		return conditionPublished(tm, st, flip)
	}
}

func mapsEqual(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func describeWeights(w map[string]int32) string {
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, w[k])
	}
	return strings.Join(parts, ", ")
}

// completeClusters completes CLUSTER with the names of the InferenceClusters and
// WorkloadClusters the flags' API serves; nothing when they cannot be listed.
func completeClusters(k *kubeFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kc, err := loadKube(k)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		dyn, err := dynamic.NewForConfig(kc.rest)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), drain.RequestTimeout)
		defer cancel()
		seen := map[string]bool{}
		var names []cobra.Completion
		for _, src := range []drain.Source{drain.SourceInferenceCluster, drain.SourceWorkloadCluster} {
			list, err := dyn.Resource(src.Resource()).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, u := range list.Items {
				if n := u.GetName(); strings.HasPrefix(n, toComplete) && !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
		}
		sort.Strings(names)
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
