package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/integration/gatewaykit"
	"github.com/trafficmap/publisher/integration/standin"
)

// options are the run's flags.
type options struct {
	duration       time.Duration
	seed           uint64
	maps, clusters int
	dial           int
	faultEvery     time.Duration
	opEvery        time.Duration
	taintEvery     time.Duration
	converge       time.Duration
	race           bool
	out, workDir   string
	verbose        bool
	roundRobin     bool
	// faults limits the schedule to these fault kinds (nil: every kind); -mutation sets it
	// per planted kind (scenes).
	faults []string
	// ops limits the workload to these operation kinds (nil: every kind); -mutation sets
	// it per planted kind (scenes).
	ops []string
	// plant is the lie planted in the publisher (lieplant.Kind; "" none); mutation runs
	// one run of plantDuration per kind instead of one run.
	plant         string
	mutation      bool
	plantDuration time.Duration
	// warmTimeout bounds the wait for every map's first publication (default 5 minutes).
	warmTimeout time.Duration
	gateways    string // hack/gateways.sh's folder: run the Traefik part (traefik.go); "": off
	traefikMaps int
}

func parseFlags() options {
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the workload and the faults run")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the workload and the fault schedule")
	flag.IntVar(&o.maps, "n", 200, "TrafficMaps in the chaos namespace")
	flag.IntVar(&o.clusters, "clusters", 3, "entries (workload clusters) per map")
	flag.IntVar(&o.dial, "dial", 20, "maps each proxyless gRPC probe subscribes to")
	flag.DurationVar(&o.faultEvery, "fault-every", 10*time.Second, "a fault is injected this often")
	flag.DurationVar(&o.opEvery, "op-every", 250*time.Millisecond, "a workload operation is made this often")
	flag.DurationVar(&o.taintEvery, "taint-every", 25*time.Second, "at least this long (in operations of -op-every) between two fleet-wide operations (taint, untaint: they change every map at once); 0: no limit (about one in eight operations)")
	flag.DurationVar(&o.converge, "converge-timeout", 5*time.Minute, "how long every map may take to be correct after the last fault")
	flag.BoolVar(&o.race, "race", false, "build the publisher with the race detector (a race report counts as a crash)")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "markdown file whose section \"## Chaos run\" is replaced by this run's table (empty: print only)")
	flag.StringVar(&o.workDir, "work-dir", "", "where logs, certificates and the binary go (default: a new temporary directory)")
	flag.BoolVar(&o.verbose, "v", false, "log every fault and operation")
	flag.BoolVar(&o.roundRobin, "round-robin", false, "inject the fault kinds in turn instead of at random")
	flag.StringVar(&o.plant, "plant", "", "plant this lie in the publisher (built with -tags lieplant): "+kindList())
	flag.BoolVar(&o.mutation, "mutation", false, "plant every lie in turn (with -plant: that one only, printed only), one short run each in its kind's scene, and report which the checker caught (section \""+plantHeading+"\" of -out)")
	flag.DurationVar(&o.plantDuration, "plant-duration", 45*time.Second, "how long the workload and the faults run for each lie of -mutation")
	flag.StringVar(&o.gateways, "gateways", "", "the folder bash hack/gateways.sh prints: also publish -traefik-maps maps to a real Traefik and judge the traffic through it (needs root); empty: off")
	flag.IntVar(&o.traefikMaps, "traefik-maps", 4, "with -gateways: TrafficMaps in the namespace "+nsTraefik+", published to Traefik")
	flag.Parse()
	return o
}

func main() {
	execWithResolvConfIfAsked()       // the -gateways replicas start as this binary, re-executed
	gatewaykit.ServeBackendsIfAsked() // the backends of -gateways are this binary, re-executed
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format(timeLayout)+" "+format+"\n", args...)
	}
	if o.mutation {
		if err := mutate(ctx, o, logf); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(1)
		}
		return
	}
	res, err := run(ctx, o, logf)
	if res != nil {
		fmt.Println(res.markdown(false))
		table := res.markdown(true)
		if o.out != "" && o.plant != "" {
			fmt.Fprintln(os.Stderr, "chaos: a run with a planted lie is printed only (-mutation writes its own section)")
		} else if o.out != "" {
			if werr := writeSection(o.out, table); werr != nil {
				fmt.Fprintln(os.Stderr, "chaos:", werr)
			}
		}
		if err == nil && !res.clean() {
			err = errors.New("the run found lies, losses, orphans or crashes (see the table)")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// Namespaces of the run.
const (
	nsChaos   = "chaos"
	nsRival   = "rival"
	nsGateway = "chaos-gw"
	nsLease   = "chaos-system"
	gwName    = "gw"
	hostTmpl  = "{{.Service}}.{{.Namespace}}.example.com"
)

// templateHost is the hostname hostTmpl gives service of namespace ns (the probes' expected
// Envoy domain of a map without the ome.io/global-host annotation).
func templateHost(service, ns string) string { return service + "." + ns + ".example.com" }

// clients are the harness's API clients.
type clients struct {
	kube kubernetes.Interface
	gw   gwclient.Interface
	ome  omeclient.Interface
	dyn  dynamic.Interface
}

// run sets the scene up, runs the workload and the fault schedule for o.duration, lets
// everything settle and checks the end state. The result is returned whenever the run got
// as far as the checker, also with an error.
func run(ctx context.Context, o options, logf func(string, ...any)) (*result, error) {
	ctrllog.SetLogger(logr.Discard())
	tags, env, err := plantBuild(o.plant)
	if err != nil {
		return nil, err
	}
	workDir := o.workDir
	if workDir == "" {
		d, err := os.MkdirTemp("", "chaos-")
		if err != nil {
			return nil, err
		}
		workDir = d
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, err
	}
	logf("work dir %s (replica logs, certificates, binary)", workDir)
	cp, err := startControlPlane(workDir, logf)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	defer func() { _ = cp.Stop() }()
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	var cl clients
	if cl.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if cl.gw, err = gwclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if cl.ome, err = omeclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if cl.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	for _, ns := range []string{nsGateway, nsLease} {
		_, err := cl.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	gateway, err := standin.StartGateway(runCtx, cl.kube, cl.gw, nsGateway, gwName, logf,
		standin.WithRouteNamespaces(nsChaos, nsRival), standin.WithWorkers(4))
	if err != nil {
		return nil, err
	}
	logf("building the publisher (race %v, planted lie %q)", o.race, o.plant)
	bin, err := buildPublisher(ctx, workDir, o.race, tags...)
	if err != nil {
		return nil, err
	}
	pk, err := newPKI(workDir)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))
	w := newWorkload(workloadConfig{Kube: cl.kube, Dynamic: cl.dyn, OME: cl.ome, Namespace: nsChaos, Rival: nsRival,
		Maps: o.maps, Clusters: o.clusters, RNG: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), Bin: bin, Kubeconfig: cp.Kubeconfig(),
		FleetEvery: stepsOf(o.taintEvery, o.opEvery), Kinds: o.ops})
	if err := w.Setup(ctx); err != nil {
		return nil, fmt.Errorf("workload setup: %w", err)
	}
	logf("starting 3 publisher replicas")
	replicas, err := startReplicas(ctx, cp, replicaOptions{Bin: bin, WorkDir: workDir, Namespaces: []string{nsChaos, nsRival},
		Gateway: nsGateway + "/" + gwName, LeaseNamespace: nsLease, PKI: pk,
		ClientNamespaces: []string{"chaos-client=" + nsChaos, "rival-client=" + nsRival, "edge-gateway=*", "lurker=" + nsRival}, Env: env})
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	defer replicas.Stop()
	fleet, err := startProbes(runCtx, o, rng, pk, replicas, w.Maps())
	if err != nil {
		return nil, err
	}
	defer fleet.closeLinks()
	f := &faults{rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), cp: cp, replicas: replicas, probes: fleet.checked,
		nacker: fleet.nacker, links: fleet.links, gateway: gateway, kube: cl.kube, gw: cl.gw, routing: standin.Routing{Client: cl.ome}, maps: w.Maps, logf: logf, stable: "c", roundRobin: o.roundRobin, only: o.faults}
	chk := newChecker(checkerConfig{OME: cl.ome, Kube: cl.kube, Gateway: cl.gw, Dynamic: cl.dyn,
		Namespaces: []string{nsChaos, nsRival}, GatewayNS: nsGateway, GatewayName: gwName, HostTemplate: hostTmpl,
		Probes: func() []*probe { return fleet.checked }, ProbeMaps: fleet.subscribes, Lag: f.lagAt, Logf: logf})
	if err := chk.Start(runCtx); err != nil {
		return nil, err
	}
	var ts *traefikScene
	if o.gateways != "" {
		ts, err = startTraefik(runCtx, traefikSetup{opts: o, cp: cp, cl: cl, bin: bin, pk: pk, workDir: workDir, rng: rng, lag: f.lagAt, logf: logf})
		if err != nil {
			return nil, fmt.Errorf("traefik: %w", err)
		}
		defer ts.Stop()
		f.dns = ts.dns
	}
	res := &result{opts: o, started: time.Now(), commit: repoCommit(), scene: ts}
	logf("waiting for every map to be published before the faults start")
	warm := cmp.Or(o.warmTimeout, 5*time.Minute)
	problems := waitCorrect(ctx, chk, w.Maps(), warm)
	if len(problems) == 0 && ts != nil {
		problems = waitCorrect(ctx, ts.chk, ts.work.Maps(), warm)
	}
	if len(problems) > 0 && o.plant == "" {
		return res.finish(chk, f, w, fleet, replicas), fmt.Errorf("before any fault: %d maps not correct after %s: %s",
			len(problems), warm, strings.Join(problems[:min(10, len(problems))], "\n  "))
	} else if len(problems) > 0 {
		logf("%d maps not correct after %s, as the planted lie %s may keep them; going on", len(problems), warm, o.plant)
	}
	res.before, _ = replicas.Sample(f.stable)
	res.warm = time.Since(res.started)
	logf("every map published after %s; running the workload and faults for %s", res.warm.Round(time.Second), o.duration)

	phase, endPhase := context.WithTimeout(runCtx, o.duration)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.Run(phase, o.faultEvery) }()
	go func() { defer wg.Done(); runWorkload(phase, w, o.opEvery, logf, o.verbose) }()
	if ts != nil {
		wg.Add(1)
		go func() { defer wg.Done(); runWorkload(phase, ts.work, ts.opEvery(o), logf, o.verbose) }()
	}
	wg.Wait()
	endPhase()
	res.lastFault = time.Now()
	for _, in := range f.Log() {
		if in.End.After(res.lastFault) {
			res.lastFault = in.End
		}
	}
	logf("faults over; settling the workload")
	if err := retrying(ctx, 2*time.Minute, func() error { return w.Settle(ctx) }); err != nil {
		return res.finish(chk, f, w, fleet, replicas), fmt.Errorf("settle: %w", err)
	}
	if ts != nil {
		if err := retrying(ctx, 2*time.Minute, func() error { return ts.work.Settle(ctx) }); err != nil {
			return res.finish(chk, f, w, fleet, replicas), fmt.Errorf("settle the traefik maps: %w", err)
		}
	}
	res.lost = waitCorrect(ctx, chk, w.Maps(), o.converge)
	if ts != nil {
		res.lost = append(res.lost, waitCorrect(ctx, ts.chk, ts.work.Maps(), o.converge)...)
	}
	if len(res.lost) > 0 {
		files, derr := replicas.DumpDebug(workDir)
		logf("maps not correct: the replicas' debug state is in %s (%v)", strings.Join(files, ", "), derr)
	}
	res.converged = time.Since(res.lastFault)
	logf("converged %s after the last fault", res.converged.Round(time.Second))
	res.orphans = waitNoOrphans(ctx, chk, time.Minute)
	res.after, _ = replicas.Sample(f.stable)
	checkers := []*checker{chk}
	if ts != nil {
		res.orphans = append(res.orphans, waitNoOrphans(ctx, ts.chk, time.Minute)...)
		checkers = append(checkers, ts.chk)
	}
	for _, c := range checkers {
		outage := f.outage
		if ts != nil && c == ts.chk {
			outage = f.traefikOutage // the DNS changes reach only the Traefik maps
		}
		c.Drain(ctx)
		c.settleRaces(time.Now(), outage)
		c.settleMonitor(time.Now(), outage)
	}
	return res.finish(chk, f, w, fleet, replicas), nil
}

// stepsOf is how many operations made every opEvery span d (rounded up; 0 for d <= 0).
func stepsOf(d, opEvery time.Duration) int {
	if d <= 0 || opEvery <= 0 {
		return 0
	}
	return int((d + opEvery - 1) / opEvery)
}

// runWorkload makes one operation every interval until ctx ends; an operation that fails
// (a fault is on) is only counted, and logged with verbose.
func runWorkload(ctx context.Context, w *workload, every time.Duration, logf func(string, ...any), verbose bool) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		op, err := w.Step(ctx)
		if verbose {
			logf("op %s: %v", op, err)
		}
	}, every)
}

// waitCorrect polls until every map passes the final check, for at most timeout; it
// returns the problems of the maps still not correct then, one per map (nil when none).
func waitCorrect(ctx context.Context, chk *checker, maps []mapRef, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var problems []string
		for _, m := range maps {
			if err := chk.finalState(ctx, m.Namespace, m.Name); err != nil {
				problems = append(problems, err.Error())
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return problems
		}
		sleep(ctx, 2*time.Second)
	}
}

// waitNoOrphans polls until no orphaned object is left, for at most timeout.
func waitNoOrphans(ctx context.Context, chk *checker, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		orphans, err := chk.orphans(ctx)
		if err == nil && len(orphans) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return []string{"cannot list: " + err.Error()}
			}
			return orphans
		}
		sleep(ctx, 2*time.Second)
	}
}

// retrying calls fn until it succeeds or timeout passes.
func retrying(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, time.Second)
	}
}

// fleetProbes are the run's xDS clients: checked are the checker's (every replica has a
// proxyless gRPC state-of-the-world and delta probe and an Envoy probe, plus the nacker);
// the adversaries are not checked, only counted.
type fleetProbes struct {
	checked     []*probe
	nacker      *probe
	adversaries []*probe
	anonymous   *probe // no client certificate: refused at the handshake
	isChecked   map[*probe]bool
	// links are the checker's probes' TCP proxies to their replicas (the partition fault).
	links map[*probe]*tcpProxy
}

// closeLinks closes the checker's probes' proxies.
func (fp *fleetProbes) closeLinks() {
	for _, l := range fp.links {
		_ = l.Close()
	}
}

// subscribes: p is a checker probe subscribed to the map key.
func (fp *fleetProbes) subscribes(p *probe, key string) bool {
	return fp.isChecked[p] && p.Subscribes(key)
}

func startProbes(ctx context.Context, o options, rng *rand.Rand, pk *pki, replicas *replicaSet, maps []mapRef) (*fleetProbes, error) {
	fp := &fleetProbes{isChecked: map[*probe]bool{}, links: map[*probe]*tcpProxy{}}
	tlsFor := func(id string) (*probeConfig, error) {
		t, err := pk.ClientTLS(id)
		if err != nil {
			return nil, err
		}
		return &probeConfig{TLS: t}, nil
	}
	addrFor := func(home string) func() string {
		return func() string {
			if a := replicas.XDSAddress(home); a != "" {
				return a
			}
			for _, n := range replicas.Names() {
				if a := replicas.XDSAddress(n); a != "" {
					return a
				}
			}
			return ""
		}
	}
	subset := func() []mapRef {
		idx := rng.Perm(len(maps))[:min(o.dial, len(maps))]
		slices.Sort(idx)
		out := make([]mapRef, 0, len(idx))
		for _, i := range idx {
			out = append(out, maps[i])
		}
		return out
	}
	// add starts a probe; a checked one dials its replica through a TCP proxy of its own.
	add := func(cfg *probeConfig, checked bool) (*probe, error) {
		if !checked {
			p := newProbe(*cfg)
			go p.Run(ctx)
			fp.adversaries = append(fp.adversaries, p)
			return p, nil
		}
		target := cfg.Addr
		link, err := startTCPProxy(target)
		if err != nil {
			return nil, fmt.Errorf("proxy of probe %s: %w", cfg.NodeID, err)
		}
		cfg.Addr = func() string {
			if target() == "" {
				return ""
			}
			return link.Addr()
		}
		p := newProbe(*cfg)
		go p.Run(ctx)
		fp.checked = append(fp.checked, p)
		fp.isChecked[p], fp.links[p] = true, link
		return p, nil
	}
	for i, r := range replicas.Names() {
		for _, delta := range []bool{false, true} {
			cfg, err := tlsFor("chaos-client")
			if err != nil {
				return nil, err
			}
			cfg.Maps = subset()
			cfg.NodeID, cfg.Delta, cfg.Addr = fmt.Sprintf("grpc-%s-%v", r, map[bool]string{false: "sotw", true: "delta"}[delta]), delta, addrFor(r)
			if _, err := add(cfg, true); err != nil {
				return nil, err
			}
		}
		cfg, err := tlsFor("edge-gateway")
		if err != nil {
			return nil, err
		}
		cfg.NodeID, cfg.Envoy, cfg.Delta, cfg.Addr = "envoy-"+r, true, i%2 == 1, addrFor(r)
		cfg.Maps = maps // what each map's virtual host and clusters must hold
		if _, err := add(cfg, true); err != nil {
			return nil, err
		}
	}
	// The nacker: a checked client with a 2 KB node id whose NACKs carry 6 KB of text.
	cfg, err := tlsFor("chaos-client")
	if err != nil {
		return nil, err
	}
	cfg.Maps = subset()
	cfg.NodeID, cfg.NACKText, cfg.Addr = "nacker-"+strings.Repeat("n", 2041), 6<<10, addrFor("a")
	if fp.nacker, err = add(cfg, true); err != nil {
		return nil, err
	}
	// Adversaries: a client of another namespace that subscribes to the chaos maps and never
	// ACKs, and one without a client certificate.
	cfg, err = tlsFor("lurker")
	if err != nil {
		return nil, err
	}
	cfg.Maps = subset()
	cfg.NodeID, cfg.NeverACK, cfg.Addr = "lurker", true, addrFor("b")
	_, _ = add(cfg, false)
	anon := &probeConfig{TLS: pk.AnonymousTLS(), NodeID: "anonymous", Addr: addrFor("c")}
	anon.Maps = subset()
	fp.anonymous, _ = add(anon, false)
	return fp, nil
}
