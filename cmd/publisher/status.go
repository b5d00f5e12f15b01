package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

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

const statusUsage = `Usage:
  publisher status SERVICE -n NAMESPACE [flags]
  publisher status --workload-cluster CLUSTER [-n NAMESPACE | -A] [flags]

The first form shows one TrafficMap: per cluster its TrafficMap weight, the effective weight
the publisher computes (the publisher's own computation) and the drains holding it; pending
drains; the drain annotation (a malformed one with the parser's error and the last valid
drains the publisher keeps); the Published condition, Current or Stale, with the publisher's
message verbatim; what the HTTPRoute sink holds and which gateway accepted it at which
generation; and, with --publisher-url, the xDS clients the publisher's /debug/xds lists:
node id, flavour, ACKed versions, NACKs, and whether each ACKed the versions served now.

The second form lists every service whose effective weight on CLUSTER is above 0, or cannot be
computed: when it lists nothing, the cluster receives no traffic through the publisher.

Flags:
  -n, --namespace NS         namespace (default: the context's, else default)
  -A, --all-namespaces       with --workload-cluster: every namespace
  --workload-cluster NAME    list the services sending traffic to this cluster
  --gateway NS/NAME          the Gateway whose verdict is shown (default: the route's parentRef)
  --gateway-section NAME     its listener (parentRef sectionName)
  --publisher-url URL        the publisher's --http-address, http://HOST:PORT: read its
                             /debug/xds for the xDS client state (first form only)
  --check                    first form: exit 5 unless what is published is what the inputs
                             say: Published True at the map's generation, and the route's
                             weights the computed effective weights (when the route exists)
  -o, --output FORMAT        table, json or yaml; default table
  --kubeconfig PATH, --context NAME, --cluster NAME   the Kubernetes API to read

Exit codes: 0 shown (with --check: and published), 1 error, 5 (--check) shown, and what is
published differs from what the inputs say; stderr says how.
`

type statusFlags struct {
	kube             kubeFlags
	namespace        string
	all              bool
	workloadCluster  string
	gateway, section string
	publisherURL     string
	output           string
	check            bool
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f statusFlags
	fs := flag.NewFlagSet("publisher status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.kube.register(fs)
	fs.StringVar(&f.namespace, "namespace", "", "")
	fs.StringVar(&f.namespace, "n", "", "")
	fs.BoolVar(&f.all, "all-namespaces", false, "")
	fs.BoolVar(&f.all, "A", false, "")
	fs.StringVar(&f.workloadCluster, "workload-cluster", "", "")
	fs.StringVar(&f.gateway, "gateway", "", "")
	fs.StringVar(&f.section, "gateway-section", "", "")
	fs.StringVar(&f.publisherURL, "publisher-url", "", "")
	fs.BoolVar(&f.check, "check", false, "")
	fs.StringVar(&f.output, "output", "table", "")
	fs.StringVar(&f.output, "o", "table", "")
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, statusUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v; use --help\n", err)
		return exitFailure
	}
	if err := runStatus(ctx, f, positional, stdout); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		if errors.Is(err, report.ErrNotPublished) {
			return exitNotPublished
		}
		return exitFailure
	}
	return exitOK
}

func runStatus(ctx context.Context, f statusFlags, positional []string, stdout io.Writer) error {
	switch {
	case f.workloadCluster == "" && len(positional) != 1:
		return errors.New("exactly one inference service is required, or --workload-cluster")
	case f.workloadCluster != "" && len(positional) != 0:
		return errors.New("--workload-cluster lists services; do not name one")
	case f.all && f.workloadCluster == "":
		return errors.New("-A needs --workload-cluster")
	case f.all && f.namespace != "":
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
	kc, err := loadKube(f.kube, f.namespace)
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
