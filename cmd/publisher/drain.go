package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/drain"
)

// exitConflict is the exit code of a rejected guarded patch (stale UID or resourceVersion).
const exitConflict = 3

// exitWaitTimeout is the exit code of a drain or undrain whose --wait ended before the
// publisher published it; the annotation was changed.
const exitWaitTimeout = 4

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

const drainUsage = `Usage:
  publisher drain SERVICE -n NAMESPACE --workload-cluster CLUSTER --id ID --reason REASON [flags]
  publisher undrain SERVICE -n NAMESPACE --id ID [flags]

Add (drain) or remove (undrain) one entry of the ome.io/traffic-drain annotation on the
InferenceService SERVICE, the same guarded action as OME's 'kubectl ome traffic drain'.
The request is validated, a preview is printed to stderr and, on a terminal, you confirm it
with y. One JSON merge patch then carries the object's exact UID and resourceVersion, which
the API server enforces, and changes only that annotation; other annotations and drain IDs
are preserved; a change after the read makes it fail with exit 3. API acceptance is not
TrafficMap convergence: run 'publisher status' to see what is published, or use --wait.

Just before the patch, the TrafficMap named SERVICE gets Published=False (reason Publishing,
its message naming the drain), written with server-side apply under the publisher's field
manager, so PUBLISHED is never stale, also while no publisher runs; the publisher sets it True
once it has published the new weights. When RBAC forbids that write (patch on
trafficmaps.ome.io/status) the patch is still sent and a warning says so. A dry run writes
nothing (server: both requests are sent with dryRun=All).

The whole command has a 45-second deadline, prompt included; each API request 10 seconds.

Flags:
  -n, --namespace NS         namespace of the InferenceService (default: the context's, else default)
  --workload-cluster NAME    drain only, required: the WorkloadCluster to drain (a DNS-1123 subdomain)
  --id ID                    required: the drain ID (a DNS-1123 label)
  --reason TEXT              drain only, required: why (at most 256 bytes, one line, no secrets)
  --yes                      skip the prompt (required when stdin is not a terminal)
  --dry-run MODE             none, client (no patch is sent) or server (dryRun=All); default none
  --wait[=DURATION]          after the patch, wait until the TrafficMap is Published again with
                             the new weights (default 5m); needs what 'publisher status' needs
  -o, --output FORMAT        table, wide, json or yaml; default table
  --kubeconfig PATH          kubeconfig file (default: $KUBECONFIG or ~/.kube/config)
  --context NAME             kubeconfig context
  --cluster NAME             kubeconfig cluster (the Kubernetes API); not the workload cluster

Exit codes: 0 done, 1 refused or failed (nothing confirmed, or outcome unknown), 3 the
guarded patch was rejected because the object changed since it was read, 4 --wait timed
out (the patch was applied; the publisher has not published it yet).
`

type actionFlags struct {
	kube                kubeFlags
	namespace           string
	workloadCluster, id string
	reason              string
	yes                 bool
	dryRun, output      string
	wait                waitFlag
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

// Set implements flag.Value; "true" is a bare --wait and "false" no wait.
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
		return fmt.Errorf("--wait %q: must be a positive duration", v)
	}
	w.set, w.d = true, d
	return nil
}

// IsBoolFlag makes a bare --wait valid.
func (w *waitFlag) IsBoolFlag() bool { return true }

// kubeFlags select the Kubernetes API.
type kubeFlags struct{ kubeconfig, context, cluster string }

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&k.context, "context", "", "")
	fs.StringVar(&k.cluster, "cluster", "", "")
}

// parseInterleaved parses flags that may come before and after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func actionCommand(ctx context.Context, action drain.Action, args []string, stdout, stderr io.Writer) int {
	var f actionFlags
	fs := flag.NewFlagSet("publisher "+string(action), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.kube.register(fs)
	fs.StringVar(&f.namespace, "namespace", "", "")
	fs.StringVar(&f.namespace, "n", "", "")
	fs.StringVar(&f.id, "id", "", "")
	if action == drain.ActionDrain {
		fs.StringVar(&f.workloadCluster, "workload-cluster", "", "")
		fs.StringVar(&f.reason, "reason", "", "")
	}
	fs.BoolVar(&f.yes, "yes", false, "")
	fs.StringVar(&f.dryRun, "dry-run", string(drain.DryRunNone), "")
	fs.StringVar(&f.output, "output", "table", "")
	fs.StringVar(&f.output, "o", "table", "")
	fs.Var(&f.wait, "wait", "")
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, drainUsage)
		return exitOK
	}
	if err != nil {
		return fail(stderr, drain.ErrFlags)
	}
	code, err := runAction(ctx, action, f, positional, stdout, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	return code
}

func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "error: %v\n", err)
	switch {
	case errors.Is(err, drain.ErrConflict):
		return exitConflict
	case errors.Is(err, errWaitTimeout):
		return exitWaitTimeout
	}
	return exitFailure
}

func runAction(ctx context.Context, action drain.Action, f actionFlags, positional []string, stdout, stderr io.Writer) (int, error) {
	// Everything that can be checked locally is checked before any API client exists.
	if len(positional) != 1 {
		return 0, drain.ErrArgs
	}
	name := positional[0]
	if !slices.Contains(drain.Outputs, f.output) {
		return 0, drain.ErrOutput
	}
	dry := drain.DryRun(f.dryRun)
	if dry != drain.DryRunNone && dry != drain.DryRunClient && dry != drain.DryRunServer {
		return 0, drain.ErrDryRun
	}
	if !drain.ValidName(name) {
		return 0, drain.ErrName
	}
	if f.wait.set && dry != drain.DryRunNone {
		return 0, errors.New("--wait waits for an applied change; a dry run applies none")
	}
	if action == drain.ActionDrain && f.workloadCluster == "" {
		return 0, drain.ErrWorkloadCluster
	}
	req := drain.Request{Action: action, ID: f.id, Cluster: f.workloadCluster, Reason: f.reason}
	if err := req.Validate(); err != nil {
		return 0, err
	}
	kc, err := loadKube(f.kube, f.namespace)
	if err != nil {
		return 0, err
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	dyn, err := dynamic.NewForConfig(kc.rest)
	if err != nil {
		return 0, drain.ErrContext
	}
	client := drain.Client{Dynamic: dyn, Action: action}
	target, err := client.Get(ctx, kc.namespace, name)
	if err != nil {
		return 0, err
	}
	plan, err := drain.Prepare(req, target)
	if err != nil {
		return 0, err
	}
	if err := drain.WritePreview(stderr, plan, drain.PreviewInput{Context: kc.context, DryRun: dry}); err != nil {
		return 0, err
	}
	if !f.yes {
		if err := confirm(ctx, stderr); err != nil {
			return 0, err
		}
	}
	rv := target.ResourceVersion
	var flip drain.Flip
	if dry != drain.DryRunClient {
		// Published=False first, so that the column is never stale for this change.
		maps, err := omeclient.NewForConfig(kc.rest)
		if err != nil {
			return 0, drain.ErrContext
		}
		flip, err = drain.MapClient{Maps: maps}.MarkPublishing(ctx, plan, dry, time.Now())
		switch {
		case errors.Is(err, drain.ErrNoTrafficMap):
			// Routing is off for the service: no TrafficMap, no condition to keep fresh.
		case err != nil:
			fmt.Fprintf(stderr, "warning: Published not set to False: %v; PUBLISHED may show the state before this %s until the publisher publishes it "+
				"(setting it needs patch on trafficmaps.ome.io/status)\n", err, action)
		}
		if rv, err = client.Apply(ctx, plan, dry); err != nil {
			return 0, err
		}
		if f.wait.set && flip.Written() && dry == drain.DryRunNone {
			// The wait's baseline: a True from before the patch is not this change's.
			if again, err := (drain.MapClient{Maps: maps}).MarkPatched(ctx, plan, time.Now()); err == nil {
				flip = again
			} else {
				fmt.Fprintf(stderr, "warning: Published not set to False after the patch: %v; --wait may take a True about the weights before this %s\n", err, action)
			}
		}
	}
	res := drain.NewResult(plan, dry, rv, kc.context, time.Now())
	if err := drain.WriteResult(stdout, res, f.output); err != nil {
		return 0, err
	}
	if !f.wait.set {
		return exitOK, nil
	}
	return waitPublished(parent, kc, plan, flip, f.wait.d, stderr)
}

// confirm asks on the terminal; a stdin that is not a terminal never confirms.
func confirm(ctx context.Context, stderr io.Writer) error {
	fd := int(stdin.Fd())
	if !term.IsTerminal(fd) {
		return drain.ErrNotConfirmed
	}
	fmt.Fprint(stderr, drain.ConfirmPrompt)
	state, err := term.MakeRaw(fd)
	if err != nil {
		return drain.ErrNotConfirmed
	}
	defer func() { _ = term.Restore(fd, state) }()
	return drain.Confirm(ctx, stdin, stderr)
}

// kube is a resolved kubeconfig selection.
type kube struct {
	rest      *rest.Config
	namespace string
	context   string
}

// loadKube resolves the kubeconfig, the context and the namespace (-n, else the context's,
// else default) without contacting the API server.
func loadKube(k kubeFlags, namespace string) (kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	overrides.Context.Cluster = k.cluster
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
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
	name := k.context
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
