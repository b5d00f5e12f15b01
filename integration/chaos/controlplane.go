package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trafficmap/publisher/integration/testenv"
)

// apiServerStopTimeout bounds kube-apiserver's (and etcd's) graceful shutdown: with
// watches open the API server's outlasts any short wait, and envtest kills it after this.
const apiServerStopTimeout = 3 * time.Second

// controlPlane is an embedded kube-apiserver and etcd (envtest) with the run's CRDs and an
// admin kubeconfig, and the two faults on the API server: a restart and a stall. The faults
// and Stop take one lock, so they never overlap; the accessors are safe for concurrent use.
type controlPlane struct {
	env        *envtest.Environment
	cfg        *rest.Config
	kubeconfig string
	logf       func(string, ...any)
	logFile    *os.File

	mu sync.Mutex // serializes RestartAPIServer, StallAPIServer and Stop
}

// startControlPlane starts kube-apiserver and etcd (envtest, binaries from
// testenv.ControlPlaneAssets) with testenv.CRDPaths() and the stand-in WorkloadCluster CRD installed and writes an admin
// kubeconfig into workDir (file "kubeconfig"); both processes log to
// workDir/controlplane.log. The API server's certificates live in workDir/apiserver, so
// they and every credential stay valid across RestartAPIServer. It discards
// controller-runtime's log (envtest's chatter; its errors come back as errors).
func startControlPlane(workDir string, logf func(string, ...any)) (*controlPlane, error) {
	ctrllog.SetLogger(logr.Discard())
	assets, err := testenv.ControlPlaneAssets()
	if err != nil {
		return nil, err
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	// The stand-in WorkloadCluster CRD: the taint source the workload writes.
	crds, err := testenv.CRDPaths(filepath.Join(root, "integration", "testdata", "crds", "ome.io_workloadclusters.yaml"))
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(workDir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("create api server cert dir: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(workDir, "controlplane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open control plane log: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
		// envtest sets each component's StopTimeout from this (default 20 s).
		ControlPlaneStopTimeout: apiServerStopTimeout,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{CertDir: certDir, Out: logFile, Err: logFile},
			Etcd:      &envtest.Etcd{Out: logFile, Err: logFile},
		},
	}
	logf("starting kube-apiserver and etcd")
	cfg, err := env.Start()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	c := &controlPlane{env: env, cfg: cfg, logf: logf, logFile: logFile}
	if err := c.writeKubeconfig(workDir); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *controlPlane) writeKubeconfig(workDir string) error {
	user, err := c.env.AddUser(envtest.User{Name: "chaos-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	c.kubeconfig = filepath.Join(workDir, "kubeconfig")
	if err := os.WriteFile(c.kubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("write admin kubeconfig: %w", err)
	}
	return nil
}

// RESTConfig returns a copy of the admin client configuration.
func (c *controlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Kubeconfig returns the path of the admin kubeconfig file.
func (c *controlPlane) Kubeconfig() string { return c.kubeconfig }

// RestartAPIServer stops kube-apiserver (etcd keeps running; envtest kills it when its
// graceful shutdown outlasts a few seconds, as it does with watches open), waits until the
// process is gone, starts it again at the same address with the same certificates and
// returns once /readyz answers ok.
func (c *controlPlane) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	api := c.env.ControlPlane.GetAPIServer()
	pid, err := c.apiServerPID()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := api.Stop(); err != nil {
		// The timeout is expected: envtest then sends SIGKILL, which is the harsher outage.
		c.logf("kube-apiserver stop: %v", err)
	}
	if err := waitGone(ctx, pid); err != nil {
		return fmt.Errorf("wait for kube-apiserver (pid %d) to exit: %w", pid, err)
	}
	stopped := time.Now()
	if err := api.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver again: %w", err)
	}
	healthy := time.Now()
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.logf("kube-apiserver restarted in %s (stopped in %s, healthy after %s, ready after %s more)",
		time.Since(start).Round(time.Millisecond), stopped.Sub(start).Round(time.Millisecond),
		healthy.Sub(stopped).Round(time.Millisecond), time.Since(healthy).Round(time.Millisecond))
	return nil
}

// StallAPIServer freezes the kube-apiserver process (SIGSTOP) for d, or until ctx is done,
// then resumes it (SIGCONT, also when ctx ends early; then ctx's error is returned).
func (c *controlPlane) StallAPIServer(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pid, err := c.apiServerPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop kube-apiserver (pid %d): %w", pid, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var waitErr error
	select {
	case <-t.C:
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume kube-apiserver (pid %d): %w", pid, err)
	}
	return waitErr
}

// CompactAndRestartAPIServer compacts etcd to its current revision (through etcd's gRPC
// gateway), so that no watch can resume below it, then restarts kube-apiserver
// (RestartAPIServer): every watch comes back 410 Gone and relists. It returns the revision.
func (c *controlPlane) CompactAndRestartAPIServer(ctx context.Context) (int64, error) {
	rev, err := c.compactEtcd(ctx)
	if err != nil {
		return 0, err
	}
	return rev, c.RestartAPIServer(ctx)
}

// compactEtcd reads etcd's current revision (a range's response header) and compacts to it.
func (c *controlPlane) compactEtcd(ctx context.Context) (int64, error) {
	base := c.env.ControlPlane.Etcd.URL
	if base == nil {
		return 0, errors.New("etcd has no client url")
	}
	var head struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Key "/" (base64 "Lw=="), counted only: the header carries the store's revision.
	if err := etcdPost(ctx, base.String()+"/v3/kv/range", `{"key":"Lw==","count_only":true}`, &head); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(head.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", head.Header.Revision, err)
	}
	body := fmt.Sprintf(`{"revision":"%d","physical":true}`, rev)
	if err := etcdPost(ctx, base.String()+"/v3/kv/compaction", body, nil); err != nil {
		return rev, err
	}
	return rev, nil
}

// etcdPost posts body to url (etcd's gRPC gateway) and decodes the JSON answer into out
// (when not nil).
func etcdPost(ctx context.Context, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("etcd request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post %s: %s: %s", url, resp.Status, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer of %s: %w", url, err)
	}
	return nil
}

// APIServerAddr is kube-apiserver's host:port (the same across restarts).
func (c *controlPlane) APIServerAddr() string {
	s := c.env.ControlPlane.GetAPIServer().SecureServing
	return net.JoinHostPort(s.Address, s.Port)
}

// KubeconfigVia writes a copy of the admin kubeconfig to path whose server is
// https://addr (a proxy in front of the API server; the certificate names 127.0.0.1, so
// addr must be on it).
func (c *controlPlane) KubeconfigVia(path, addr string) error {
	cfg, err := clientcmd.LoadFromFile(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = "https://" + addr
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// Stop stops kube-apiserver and etcd and closes the control plane's log.
func (c *controlPlane) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.env.Stop()
	if err != nil && strings.Contains(err.Error(), "timeout waiting for process kube-apiserver to stop") {
		err = nil // killed after its graceful shutdown outlasted the stop timeout, as expected
	}
	return errors.Join(err, c.logFile.Close())
}

// waitReady polls /readyz until it answers ok or ctx is done.
func (c *controlPlane) waitReady(ctx context.Context) error {
	cfg := c.RESTConfig()
	cfg.Timeout = 2 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for readyz: %w", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		body, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(bytes.TrimSpace(body)) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for kube-apiserver readyz: %w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// apiServerPID finds the running kube-apiserver this control plane started: a child of
// this process whose command is kube-apiserver with this API server's --secure-port.
func (c *controlPlane) apiServerPID() (int, error) {
	port := c.env.ControlPlane.GetAPIServer().SecureServing.Port
	if port == "" {
		return 0, errors.New("kube-apiserver has no secure port")
	}
	want := "--secure-port=" + port
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !slices.Contains(args[1:], want) {
			continue
		}
		if st, err := procStatus(pid); err == nil && st.ppid == os.Getpid() && st.state != "Z" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no running kube-apiserver child with %s", want)
}

// waitGone waits until process pid has exited (no longer exists or is a zombie), so its
// port is free again.
func waitGone(ctx context.Context, pid int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := procStatus(pid); err != nil || st.state == "Z" {
			return nil // no status: the process is gone
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
