// Command bench measures the publisher at fleet scale on a real kube-apiserver and etcd
// (envtest) against the physical floor of the same API server, and writes the figures to
// BENCHMARKS.md. `make bench` runs it; it is not part of `make test`.
//
// It creates N TrafficMaps with 8 clusters each and their InferenceServices, starts the
// stand-in gateway controller (integration/standin), C protocol-level ADS clients of the
// gRPC flavour (state of the world or delta, each ACKing what it gets) and the publisher
// binary as its own process with both sinks, and measures:
//
//   - P2 cold start: publisher start to every map Published True, against the floor of
//     the publisher's minimum API writes at its client rate limit;
//   - P3 memory: the publisher's resident memory and Go heap once every map is published;
//   - P1 drain latency: drain annotation write to (a) the HTTPRoute change seen by a watch,
//     (b) the last xDS client's ACK of the new weights, (c) Published True, over D drains,
//     each next to a bare write and watch of one ConfigMap (the floor);
//   - P5 xDS cost of one drain: bytes and resources sent per client, SotW and delta;
//   - P4 churn: R drains per second for a while; every final state is checked on the
//     route, the Published condition and every xDS client, and the publisher's CPU use.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/integration/testenv"
)

// options are the benchmark's flags.
type options struct {
	maps, clients, sotw int
	mix                 string
	envoy, envoySotW    int
	dials               int
	drains              int
	churnRate           int
	churnFor            time.Duration
	phases              string
	qps                 float64
	burst, workers      int
	logLevel            string
	out, workDir        string
	src                 string
	memoryLimit         string
	coldProfileAfter    time.Duration
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.maps, "n", 1000, "TrafficMaps (with 8 clusters each) and InferenceServices")
	flag.IntVar(&o.clients, "c", 100, "protocol-level ADS clients")
	flag.StringVar(&o.mix, "mix", "realistic", "client mix: realistic (-envoy Envoy-flavour clients, wildcard on listeners and clusters and the route configuration by name, -envoy-sotw of them state of the world, the rest delta; the other clients proxyless gRPC, state of the world, each dialing -dial random maps by name) or stress (every client gRPC flavour and wildcard on every type, -sotw of them state of the world, the rest delta)")
	flag.IntVar(&o.envoy, "envoy", 10, "realistic mix: Envoy-flavour clients among -c")
	flag.IntVar(&o.envoySotW, "envoy-sotw", 5, "realistic mix: how many of the Envoy clients use state of the world (the rest use delta)")
	flag.IntVar(&o.dials, "dial", 5, "realistic mix: maps each proxyless gRPC client dials")
	flag.IntVar(&o.sotw, "sotw", 10, "stress mix: how many of the clients use state of the world (the rest use delta)")
	flag.IntVar(&o.drains, "drains", 200, "P1: drains measured, spread across the maps")
	flag.IntVar(&o.churnRate, "churn-rate", 100, "P4: drain annotation writes per second")
	flag.DurationVar(&o.churnFor, "churn-for", 30*time.Second, "P4: how long the churn lasts")
	flag.StringVar(&o.phases, "phases", "cold,memory,restart,drain,churn", "phases to run, comma-separated: cold (P2), memory (P3), restart (P6), drain (P1, P5), churn (P4); cold always runs")
	flag.Float64Var(&o.qps, "kube-api-qps", 500, "publisher --kube-api-qps (0: the publisher's default)")
	flag.IntVar(&o.burst, "kube-api-burst", 1000, "publisher --kube-api-burst (with --kube-api-qps)")
	flag.IntVar(&o.workers, "workers", 8, "publisher --workers (0: the publisher's default)")
	flag.StringVar(&o.logLevel, "log-level", "info", "publisher --log-level")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "markdown file whose section for this N and mix (\"## Results: N = 1,000, realistic mix\") is replaced by this run's figures")
	flag.StringVar(&o.src, "src", "", "source tree the publisher binary is built from (default: this repository), e.g. an older checkout to compare")
	flag.StringVar(&o.memoryLimit, "memory-limit", "", "GOMEMLIMIT for the publisher process (e.g. 230MiB: what --memory-limit-ratio 0.9 sets under the chart's 320Mi container limit, 90% of it less 64 MiB; 403MiB under 512Mi); empty: none, as outside a container")
	flag.DurationVar(&o.coldProfileAfter, "cold-profile-after", 0, "P2: how long after the publisher starts the 30 s CPU profiles of the publisher, the API server and the bench process begin (0: as soon as the publisher serves http)")
	flag.StringVar(&o.workDir, "work-dir", "", "where the publisher log and profiles go (default: a new temporary directory)")
	flag.Parse()
	return o
}

// mixDescription says who the clients are, for the report.
func (o options) mixDescription() string {
	if o.mix == "stress" {
		return fmt.Sprintf("stress mix: gRPC flavour, wildcard on every type, %d delta, %d SotW", o.clients-o.sotw, o.sotw)
	}
	return fmt.Sprintf("realistic mix: %d Envoy (wildcard LDS/CDS, RDS by name; %d delta, %d SotW), %d proxyless gRPC (SotW, by name, %d maps each)",
		o.envoy, o.envoy-o.envoySotW, o.envoySotW, o.clients-o.envoy, o.dials)
}

// newClients builds the mix's clients; the gRPC clients' maps are drawn from a fixed seed.
func (o options) newClients() []*xdsClient {
	var out []*xdsClient
	rng := rand.New(rand.NewPCG(17, uint64(o.maps)))
	for i := range o.clients {
		id := fmt.Sprintf("bench-client-%03d", i)
		switch {
		case o.mix == "stress":
			out = append(out, newWildcardClient(id, i >= o.sotw))
		case i < o.envoy:
			out = append(out, newEnvoyClient(id, i >= o.envoySotW))
		default:
			out = append(out, newGRPCClient(id, rng.Perm(o.maps)[:o.dials]))
		}
	}
	return out
}

// phasesRun lists the phases this run measures, in the order it runs them.
func (o options) phasesRun() string {
	run := []string{"cold"}
	for _, p := range []string{"memory", "restart", "drain", "churn"} {
		if o.phase(p) {
			run = append(run, p)
		}
	}
	return strings.Join(run, ", ")
}

func (o options) phase(name string) bool {
	for _, p := range strings.Split(o.phases, ",") {
		if strings.TrimSpace(p) == name {
			return true
		}
	}
	return false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, parseFlags())
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench FAILED:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func run(ctx context.Context, o options) (err error) {
	ctrllog.SetLogger(logr.Discard())
	switch {
	case o.mix != "realistic" && o.mix != "stress":
		return fmt.Errorf("-mix %q: want realistic or stress", o.mix)
	case o.mix == "stress" && o.sotw > o.clients:
		return fmt.Errorf("-sotw %d: more than -c %d", o.sotw, o.clients)
	case o.mix == "realistic" && (o.envoy > o.clients || o.envoySotW > o.envoy || o.dials > o.maps):
		return fmt.Errorf("-envoy %d, -envoy-sotw %d, -dial %d: need envoy-sotw <= envoy <= c (%d) and dial <= n (%d)", o.envoy, o.envoySotW, o.dials, o.clients, o.maps)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if o.workDir == "" {
		if o.workDir, err = os.MkdirTemp("", "publisher-bench-"); err != nil {
			return err
		}
	}
	logf("work dir (publisher log, profiles): %s", o.workDir)
	src := root
	if o.src != "" {
		src = o.src
	}
	bin, err := buildPublisher(src, o.workDir)
	if err != nil {
		return err
	}

	assets, err := testenv.ControlPlaneAssets()
	if err != nil {
		return err
	}
	crds, err := testenv.CRDPaths()
	if err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
		// With watches open kube-apiserver's graceful shutdown outlasts any short wait;
		// envtest kills it after ControlPlaneStopTimeout (it passes that, not
		// APIServer.StopTimeout, to each stop).
		ControlPlaneStopTimeout: 3 * time.Second,
	}
	logf("starting kube-apiserver and etcd")
	restCfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer func() {
		if stopErr := env.Stop(); stopErr != nil {
			logf("stop control plane: %v", stopErr)
		}
	}()
	restCfg.QPS, restCfg.Burst = 2000, 4000 // the benchmark's own clients must not be the bottleneck
	user, err := env.AddUser(envtest.User{Name: "publisher", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add publisher user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(o.workDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}

	var c clients
	c.kube = kubernetes.NewForConfigOrDie(restCfg)
	c.gw = gwclient.NewForConfigOrDie(restCfg)
	c.dyn = dynamic.NewForConfigOrDie(restCfg)
	if c.tm, err = omeclient.NewForConfig(restCfg); err != nil {
		return err
	}
	if err := createNamespace(ctx, c); err != nil {
		return err
	}
	gwCtx, stopGateway := context.WithCancel(ctx)
	defer stopGateway()
	if _, err := standin.StartGateway(gwCtx, c.kube, c.gw, namespace, gatewayName, func(f string, a ...any) { logf("stand-in gateway: "+f, a...) }, standin.WithWorkers(8)); err != nil {
		return err
	}
	if err := createFloorProbe(ctx, c); err != nil {
		return err
	}
	start := time.Now()
	if err := createFleet(ctx, c, o.maps, 16); err != nil {
		return err
	}
	logf("created %d inferenceservices and trafficmaps in %s", o.maps, time.Since(start).Round(time.Millisecond))
	w, err := startWatchers(ctx, c)
	if err != nil {
		return err
	}

	b := &bench{o: o, c: c, cfg: restCfg, w: w, intents: make([]intent, o.maps)}
	b.report.meta = runMeta{N: o.maps, C: o.clients, SotW: o.sotw, Mix: o.mixDescription(), MixName: o.mix, Cores: runtime.NumCPU(), Date: time.Now().UTC().Format("2006-01-02"), Go: runtime.Version(),
		Commit: testenv.SourceCommit(src), Phases: o.phasesRun(),
		Flags: fmt.Sprintf("--kube-api-qps %g --kube-api-burst %d --workers %d --sinks httproute,xds --xds-min-clients %d", o.qps, o.burst, o.workers, o.clients)}
	if o.memoryLimit != "" {
		b.report.meta.Flags += "`, environment `GOMEMLIMIT=" + o.memoryLimit
	}
	defer b.stopClients()
	defer b.stopPublisher()
	if err := b.coldStart(ctx, bin, kubeconfig); err != nil {
		return err
	}
	if o.phase("memory") {
		if err := b.memory(ctx); err != nil {
			return err
		}
	}
	if o.phase("restart") {
		if err := b.restart(ctx, bin, kubeconfig); err != nil {
			return err
		}
	}
	if o.phase("drain") {
		if err := b.drainLatency(ctx); err != nil {
			return err
		}
	}
	if o.phase("churn") {
		if err := b.churn(ctx); err != nil {
			return err
		}
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(root, o.out)
	}
	if err := b.report.write(o.out); err != nil {
		return err
	}
	logf("wrote %s", o.out)
	fmt.Print(b.report.markdown())
	return nil
}
