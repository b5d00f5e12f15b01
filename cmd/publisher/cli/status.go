package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/report"
)

// statusTimeout bounds the status command; debugXDSTimeout the read of /debug/xds.
const (
	statusTimeout = 45 * time.Second
	// exitNotPublished is the exit code of status --check when what is published is not
	// what the inputs say.
	exitNotPublished = 5
	debugXDSTimeout  = 10 * time.Second
)

// statusLong describes status; cobra adds the usage and the flags.
const statusLong = `The first form shows one TrafficMap: per cluster its TrafficMap weight, the effective weight
the publisher computes (the publisher's own computation) and the drains holding it; pending
drains; the drain annotation (a malformed one with the parser's error and the last valid
drains the publisher keeps); the Published condition, Current or Stale, with the publisher's
message verbatim; what the HTTPRoute sink holds and which gateway accepted it at which
generation; and, with --publisher-url, the xDS clients the publisher's /debug/xds lists:
node id, flavour, ACKed versions, NACKs, and whether each ACKed the versions served now.

The second form lists every service whose effective weight on CLUSTER is above 0, or cannot be
computed: when it lists nothing, the cluster receives no traffic through the publisher.

Exit codes: 0 shown (with --check: and published), 1 error, 5 (--check) shown, and what is
published differs from what the inputs say; stderr says how.`

type statusFlags struct {
	kube             *kubeFlags
	all              bool
	workloadCluster  string
	gateway, section string
	publisherURL     string
	output           string
	check            bool
}

// newStatusCommand returns 'publisher status'. Every error exits 1, --check's finding 5.
func newStatusCommand(stdout io.Writer) *cobra.Command {
	f := statusFlags{kube: newKubeFlags()}
	cmd := &cobra.Command{
		Use:   "status (SERVICE | --workload-cluster CLUSTER) [-n NAMESPACE | -A] [flags]",
		Short: "Show a TrafficMap's weights and what is published, or the services sending traffic to a workload cluster",
		Example: `  # one TrafficMap: drained, pending and effective weights, and what is published
  publisher status chat -n prod
  # every service still sending traffic to worker-a, in every namespace
  publisher status --workload-cluster worker-a -A`,
		Long: statusLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runStatus(cmd.Context(), f, args, stdout)
			switch {
			case errors.Is(err, report.ErrNotPublished):
				return exit(exitNotPublished, err)
			case err != nil:
				return exit(exitFailure, err)
			}
			return nil
		},
		ValidArgsFunction: completeTrafficMaps(f.kube),
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.BoolVarP(&f.all, "all-namespaces", "A", false, "with --workload-cluster: every namespace")
	fs.StringVar(&f.workloadCluster, "workload-cluster", "", "list the services sending traffic to this cluster")
	fs.StringVar(&f.gateway, "gateway", "", "the Gateway whose verdict is shown, NAMESPACE/NAME (default: the route's parentRef)")
	fs.StringVar(&f.section, "gateway-section", "", "its listener (parentRef sectionName)")
	fs.StringVar(&f.publisherURL, "publisher-url", "", "the publisher's --http-address, http://HOST:PORT: read its /debug/xds for the xDS client state (first form only)")
	fs.BoolVar(&f.check, "check", false, "first form: exit 5 unless what is published is what the inputs say: Published True at the map's generation, and the route's weights the computed effective weights (when the route exists)")
	fs.StringVarP(&f.output, "output", "o", "table", "table, json or yaml")
	f.kube.AddFlags(fs)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return exit(exitFailure, fmt.Errorf("%w; use --help", err))
	})
	completeValues(cmd, "output", report.Outputs...)
	return cmd
}

func runStatus(ctx context.Context, f statusFlags, positional []string, stdout io.Writer) error {
	switch {
	case f.workloadCluster == "" && len(positional) != 1:
		return errors.New("exactly one inference service is required, or --workload-cluster")
	case f.workloadCluster != "" && len(positional) != 0:
		return errors.New("--workload-cluster lists services; do not name one")
	case f.all && f.workloadCluster == "":
		return errors.New("-A needs --workload-cluster")
	case f.all && f.kube.namespace() != "":
		return errors.New("-A and -n exclude each other")
	case f.workloadCluster != "" && f.check:
		return errors.New("--check checks one service's status; it does not apply to --workload-cluster")
	case f.workloadCluster != "" && f.publisherURL != "":
		return errors.New("--publisher-url shows the xds clients of one service's status; it does not apply to --workload-cluster")
	case !slices.Contains(report.Outputs, f.output):
		return errors.New("output must be table, json or yaml")
	}
	if f.publisherURL != "" {
		if _, err := report.DebugXDSURL(f.publisherURL); err != nil {
			return err
		}
	}
	var gw types.NamespacedName
	if f.gateway != "" {
		ns, name, ok := strings.Cut(f.gateway, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--gateway %q: must be NAMESPACE/NAME", f.gateway)
		}
		gw = types.NamespacedName{Namespace: ns, Name: name}
	}
	kc, err := loadKube(f.kube)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	r, err := newReader(kc, report.Reader{GatewayRef: gw, GatewaySection: f.section, PublisherURL: f.publisherURL, HTTP: &http.Client{Timeout: debugXDSTimeout}})
	if err != nil {
		return err
	}
	var out any
	var checkErr error
	if f.workloadCluster != "" {
		ns := kc.namespace
		if f.all {
			ns = ""
		}
		if out, err = r.Cluster(ctx, ns, f.workloadCluster); err != nil {
			return err
		}
	} else {
		st, err := r.Status(ctx, kc.namespace, positional[0])
		if err != nil {
			return err
		}
		out = st
		if f.check {
			checkErr = report.Check(st)
		}
	}
	if err := report.Write(stdout, out, f.output); err != nil {
		return err
	}
	return checkErr
}

// newReader returns r with the clients of kc.
func newReader(kc kube, r report.Reader) (report.Reader, error) {
	var err error
	if r.Maps, err = omeclient.NewForConfig(kc.rest); err != nil {
		return r, fmt.Errorf("build trafficmap client: %w", err)
	}
	if r.Metadata, err = metadata.NewForConfig(kc.rest); err != nil {
		return r, fmt.Errorf("build metadata client: %w", err)
	}
	if r.Dynamic, err = dynamic.NewForConfig(kc.rest); err != nil {
		return r, fmt.Errorf("build dynamic client: %w", err)
	}
	if r.Gateway, err = gwclient.NewForConfig(kc.rest); err != nil {
		return r, fmt.Errorf("build gateway api client: %w", err)
	}
	return r, nil
}
