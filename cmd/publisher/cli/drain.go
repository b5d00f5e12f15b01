package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/drain"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

// exitConflict is the exit code of a rejected guarded patch (stale UID or resourceVersion).
const exitConflict = 3

// exitWaitTimeout is the exit code of a drain or undrain whose --wait ended before the
// publisher published it; the annotation was changed.
const exitWaitTimeout = 4

// exitNoTraffic is the exit code of the last-serving guard's refusal: the change would stop
// all traffic to a service (or its weights cannot be computed) and --allow-no-traffic was
// not given; nothing was changed.
const exitNoTraffic = 6

// defaultWait is how long a bare --wait waits.
const defaultWait = 5 * time.Minute

// waitPoll is how often --wait reads the TrafficMap and its objects, and waitQPS the
// request rate its client may use.
const (
	waitPoll = 500 * time.Millisecond
	waitQPS  = 20
)

// actionTimeout bounds a drain or undrain, prompt included.
const actionTimeout = 45 * time.Second

// stdin is where the confirmation is read from; a var so that tests can replace it.
var stdin = os.Stdin

// actionLong describes drain and undrain; cobra adds the usage and the flags.
const actionLong = `Add (drain) or remove (undrain) one entry of the ome.io/traffic-drain annotation on the
InferenceService SERVICE, the same guarded action as OME's 'kubectl ome traffic drain'.
The request is validated, a preview is printed to stderr and, on a terminal, you confirm it
with y. One JSON merge patch then carries the object's exact UID and resourceVersion, which
the API server enforces, and changes only that annotation; other annotations and drain IDs
are preserved; a change after the read makes it fail with exit 3. API acceptance is not
TrafficMap convergence: run 'publisher status' to see what is published, or use --wait.

The InferenceService must be eligible for cross-cluster traffic routing: it needs
spec.placement (OME's placement of the service on workload clusters); without it the
action is refused ("target is not eligible for cross-cluster traffic routing").

Just before the patch, the TrafficMap named SERVICE gets Published=False (reason Publishing,
its message naming the drain), written with server-side apply under the publisher's field
manager, so PUBLISHED is never stale, also while no publisher runs; the publisher sets it True
once it has published the new weights. When RBAC forbids that write (patch on
trafficmaps.ome.io/status) the patch is still sent and a warning says so. A dry run writes
nothing (server: both requests are sent with dryRun=All).

The whole command has a 45-second deadline, prompt included; each API request 10 seconds
(a shorter --request-timeout applies too). The reason is refused when it looks like a
credential (see docs/reference/commands.md, "Drain reasons").

Last-serving guard: the preview shows the service's effective weights per cluster before and
after the change, computed with the publisher's own computation over every current drain,
taint and toleration (reading what status reads). A drain that leaves the service with no
positive effective weight, so that all traffic to it would stop, or whose weights cannot be
computed or read, is refused with exit 6, also in dry runs, unless --allow-no-traffic is
given; the prompt then says that all traffic to the service stops.

Gradual drain: --ramp DURATION moves the cluster's share in --ramp-steps equal steps (default
10) over DURATION instead of at once: the same patch writes the publisher's ramp annotation
(publisher.trafficmap.dev/ramp), and the publisher publishes each step once the one before is
in place on every sink, with Published False (reason Ramping) until the last. An undrain with
--ramp brings the share back the same way; see docs/how-to/ramped-drain.md.

Exit codes: 0 done, 1 refused or failed (nothing confirmed, or outcome unknown), 3 the
guarded patch was rejected because the object changed since it was read, 4 --wait timed
out (the patch was applied; the publisher has not published it yet), 6 refused by the
last-serving guard (nothing was changed).`

type actionFlags struct {
	kube                *kubeFlags
	workloadCluster, id string
	reason              string
	yes                 bool
	allowNoTraffic      bool
	dryRun, output      string
	wait                waitFlag
	ramp                drain.RampSpec
}

// waitFlag is --wait[=DURATION]: bare, it waits defaultWait.
type waitFlag struct {
	set bool
	d   time.Duration
}

func (w *waitFlag) String() string {
	if !w.set {
		return ""
	}
	return w.d.String()
}

// Set implements pflag.Value; "true" is a bare --wait and "false" no wait.
func (w *waitFlag) Set(v string) error {
	switch v {
	case "true":
		w.set, w.d = true, defaultWait
		return nil
	case "false":
		w.set, w.d = false, 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("must be a positive duration")
	}
	w.set, w.d = true, d
	return nil
}

// Type implements pflag.Value.
func (w *waitFlag) Type() string { return "duration" }

// newActionCommand returns 'publisher drain' or 'publisher undrain'. Every error exits 1,
// except a rejected guarded patch (3) and a --wait that timed out (4).
func newActionCommand(action drain.Action, stdout, stderr io.Writer) *cobra.Command {
	f := actionFlags{kube: newKubeFlags()}
	cmd := &cobra.Command{
		Use:   string(action) + " SERVICE -n NAMESPACE --workload-cluster CLUSTER --id ID --reason REASON [flags]",
		Short: "Add one drain to an InferenceService's ome.io/traffic-drain annotation (guarded)",
		Long:  actionLong,
		Example: `  publisher drain chat -n prod --workload-cluster worker-a --id maintenance-a --reason "planned maintenance"
  publisher undrain chat -n prod --id maintenance-a --wait`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return guardedExit(runAction(cmd.Context(), action, f, args, stdout, stderr))
		},
		ValidArgsFunction: completeTrafficMaps(f.kube),
	}
	if action == drain.ActionUndrain {
		cmd.Use = "undrain SERVICE -n NAMESPACE --id ID [flags]"
		cmd.Short = "Remove one drain by its ID (guarded)"
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	if action == drain.ActionDrain {
		fs.StringVar(&f.workloadCluster, "workload-cluster", "", "required: the WorkloadCluster to drain (a DNS-1123 subdomain); not --cluster, which selects the Kubernetes API")
		fs.StringVar(&f.reason, "reason", "", "required: why (at most 256 bytes, one line, nothing that looks like a credential)")
	}
	fs.StringVar(&f.id, "id", "", "required: the drain ID (a DNS-1123 label)")
	fs.BoolVar(&f.yes, "yes", false, "skip the prompt (required when stdin is not a terminal)")
	if action == drain.ActionDrain {
		fs.BoolVar(&f.allowNoTraffic, "allow-no-traffic", false, "drain even when no cluster of the service keeps a positive effective weight (all traffic to it stops), or when that cannot be computed")
	}
	fs.DurationVar(&f.ramp.Duration, "ramp", 0, "move the cluster's share gradually, in --ramp-steps equal steps over this duration (1s..24h), "+
		"instead of at once; the publisher publishes each step once the step before is in place on every sink, and Published stays False (Ramping) until the last")
	fs.IntVar(&f.ramp.Steps, "ramp-steps", weights.DefaultRampSteps, "how many steps --ramp takes (1..100)")
	fs.StringVar(&f.dryRun, "dry-run", string(drain.DryRunNone), "none, client (no patch is sent) or server (dryRun=All)")
	fs.Var(&f.wait, "wait", "after the patch, wait until the TrafficMap is Published again with the new weights; bare: 5m; needs what 'status' needs")
	fs.Lookup("wait").NoOptDefVal = "true"
	fs.StringVarP(&f.output, "output", "o", "table", "table, wide, json or yaml")
	f.kube.AddFlags(fs)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return exit(exitFailure, fmt.Errorf("invalid traffic action flags: %w; use --help", err))
	})
	completeValues(cmd, "dry-run", string(drain.DryRunNone), string(drain.DryRunClient), string(drain.DryRunServer))
	completeValues(cmd, "output", drain.Outputs...)
	return cmd
}

// runAction runs 'publisher drain' or 'undrain': check the command line, read the service
// and plan the annotation change (with --ramp, its ramp), preview it, guard against
// stopping traffic, confirm, write (Published=False, the annotation), report, and with
// --wait wait until the map is published again.
func runAction(ctx context.Context, action drain.Action, f actionFlags, positional []string, stdout, stderr io.Writer) (int, error) {
	name, dry, req, err := parseActionRequest(action, f, positional)
	if err != nil {
		return 0, err
	}
	parent := ctx
	kc, dyn, ctx, cancel, err := actionClients(ctx, f.kube)
	if err != nil {
		return 0, err
	}
	defer cancel()
	client := drain.Client{Dynamic: dyn, Action: action}
	target, err := client.Get(ctx, kc.namespace, name)
	if err != nil {
		return 0, err
	}
	plan, err := drain.Prepare(req, target)
	if err != nil {
		return 0, err
	}
	// The map and its inputs, read once for the ramp and the last-serving guard.
	before, readErr := mapObjects(ctx, kc, plan)
	if f.ramp.Duration != 0 {
		if err := planRamp(before, readErr, plan, f.ramp, stderr); err != nil {
			return 0, err
		}
	}
	if err := drain.WritePreview(stderr, plan, drain.PreviewInput{Context: kc.context, DryRun: dry}); err != nil {
		return 0, err
	}
	prompt, err := guardDrain(before, readErr, plan, f.allowNoTraffic, stderr)
	if err != nil {
		return 0, err
	}
	if !f.yes {
		if err := confirm(ctx, stderr, prompt); err != nil {
			return 0, err
		}
	}
	rv := target.ResourceVersion
	var flip drain.Flip
	if dry != drain.DryRunClient {
		if rv, flip, err = writeAction(ctx, kc, client, plan, dry, f.wait.set, stderr); err != nil {
			return 0, err
		}
	}
	res := drain.NewResult(plan, dry, rv, kc.context, time.Now())
	if err := drain.WriteResult(stdout, res, f.output); err != nil {
		return 0, err
	}
	if !f.wait.set {
		return exitOK, nil
	}
	return waitPublished(parent, kc, plan, flip, rampWait(f.wait, plan.Ramp), stderr)
}

// parseActionRequest checks everything about a drain or undrain that can be checked
// locally, before any API client exists: the service name, the flags and the request. It
// returns the service name, the dry-run mode and the request.
func parseActionRequest(action drain.Action, f actionFlags, positional []string) (string, drain.DryRun, drain.Request, error) {
	if len(positional) != 1 {
		return "", "", drain.Request{}, drain.ErrArgs
	}
	name := positional[0]
	if !slices.Contains(drain.Outputs, f.output) {
		return "", "", drain.Request{}, drain.ErrOutput
	}
	dry := drain.DryRun(f.dryRun)
	if dry != drain.DryRunNone && dry != drain.DryRunClient && dry != drain.DryRunServer {
		return "", "", drain.Request{}, drain.ErrDryRun
	}
	if !drain.ValidName(name) {
		return "", "", drain.Request{}, drain.ErrName
	}
	if f.wait.set && dry != drain.DryRunNone {
		return "", "", drain.Request{}, errors.New("--wait waits for an applied change; a dry run applies none")
	}
	if action == drain.ActionDrain && f.workloadCluster == "" {
		return "", "", drain.Request{}, drain.ErrWorkloadCluster
	}
	req := drain.Request{Action: action, ID: f.id, Cluster: f.workloadCluster, Reason: f.reason}
	if err := req.Validate(); err != nil {
		return "", "", drain.Request{}, err
	}
	if f.ramp.Duration != 0 {
		if err := f.ramp.Validate(); err != nil {
			return "", "", drain.Request{}, err
		}
	}
	return name, dry, req, nil
}

// writeAction writes a confirmed drain or undrain that is not a client dry run:
// Published=False first, so that the column is never stale for this change, then the
// annotation; with wait, Published=False again after the patch as the wait's baseline. It
// returns the service's resourceVersion after the write and the map's flip.
func writeAction(ctx context.Context, kc kube, client drain.Client, plan *drain.Plan, dry drain.DryRun, wait bool,
	stderr io.Writer) (string, drain.Flip, error) {
	maps, err := omeclient.NewForConfig(kc.rest)
	if err != nil {
		return "", drain.Flip{}, drain.ErrContext
	}
	flip, err := drain.MapClient{Maps: maps}.MarkPublishing(ctx, plan, dry, time.Now())
	switch {
	case errors.Is(err, drain.ErrNoTrafficMap):
		// Routing is off for the service: no TrafficMap, no condition to keep fresh.
	case err != nil:
		fmt.Fprintf(stderr, "warning: Published not set to False: %v; PUBLISHED may show the state before this %s until the publisher publishes it "+
			"(setting it needs patch on trafficmaps.ome.io/status)\n", err, client.Action)
	}
	rv, err := client.Apply(ctx, plan, dry)
	if err != nil {
		return "", drain.Flip{}, err
	}
	if wait && flip.Written() && dry == drain.DryRunNone {
		// The wait's baseline: a True from before the patch is not this change's.
		if again, err := (drain.MapClient{Maps: maps}).MarkPatched(ctx, plan, time.Now()); err == nil {
			flip = again
		} else {
			fmt.Fprintf(stderr, "warning: Published not set to False after the patch: %v; --wait may take a True about the weights before this %s\n", err, client.Action)
		}
	}
	return rv, flip, nil
}

// rampWait is how long --wait waits: a bare --wait waits defaultWait beyond a ramp's end.
func rampWait(w waitFlag, ramp *drain.RampChange) time.Duration {
	if ramp == nil || w.d != defaultWait {
		return w.d
	}
	r := ramp.Ramp
	return w.d + time.Until(r.End())
}

// planRamp adds to plan the ramp annotation change that eases it in (--ramp), from the
// map's objects as read before the change (before, or readErr): the cluster's effective
// weight before the drain, ignoring ramps, is where a down ramp starts. A service no
// TrafficMap publishes cannot ramp; a change with nothing to ramp goes without one.
func planRamp(before report.Objects, readErr error, plan *drain.Plan, spec drain.RampSpec, stderr io.Writer) error {
	switch {
	case errors.Is(readErr, drain.ErrNoTrafficMap):
		return fmt.Errorf("--ramp: no TrafficMap publishes InferenceService %s/%s, so no publisher ramps it", plan.Target.Namespace, plan.Target.Name)
	case readErr != nil:
		return fmt.Errorf("--ramp needs the service's weights: %w", readErr)
	}
	from, stillHeld, err := rampBounds(before, before.WithAnnotations(plan.AnnotationsAfter()), plan.Cluster)
	if err != nil {
		return fmt.Errorf("--ramp needs the service's weights: %w", err)
	}
	dir := weights.RampDown
	if plan.Request.Action == drain.ActionUndrain {
		dir = weights.RampUp
	}
	plan.Ramp, err = drain.PlanRamp(plan.Target.Annotations, dir, plan.Cluster, plan.Request.ID, from, stillHeld, spec, time.Now())
	if err != nil {
		return err
	}
	if plan.Ramp == nil {
		fmt.Fprintf(stderr, "Nothing to ramp: cluster %s carries no traffic of the service before the drain, or stays held after the undrain; the change applies at once.\n", plan.Cluster)
	}
	return nil
}

// rampBounds is what a ramp of cluster starts from, ignoring ramps under way
// (model.Computed.Final): its effective weight before a change (the objects before) and
// whether something still holds it after it (the objects after).
func rampBounds(before, after report.Objects, cluster string) (from int32, stillHeld bool, err error) {
	b, err := report.Effective(before)
	if err != nil {
		return 0, false, err
	}
	a, err := report.Effective(after)
	if err != nil {
		return 0, false, err
	}
	for _, e := range b.Final.Entries {
		if e.Cluster == cluster {
			from = e.Effective
		}
	}
	for _, e := range a.Final.Entries {
		if e.Cluster == cluster {
			stillHeld = e.Drained()
		}
	}
	return from, stillHeld, nil
}

// guardDrain is the last-serving guard of a drain or undrain: from the map's objects as
// read before the change (before, or readErr from mapObjects) it computes the service's
// effective weights before and after the plan with the publisher's computation
// (model.Compute over every current drain, taint and toleration, as status reads them),
// writes them, and returns the confirmation prompt. A drain that leaves the service with no
// positive effective weight, or whose weights cannot be computed or read, is refused
// (drain.ErrNoTraffic; a refused read: the permission error) unless allow is set; then the
// prompt says that all traffic stops. An undrain never stops traffic: its weights are shown
// when they can be read. A service no TrafficMap publishes has none to guard.
func guardDrain(before report.Objects, readErr error, plan *drain.Plan, allow bool, stderr io.Writer) (string, error) {
	imp, err := report.Impact{}, readErr
	if err == nil {
		imp = report.NewImpact(before, before.WithAnnotations(plan.AnnotationsAfter()))
	}
	isDrain := plan.Request.Action == drain.ActionDrain
	switch {
	case errors.Is(err, drain.ErrNoTrafficMap):
		fmt.Fprintf(stderr, "No TrafficMap publishes InferenceService %s/%s (routing is off for it): no effective weights to show.\n", plan.Target.Namespace, plan.Target.Name)
		return drain.ConfirmPrompt, nil
	case err != nil && isDrain && !allow:
		return "", fmt.Errorf("the last-serving guard cannot read the service's weights: %w; --allow-no-traffic drains without the check", err)
	case err != nil:
		fmt.Fprintf(stderr, "Effective weights not shown: %v\n", err)
		if isDrain {
			return drain.NoTrafficPrompt([]string{plan.Target.Namespace + "/" + plan.Target.Name}), nil
		}
		return drain.ConfirmPrompt, nil
	}
	if err := report.WriteImpacts(stderr, []report.Impact{imp}); err != nil {
		return "", err
	}
	if !isDrain || !imp.Guarded() {
		return drain.ConfirmPrompt, nil
	}
	if !allow {
		why := fmt.Sprintf("draining %s leaves InferenceService %s with no positive effective weight: all traffic to the service would stop", plan.Cluster, imp.Ref())
		if !imp.Computable() {
			why = "draining " + plan.Cluster + ": " + report.UnknownMessage(imp)
		}
		return "", fmt.Errorf("%w: %s; pass --allow-no-traffic to drain anyway", drain.ErrNoTraffic, why)
	}
	return drain.NoTrafficPrompt([]string{imp.Ref()}), nil
}

// mapObjects reads the TrafficMap named as the plan's target and its inputs;
// drain.ErrNoTrafficMap when no map publishes the service.
func mapObjects(ctx context.Context, kc kube, plan *drain.Plan) (report.Objects, error) {
	r, err := newReader(kc, report.Reader{NoHostnames: true})
	if err != nil {
		return report.Objects{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, drain.RequestTimeout)
	defer cancel()
	tm, err := r.Maps.OmeV1beta1().TrafficMaps(plan.Target.Namespace).Get(ctx, plan.Target.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return report.Objects{}, drain.ErrNoTrafficMap
	case apierrors.IsForbidden(err):
		return report.Objects{}, fmt.Errorf("%w: cannot get trafficmaps.ome.io in namespace %s; %s", report.ErrForbidden, plan.Target.Namespace, report.Needs)
	case err != nil:
		return report.Objects{}, fmt.Errorf("get trafficmap %s/%s: %w", plan.Target.Namespace, plan.Target.Name, err)
	case tm.Spec.Service != plan.Target.Name:
		return report.Objects{}, drain.ErrNoTrafficMap
	}
	return r.Objects(ctx, tm)
}

// confirm asks on the terminal with prompt; a stdin that is not a terminal never confirms
// (drain.ErrNotConfirmed), an answer other than y or yes declines (drain.ErrDeclined).
func confirm(ctx context.Context, stderr io.Writer, prompt string) error {
	fd := int(stdin.Fd())
	if !term.IsTerminal(fd) {
		return drain.ErrNotConfirmed
	}
	// Raw mode before the prompt: an answer typed as soon as the prompt shows is then never
	// echoed by the terminal as well as by drain.Confirm.
	state, err := term.MakeRaw(fd)
	if err != nil {
		return drain.ErrNotConfirmed
	}
	defer func() { _ = term.Restore(fd, state) }()
	fmt.Fprint(stderr, prompt)
	return drain.Confirm(ctx, stdin, stderr)
}

// actionClients resolves the kubeconfig selection and builds the dynamic client a drain,
// undrain or taint writes with; ctx is bounded by actionTimeout until cancel. A client that
// cannot be built is drain.ErrContext.
func actionClients(ctx context.Context, k *kubeFlags) (kube, dynamic.Interface, context.Context, context.CancelFunc, error) {
	kc, err := loadKube(k)
	if err != nil {
		return kube{}, nil, ctx, func() {}, err
	}
	dyn, err := dynamic.NewForConfig(kc.rest)
	if err != nil {
		return kube{}, nil, ctx, func() {}, drain.ErrContext
	}
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	return kc, dyn, ctx, cancel, nil
}

// kube is a resolved kubeconfig selection.
type kube struct {
	rest      *rest.Config
	namespace string
	context   string
}

// loadKube resolves the kubeconfig, the context and the namespace (-n, else the context's,
// else default) from kubectl's flags without contacting the API server.
func loadKube(k *kubeFlags) (kube, error) {
	cc := k.loader()
	namespace := k.namespace()
	if namespace == "" {
		ns, _, err := cc.Namespace()
		if err != nil {
			return kube{}, errors.New("resolve workload namespace failed")
		}
		namespace = ns
	}
	if len(validation.IsDNS1123Label(namespace)) > 0 || !drain.SafeScalar(namespace) {
		return kube{}, drain.ErrNamespace
	}
	raw, err := cc.RawConfig()
	if err != nil {
		return kube{}, drain.ErrContext
	}
	name := k.context()
	if name == "" {
		name = raw.CurrentContext
	}
	if _, ok := raw.Contexts[name]; !ok || !drain.SafeScalar(name) {
		return kube{}, drain.ErrContext
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return kube{}, drain.ErrContext
	}
	return kube{rest: rc, namespace: namespace, context: name}, nil
}

// completeTrafficMaps completes SERVICE with the TrafficMaps of the namespace the flags
// select (each TrafficMap is named as its InferenceService); nothing when they cannot be
// listed.
func completeTrafficMaps(k *kubeFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kc, err := loadKube(k)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		maps, err := omeclient.NewForConfig(kc.rest)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), drain.RequestTimeout)
		defer cancel()
		list, err := maps.OmeV1beta1().TrafficMaps(kc.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		for _, tm := range list.Items {
			if strings.HasPrefix(tm.Name, toComplete) {
				names = append(names, tm.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// guardedExit maps what a guarded command (drain, undrain, taint, untaint) returned to its
// documented exit code.
func guardedExit(code int, err error) error {
	switch {
	case errors.Is(err, drain.ErrConflict):
		return exit(exitConflict, err)
	case errors.Is(err, errWaitTimeout):
		return exit(exitWaitTimeout, err)
	case errors.Is(err, drain.ErrNoTraffic):
		return exit(exitNoTraffic, err)
	case err != nil:
		return exit(exitFailure, err)
	case code != exitOK:
		return exit(code, nil)
	}
	return nil
}
