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
		"--leader-elect", "--leader-election-namespace", o.LeaseNamespace, "--leader-election-id", electionID,
		"--leader-election-identity", name, "--leader-election-lease-duration", "4s",
		"--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms",
		"--xds-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0",
		"--xds-reconnect-grace", "5s", "--teardown-timeout", "10s",
		"--host-template", "{{.Service}}.{{.Namespace}}.example.com",
		"--log-format", "json", "--pprof=false"}
	if len(o.Namespaces) > 0 {
		args = append(args, "--namespace", strings.Join(o.Namespaces, ","))
	}
	for _, rule := range o.ClientNamespaces {
		args = append(args, "--xds-client-namespaces", rule)
	}
	return append(args, o.Extra...)
}

// buildPublisher builds ./cmd/publisher of this repository (testenv.RepoRoot) into
// dir/publisher and returns its path; race builds it with -race.
func buildPublisher(ctx context.Context, dir string, race bool) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "publisher")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
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
// cause and every data race or panic a replica logs. One lock guards its state; it is
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
	proc   *replicaProc // the running process; nil while down
	starts int
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
}

// startReplicas starts replicas "a", "b" and "c" of the publisher against cp (see
// replicaOptions.args for the flags) and returns once each serves xDS. On an error every
// replica it started is stopped.
func startReplicas(ctx context.Context, cp *controlPlane, o replicaOptions) (*replicaSet, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r := &replicaSet{o: o, kubeconfig: cp.Kubeconfig(), kube: kube, replicas: map[string]*replica{}}
	for _, name := range replicaNames {
		r.replicas[name] = &replica{}
	}
	for _, name := range replicaNames {
		if err := r.Start(ctx, name); err != nil {
			r.Stop()
			return nil, err
		}
	}
	return r, nil
}

// Names returns the replicas' names, sorted.
func (r *replicaSet) Names() []string { return append([]string(nil), replicaNames...) }

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
// done; an error when it is running, unknown or the set is stopped.
func (r *replicaSet) Start(ctx context.Context, name string) error {
	r.mu.Lock()
	rep, ok := r.replicas[name]
	switch {
	case !ok:
		r.mu.Unlock()
		return fmt.Errorf("start: no replica %q", name)
	case r.stopped:
		r.mu.Unlock()
		return fmt.Errorf("start replica %s: the replica set is stopped", name)
	case rep.proc != nil:
		r.mu.Unlock()
		return fmt.Errorf("start replica %s: already running", name)
	}
	p, err := r.launch(name, rep.starts)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	rep.proc = p
	rep.starts++
	r.mu.Unlock()
	return r.waitServing(ctx, name, p)
}

// launch starts replica name's process, its log file and the goroutine that reads its
// log and reaps it. Called with r.mu held.
func (r *replicaSet) launch(name string, starts int) (*replicaProc, error) {
	logFile, err := os.OpenFile(filepath.Join(r.o.WorkDir, "replica-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of replica %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "--- chaos: start %d of replica %s at %s\n", starts+1, name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.o.Bin, r.o.args(r.kubeconfig, name)...)
	// Its own process group keeps a terminal's Ctrl-C to the harness away from it (Stop
	// ends it); the kernel kills it should the harness die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout = logFile
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start replica %s: %w", name, err)
	}
	p := &replicaProc{cmd: cmd, serving: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		r.readLog(name, p, stderr, logFile)
		err := cmd.Wait()
		logFile.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		if !p.expectExit {
			r.crashes = append(r.crashes, fmt.Sprintf("replica %s (pid %d) exited on its own: %v", name, cmd.Process.Pid, exitText(err)))
		}
		if rep := r.replicas[name]; rep.proc == p {
			rep.proc = nil
		}
		close(p.exited)
	}()
	return p, nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// waitServing waits until p logged its xDS and HTTP addresses; if it exits first, or ctx
// ends or serveTimeout passes, it is killed and an error returned.
func (r *replicaSet) waitServing(ctx context.Context, name string, p *replicaProc) error {
	t := time.NewTimer(serveTimeout)
	defer t.Stop()
	var err error
	select {
	case <-p.serving:
		return nil
	case <-p.exited:
		return fmt.Errorf("replica %s exited before it served xds (see replica-%s.log)", name, name)
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

// readLog copies the replica's stderr into its log file, line by line (any length), notes
// the addresses it logs ("serving xds", "serving http") and records data races and panics.
func (r *replicaSet) readLog(name string, p *replicaProc, stderr io.Reader, logFile io.Writer) {
	br := bufio.NewReaderSize(stderr, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			_, _ = logFile.Write(line)
			r.noteLine(name, p, bytes.TrimSpace(line))
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
	return r.upLocked(name) != nil
}

// upLocked returns replica name's process if it is up, else nil. Called with r.mu held.
func (r *replicaSet) upLocked(name string) *replicaProc {
	rep, ok := r.replicas[name]
	if !ok || rep.proc == nil || !rep.proc.ready || rep.proc.expectExit {
		return nil
	}
	return rep.proc
}

// XDSAddress returns replica name's xDS address (host:port), "" while it is down.
func (r *replicaSet) XDSAddress(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.upLocked(name); p != nil {
		return p.xdsAddr
	}
	return ""
}

// Leader returns the holder of the election Lease, "" when there is none (no Lease yet,
// or released).
func (r *replicaSet) Leader(ctx context.Context) (string, error) {
	l, err := r.kube.CoordinationV1().Leases(r.o.LeaseNamespace).Get(ctx, electionID, metav1.GetOptions{})
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

// Crashes lists the exits not caused by Kill, Stop or a failed start, and every data
// race, runtime panic or fatal error a replica logged, in the order seen.
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
	p := r.upLocked(name)
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

// Stop ends every running replica: SIGTERM, then SIGKILL for those still running after
// stopGrace. No replica starts afterwards.
func (r *replicaSet) Stop() {
	r.mu.Lock()
	r.stopped = true
	var procs []*replicaProc
	for _, rep := range r.replicas {
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
