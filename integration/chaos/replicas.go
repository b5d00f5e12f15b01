package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trafficmap/publisher/integration/testenv"
)

// electionID is the replicas' election Lease (--leader-election-id).
const electionID = "chaos-publisher"

// replicaNames are the replicas startReplicas starts, each its own process.
var replicaNames = []string{"a", "b", "c"}

const (
	// serveTimeout bounds how long a started replica may take to serve xDS (a -race
	// binary syncing its caches on a busy machine is slow).
	serveTimeout = 90 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before it kills.
	stopGrace = 10 * time.Second
)

// The replicas' election and xDS grace flags, which bound how long a leader change keeps
// the publisher from writing (faults.outage).
const (
	leaseDuration     = 4 * time.Second  // --leader-election-lease-duration
	renewDeadline     = 2 * time.Second  // --leader-election-renew-deadline
	xdsPeerGrace      = 30 * time.Second // --xds-peer-grace (the CLI's default)
	xdsReconnectGrace = 5 * time.Second  // --xds-reconnect-grace
)

// replicaOptions configure every replica of a replicaSet.
type replicaOptions struct {
	Bin              string   // the publisher binary (buildPublisher)
	WorkDir          string   // logs: replica-<name>.log (appended across restarts)
	Namespaces       []string // --namespace (comma-joined); none: every namespace
	Gateway          string   // --gateway, e.g. "chaos-gw/gw"
	LeaseNamespace   string   // --leader-election-namespace
	PKI              *pki     // the xDS port's mutual TLS
	ClientNamespaces []string // --xds-client-namespaces rules, e.g. "chaos-client=chaos"
	Extra            []string // more flags, after the others
	Env              []string // more environment variables (KEY=VALUE), e.g. a planted lie's
	// ResolvConf, when set, is the /etc/resolv.conf each replica sees: it runs in a mount
	// namespace of its own with the file mounted there (mountns.go).
	ResolvConf string
	// Names are the replicas (default replicaNames) and ElectionID their election Lease
	// (default electionID): a second set next to the first needs its own of both.
	Names      []string
	ElectionID string
}

// names is Names or replicaNames.
func (o replicaOptions) names() []string {
	if len(o.Names) > 0 {
		return o.Names
	}
	return replicaNames
}

// electionID is ElectionID or the default electionID.
func (o replicaOptions) electionID() string {
	if o.ElectionID != "" {
		return o.ElectionID
	}
	return electionID
}

// validate reports every missing or malformed option at once.
func (o replicaOptions) validate() error {
	var errs []error
	for _, req := range []struct{ name, value string }{
		{"Bin", o.Bin}, {"WorkDir", o.WorkDir}, {"Gateway", o.Gateway}, {"LeaseNamespace", o.LeaseNamespace},
	} {
		if req.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", req.name))
		}
	}
	if o.PKI == nil {
		errs = append(errs, errors.New("PKI is required (the xds port runs mutual tls)"))
	}
	for _, ns := range o.Namespaces {
		if ns == "" || strings.Contains(ns, ",") {
			errs = append(errs, fmt.Errorf("namespace %q: want one non-empty name", ns))
		}
	}
	for _, rule := range o.ClientNamespaces {
		if id, nss, ok := strings.Cut(rule, "="); !ok || id == "" || nss == "" {
			errs = append(errs, fmt.Errorf("client namespaces rule %q: want IDENTITY=NS[,NS...]", rule))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("replica options: %w", err)
	}
	return nil
}

// args is the command line of replica name.
func (o replicaOptions) args(kubeconfig, name string) []string {
	cert, key, ca := o.PKI.ServerFiles()
	args := []string{"run", "--kubeconfig", kubeconfig, "--gateway", o.Gateway,
		"--sinks", "httproute,xds", "--require-xds-ack",
		"--xds-tls-cert", cert, "--xds-tls-key", key, "--xds-client-ca", ca,
		"--leader-elect", "--leader-election-namespace", o.LeaseNamespace, "--leader-election-id", o.electionID(),
		"--leader-election-identity", name, "--leader-election-lease-duration", leaseDuration.String(),
		"--leader-election-renew-deadline", renewDeadline.String(), "--leader-election-retry-period", "500ms",
		"--xds-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0",
		"--xds-reconnect-grace", xdsReconnectGrace.String(), "--xds-peer-grace", xdsPeerGrace.String(), "--teardown-timeout", "10s",
		"--host-template", "{{.Service}}.{{.Namespace}}.example.com",
		"--log-format", "json", "--pprof=true"} // on the loopback HTTP address: DumpDebug takes the goroutines
	if len(o.Namespaces) > 0 {
		args = append(args, "--namespace", strings.Join(o.Namespaces, ","))
	}
	for _, rule := range o.ClientNamespaces {
		args = append(args, "--xds-client-namespaces", rule)
	}
	return append(args, o.Extra...)
}

// buildPublisher builds ./cmd/publisher of this repository (testenv.RepoRoot) into
// dir/publisher and returns its path; race builds it with -race, and tags are its build
// tags (lieplant for a planted lie).
func buildPublisher(ctx context.Context, dir string, race bool, tags ...string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "publisher")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/publisher")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s ./cmd/publisher: %w: %s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// replicaSet is the publisher replicas "a", "b" and "c", each `publisher run` as its own
// process with leader election and mutual TLS on xDS. It records every exit it did not
// cause and every data race or panic a replica logs (Crashes), and restarts a process that
// exits before it serves (StartFailures). One lock guards its state; it is
// safe for concurrent use.
type replicaSet struct {
	o          replicaOptions
	kubeconfig string
	kube       kubernetes.Interface

	mu       sync.Mutex
	replicas map[string]*replica
	crashes  []string
	stopped  bool // Stop was called: no more starts
}

// replica is one replica across its restarts; guarded by replicaSet.mu.
type replica struct {
	proc          *replicaProc // the running process; nil while down
	kubeconfig    string       // its own kubeconfig (through apiLink); "" for the set's
	apiLink       *tcpProxy    // its way to the API server (PartitionFromAPIServer); may be nil
	starts        int          // Start calls (and the first start)
	startFailures int          // exits before serving xDS
}

// replicaProc is one run of a replica's process. Its fields are guarded by replicaSet.mu;
// serving and exited are closed once.
type replicaProc struct {
	cmd            *exec.Cmd
	xdsAddr        string
	httpAddr       string
	serving        chan struct{} // closed once both addresses are logged
	exited         chan struct{} // closed once the process is reaped
	expectExit     bool          // Kill, Stop or a failed start asked it to exit
	xdsSeen, ready bool
	exitErr        error // how it exited (cmd.Wait), set before exited is closed
}

// startReplicas starts replicas "a", "b" and "c" of the publisher against cp (see
// replicaOptions.args for the flags), each reaching the API server through a TCP proxy of
// its own (its kubeconfig: WorkDir/kubeconfig-<name>), and returns once each serves xDS. On
// an error every replica it started is stopped.
func startReplicas(ctx context.Context, cp *controlPlane, o replicaOptions) (*replicaSet, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r := &replicaSet{o: o, kubeconfig: cp.Kubeconfig(), kube: kube, replicas: map[string]*replica{}}
	apiAddr := cp.APIServerAddr()
	for _, name := range o.names() {
		rep := &replica{kubeconfig: filepath.Join(o.WorkDir, "kubeconfig-"+name)}
		r.replicas[name] = rep
		if rep.apiLink, err = startTCPProxy(func() string { return apiAddr }); err != nil {
			r.Stop()
			return nil, fmt.Errorf("api server proxy of replica %s: %w", name, err)
		}
		if err := cp.KubeconfigVia(rep.kubeconfig, rep.apiLink.Addr()); err != nil {
			r.Stop()
			return nil, fmt.Errorf("kubeconfig of replica %s: %w", name, err)
		}
	}
	for _, name := range o.names() {
		if err := r.Start(ctx, name); err != nil {
			r.Stop()
			return nil, err
		}
	}
	return r, nil
}

// Names returns the replicas' names, sorted.
func (r *replicaSet) Names() []string { return slices.Clone(r.o.names()) }

// Kill sends SIGKILL to replica name and waits until it has exited; an error when it is
// not running (or already being stopped).
func (r *replicaSet) Kill(name string) error {
	r.mu.Lock()
	rep, ok := r.replicas[name]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("kill: no replica %q", name)
	}
	p := rep.proc
	if p == nil || p.expectExit {
		r.mu.Unlock()
		return fmt.Errorf("kill replica %s: not running", name)
	}
	p.expectExit = true
	r.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill replica %s: %w", name, err)
	}
	<-p.exited
	return nil
}

// Start starts replica name again (new ports) and waits until it serves xDS or ctx is
// done; an error when it is running, unknown or the set is stopped. Like a kubelet, it
// starts the process again (after startBackoff) when it exits before serving, say because
// the API server is down at its start; such an exit is a start failure (StartFailures),
// not a crash, and only serveTimeout after the call does Start give up.
func (r *replicaSet) Start(ctx context.Context, name string) error {
	deadline := time.Now().Add(serveTimeout)
	for attempt := 0; ; attempt++ {
		p, err := r.launch(name, attempt == 0)
		if err != nil {
			return err
		}
		err = r.waitServing(ctx, name, p, deadline)
		if !errors.Is(err, errExitedEarly) || time.Now().Add(startBackoff).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start replica %s: %w (after: %w)", name, ctx.Err(), err)
		case <-time.After(startBackoff):
		}
	}
}

// startBackoff is the pause before a replica that exited before serving is started again.
const startBackoff = time.Second

// errExitedEarly is a replica's exit before it served xDS.
var errExitedEarly = errors.New("exited before it served xds")

// launch starts replica name's process, its log file and the goroutine that reads its
// log and reaps it; first counts a start (not a retry of one).
func (r *replicaSet) launch(name string, first bool) (*replicaProc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.replicas[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("start: no replica %q", name)
	case r.stopped:
		return nil, fmt.Errorf("start replica %s: the replica set is stopped", name)
	case rep.proc != nil:
		return nil, fmt.Errorf("start replica %s: already running", name)
	}
	logFile, err := os.OpenFile(filepath.Join(r.o.WorkDir, "replica-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of replica %s: %w", name, err)
	}
	if first {
		rep.starts++
	}
	fmt.Fprintf(logFile, "--- chaos: start %d of replica %s (start failures so far: %d) at %s\n", rep.starts, name, rep.startFailures, time.Now().UTC().Format(time.RFC3339Nano))
	kubeconfig := r.kubeconfig
	if rep.kubeconfig != "" {
		kubeconfig = rep.kubeconfig
	}
	cmd := exec.Command(r.o.Bin, r.o.args(kubeconfig, name)...)
	if len(r.o.Env) > 0 {
		cmd.Env = append(os.Environ(), r.o.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if r.o.ResolvConf != "" {
		if cmd, err = resolvConfCommand(r.o.Bin, r.o.ResolvConf, r.o.args(kubeconfig, name), r.o.Env); err != nil {
			logFile.Close()
			return nil, fmt.Errorf("start replica %s: %w", name, err)
		}
	}
	// Its own process group keeps a terminal's Ctrl-C to the harness away from it (Stop
	// ends it); the kernel kills it should the harness die.
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	cmd.Stdout = logFile
	stderr, err := cmd.StderrPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start replica %s: %w", name, err)
	}
	p := &replicaProc{cmd: cmd, serving: make(chan struct{}), exited: make(chan struct{})}
	rep.proc = p
	go func() {
		readLines(stderr, logFile, func(line []byte) { r.noteLine(name, p, line) })
		r.reaped(name, p, cmd.Wait())
		logFile.Close()
	}()
	return p, nil
}

// reaped records the exit of p: a crash when nobody asked for it and it had served, a
// start failure when it had not.
func (r *replicaSet) reaped(name string, p *replicaProc, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.replicas[name]
	switch {
	case p.expectExit:
	case p.ready:
		r.crashes = append(r.crashes, fmt.Sprintf("replica %s (pid %d) exited on its own: %v", name, p.cmd.Process.Pid, exitText(err)))
	default:
		rep.startFailures++
	}
	if rep.proc == p {
		rep.proc = nil
	}
	p.exitErr = err
	close(p.exited)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// waitServing waits until p logged its xDS and HTTP addresses. When it exits first the
// error wraps errExitedEarly; when ctx ends or deadline passes first it is killed.
func (r *replicaSet) waitServing(ctx context.Context, name string, p *replicaProc, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var err error
	select {
	case <-p.serving:
		return nil
	case <-p.exited:
		r.mu.Lock()
		killed := p.expectExit
		r.mu.Unlock()
		if killed { // Kill or Stop while it started: no retry
			return fmt.Errorf("replica %s stopped before it served xds", name)
		}
		return fmt.Errorf("replica %s %w (%s; see replica-%s.log)", name, errExitedEarly, exitText(p.exitErr), name)
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("not serving after %s", serveTimeout)
	}
	r.mu.Lock()
	p.expectExit = true
	r.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("wait for replica %s to serve xds (see replica-%s.log): %w", name, name, err)
}

// readLines copies r into w line by line (lines of any length) and hands each line,
// trimmed, to note.
func readLines(r io.Reader, w io.Writer, note func([]byte)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			_, _ = w.Write(line)
			note(bytes.TrimSpace(line))
		}
		if err != nil {
			return
		}
	}
}

// noteLine looks at one log line. The runtime's race reports and panics are plain text;
// the publisher's own lines are JSON (whose text, a client's NACK message say, is not
// searched, so an adversarial client cannot fake a crash).
func (r *replicaSet) noteLine(name string, p *replicaProc, line []byte) {
	if len(line) == 0 {
		return
	}
	if line[0] != '{' {
		if bytes.Contains(line, []byte("DATA RACE")) || bytes.HasPrefix(line, []byte("panic:")) || bytes.HasPrefix(line, []byte("fatal error:")) {
			r.mu.Lock()
			r.crashes = append(r.crashes, fmt.Sprintf("replica %s (pid %d) logged %q (see replica-%s.log)", name, p.cmd.Process.Pid, truncate(string(line), 200), name))
			r.mu.Unlock()
		}
		return
	}
	if !bytes.Contains(line, []byte(`"serving `)) && !bytes.Contains(line, []byte("panic")) {
		return
	}
	var entry struct {
		Msg     string `json:"msg"`
		Address string `json:"address"`
	}
	if json.Unmarshal(line, &entry) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case entry.Msg == "serving xds" && !p.xdsSeen:
		p.xdsAddr, p.xdsSeen = entry.Address, true
	case entry.Msg == "serving http" && p.httpAddr == "":
		p.httpAddr = entry.Address
	case strings.Contains(entry.Msg, "Observed a panic"): // client-go's HandleCrash, through klog
		r.crashes = append(r.crashes, fmt.Sprintf("replica %s (pid %d) logged %q", name, p.cmd.Process.Pid, truncate(entry.Msg, 200)))
	}
	if p.xdsSeen && p.httpAddr != "" && !p.ready {
		p.ready = true
		close(p.serving)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Up reports whether replica name runs and serves xDS (and is not being killed).
func (r *replicaSet) Up(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return upProc(r.replicas[name]) != nil
}

// upProc returns the process of rep (nil for an unknown replica) if it serves and is not
// being stopped, else nil. Called with replicaSet.mu held.
func upProc(rep *replica) *replicaProc {
	if rep == nil || rep.proc == nil || !rep.proc.ready || rep.proc.expectExit {
		return nil
	}
	return rep.proc
}

// XDSAddress returns replica name's xDS address (host:port), "" while it is down.
func (r *replicaSet) XDSAddress(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := upProc(r.replicas[name]); p != nil {
		return p.xdsAddr
	}
	return ""
}

// Freeze stops replica name's process (SIGSTOP) for d, then continues it (SIGCONT), as a
// long GC pause or a frozen VM would: a leader frozen past its lease is deposed while it
// sleeps and resumes believing it leads until its next renewal fails.
func (r *replicaSet) Freeze(ctx context.Context, name string, d time.Duration) error {
	r.mu.Lock()
	p := upProc(r.replicas[name])
	r.mu.Unlock()
	if p == nil {
		return fmt.Errorf("freeze replica %s: not running", name)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("freeze replica %s: %w", name, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("continue replica %s: %w", name, err)
	}
	return nil
}

// PartitionFromAPIServer cuts replica name off the API server for d (or until ctx ends):
// its proxy stops forwarding both ways, its connections kept open, then forwards again.
func (r *replicaSet) PartitionFromAPIServer(ctx context.Context, name string, d time.Duration) error {
	r.mu.Lock()
	rep, ok := r.replicas[name]
	r.mu.Unlock()
	if !ok || rep.apiLink == nil {
		return fmt.Errorf("partition replica %s: no proxy to the api server", name)
	}
	rep.apiLink.Blackhole(ctx, d)
	return nil
}

// Leader returns the holder of the election Lease as stored, "" when there is none (no
// Lease yet, or released). A killed leader stays the holder until another replica takes
// the Lease, up to the lease duration (4 s) later.
func (r *replicaSet) Leader(ctx context.Context) (string, error) {
	l, err := r.kube.CoordinationV1().Leases(r.o.LeaseNamespace).Get(ctx, r.o.electionID(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get election lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// Crashes lists the exits of replicas that served xDS not caused by Kill or Stop, and
// every data race, runtime panic or fatal error a replica logged, in the order seen.
// Exits before serving are StartFailures.
func (r *replicaSet) Crashes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.crashes...)
}

// sample is one reading of a replica's size: goroutines and Go heap in use (its
// /metrics) and resident memory (/proc).
type sample struct{ Goroutines, HeapBytes, RSSBytes int64 }

// Sample reads replica name's go_goroutines and go_memstats_heap_inuse_bytes from its
// /metrics and VmRSS from /proc/<pid>/status; an error while it is down.
func (r *replicaSet) Sample(name string) (sample, error) {
	r.mu.Lock()
	p := upProc(r.replicas[name])
	r.mu.Unlock()
	if p == nil {
		return sample{}, fmt.Errorf("sample replica %s: not up", name)
	}
	m, err := scrape(p.httpAddr, "go_goroutines", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return sample{}, fmt.Errorf("sample replica %s: %w", name, err)
	}
	st, err := procStatus(p.cmd.Process.Pid)
	if err != nil {
		return sample{}, fmt.Errorf("sample replica %s: %w", name, err)
	}
	return sample{Goroutines: m["go_goroutines"], HeapBytes: m["go_memstats_heap_inuse_bytes"], RSSBytes: st.rssBytes}, nil
}

// Restarts returns how often replica name was started again after its first start.
func (r *replicaSet) Restarts(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.replicas[name]; ok && rep.starts > 1 {
		return rep.starts - 1
	}
	return 0
}

// StartFailures returns how often replica name's process exited before it served xDS
// (and was started again by Start).
func (r *replicaSet) StartFailures(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.replicas[name]; ok {
		return rep.startFailures
	}
	return 0
}

// Stop ends every running replica: SIGTERM, then SIGKILL for those still running after
// stopGrace. No replica starts afterwards.
func (r *replicaSet) Stop() {
	r.mu.Lock()
	r.stopped = true
	var procs []*replicaProc
	var links []*tcpProxy
	for _, rep := range r.replicas {
		if rep.apiLink != nil {
			links = append(links, rep.apiLink)
		}
		if rep.proc != nil {
			rep.proc.expectExit = true
			procs = append(procs, rep.proc)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(stopGrace)
			defer t.Stop()
			select {
			case <-p.exited:
			case <-t.C:
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}()
	}
	wg.Wait()
	for _, l := range links {
		_ = l.Close()
	}
}

// scrape fetches http://addr/metrics and returns the named unlabelled samples.
func scrape(addr string, names ...string) (map[string]int64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("get metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get metrics: %s", resp.Status)
	}
	out := map[string]int64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[name] = int64(v)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("no metric %s", n)
		}
	}
	return out, nil
}

// procInfo is what /proc/<pid>/status says about a process.
type procInfo struct {
	state    string // R, S, D, T, Z, ...
	ppid     int
	rssBytes int64
}

// procStatus reads /proc/<pid>/status; an error when the process does not exist.
func procStatus(pid int) (procInfo, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procInfo{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	var st procInfo
	for _, line := range strings.Split(string(raw), "\n") {
		key, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch key {
		case "State":
			st.state, _, _ = strings.Cut(value, " ")
		case "PPid":
			st.ppid, _ = strconv.Atoi(value)
		case "VmRSS":
			kb, _ := strconv.ParseInt(strings.TrimSuffix(value, " kB"), 10, 64)
			st.rssBytes = kb * 1024
		}
	}
	return st, nil
}

// DumpDebug writes each running replica's /debug/xds and /debug/replicas (what its xDS
// clients hold and what it sees of the others) to dir/debug-<replica>-<xds|replicas>.json,
// and its goroutines (where a worker waits) to dir/debug-<replica>-goroutines.txt,
// for a run whose maps did not all converge; it returns the files written and the first
// error.
func (r *replicaSet) DumpDebug(dir string) ([]string, error) {
	var files []string
	var first error
	client := &http.Client{Timeout: 10 * time.Second}
	for _, name := range r.o.names() {
		r.mu.Lock()
		p := upProc(r.replicas[name])
		r.mu.Unlock()
		if p == nil {
			continue
		}
		for _, what := range []string{"xds", "replicas", "pprof/goroutine?debug=2"} {
			err := func() error {
				resp, err := client.Get("http://" + p.httpAddr + "/debug/" + what)
				if err != nil {
					return fmt.Errorf("get /debug/%s of replica %s: %w", what, name, err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					return fmt.Errorf("read /debug/%s of replica %s: %w", what, name, err)
				}
				file := filepath.Join(dir, "debug-"+name+"-"+what+".json")
				if strings.HasPrefix(what, "pprof/goroutine") {
					file = filepath.Join(dir, "debug-"+name+"-goroutines.txt")
				}
				if err := os.WriteFile(file, body, 0o644); err != nil {
					return fmt.Errorf("write %s: %w", file, err)
				}
				files = append(files, file)
				return nil
			}()
			if err != nil && first == nil {
				first = err
			}
		}
	}
	return files, first
}
