package main

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Three replicas serve xDS over mutual TLS; the leader killed with SIGKILL is down (no
// address, no sample), another takes the Lease, and the killed one started again serves
// at a new address and counts a restart. The replicas ride out an api server restart and
// stall. Nothing is counted as a crash, Stop included.
func TestReplicasKillAndStart(t *testing.T) {
	cp := newControlPlane(t)
	ctx := t.Context()
	dir := t.TempDir()
	bin, err := buildPublisher(ctx, dir, false)
	require.NoError(t, err)
	p, err := newPKI(filepath.Join(dir, "pki"))
	require.NoError(t, err)
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chaos"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	rs, err := startReplicas(ctx, cp, replicaOptions{Bin: bin, WorkDir: dir, Namespaces: []string{"chaos"}, Gateway: "chaos/gw",
		LeaseNamespace: "chaos", PKI: p, ClientNamespaces: []string{"chaos-client=chaos"}})
	require.NoError(t, err)
	t.Cleanup(rs.Stop)
	require.Equal(t, []string{"a", "b", "c"}, rs.Names())
	for _, name := range rs.Names() {
		require.True(t, rs.Up(name), name)
		requireTLSServes(t, p, rs.XDSAddress(name))
	}
	var leader string
	require.Eventually(t, func() bool {
		leader, err = rs.Leader(ctx)
		return err == nil && leader != ""
	}, waitTimeout, tick, "a replica leads")
	s, err := rs.Sample(leader)
	require.NoError(t, err)
	assert.Positive(t, s.Goroutines)
	assert.Positive(t, s.HeapBytes)
	assert.Positive(t, s.RSSBytes)

	before := rs.XDSAddress(leader)
	require.NoError(t, rs.Kill(leader))
	assert.False(t, rs.Up(leader))
	assert.Empty(t, rs.XDSAddress(leader))
	_, err = rs.Sample(leader)
	require.Error(t, err, "no sample of a replica that is down")
	require.Error(t, rs.Kill(leader), "already down")
	require.Eventually(t, func() bool {
		next, err := rs.Leader(ctx)
		return err == nil && next != "" && next != leader
	}, waitTimeout, tick, "another replica takes the lease")

	require.NoError(t, rs.Start(ctx, leader))
	require.Error(t, rs.Start(ctx, leader), "already running")
	assert.True(t, rs.Up(leader))
	assert.NotEqual(t, before, rs.XDSAddress(leader), "new ports")
	requireTLSServes(t, p, rs.XDSAddress(leader))
	assert.Equal(t, 1, rs.Restarts(leader))
	assert.Empty(t, rs.Crashes())

	log, err := os.ReadFile(filepath.Join(dir, "replica-"+leader+".log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), "--- chaos: start 2 of replica "+leader, "the log is appended across restarts")

	// The api server faults do not end a replica: it rides out a restart and a stall.
	require.NoError(t, cp.RestartAPIServer(ctx))
	require.NoError(t, cp.StallAPIServer(ctx, 3*time.Second))
	require.Eventually(t, func() bool {
		l, err := rs.Leader(ctx)
		return err == nil && l != ""
	}, waitTimeout, tick, "a replica leads after the api server faults")
	for _, name := range rs.Names() {
		assert.True(t, rs.Up(name), name)
	}
	assert.Empty(t, rs.Crashes())

	rs.Stop()
	for _, name := range rs.Names() {
		assert.False(t, rs.Up(name), name)
	}
	assert.Empty(t, rs.Crashes(), "stopped replicas did not crash")
	require.Error(t, rs.Start(ctx, "a"), "no start after Stop")
}

// requireTLSServes checks that addr completes a mutual TLS handshake with a client
// certificate and refuses a client without one.
func requireTLSServes(t *testing.T, p *pki, addr string) {
	t.Helper()
	client, err := p.ClientTLS("chaos-client")
	require.NoError(t, err)
	conn, err := tls.Dial("tcp", addr, client)
	require.NoError(t, err, "a client with a certificate the CA signed")
	require.NoError(t, conn.Close())

	anon, err := tls.Dial("tcp", addr, p.AnonymousTLS())
	if err == nil { // TLS 1.3: the server's refusal arrives after the client's handshake
		defer anon.Close()
		require.NoError(t, anon.SetReadDeadline(time.Now().Add(waitTimeout)))
		_, err = anon.Read(make([]byte, 1))
	}
	require.ErrorContains(t, err, "certificate required", "a client without a certificate is refused")
}

// A process that exits before it serves (the API server down at its start, say) is
// started again, like a kubelet would: a start failure, not a crash. One that exits on its
// own after serving is a crash; one Kill ends is not.
func TestReplicaStartRetriesAndCrashes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-publisher")
	require.NoError(t, os.WriteFile(bin, []byte(`#!/bin/sh
n=$(cat "$0.count" 2>/dev/null || echo 0)
echo $((n+1)) > "$0.count"
if [ "$n" -lt 2 ]; then echo '{"level":"error","msg":"discover: connection refused"}' >&2; exit 1; fi
echo '{"level":"info","msg":"serving http","address":"127.0.0.1:1"}' >&2
echo '{"level":"info","msg":"serving xds","address":"127.0.0.1:2"}' >&2
exec sleep 600
`), 0o700))
	p, err := newPKI(filepath.Join(dir, "pki"))
	require.NoError(t, err)
	r := &replicaSet{o: replicaOptions{Bin: bin, WorkDir: dir, Gateway: "ns/gw", LeaseNamespace: "ns", PKI: p},
		kubeconfig: "unused", replicas: map[string]*replica{"a": {}}}
	t.Cleanup(r.Stop)

	require.NoError(t, r.Start(t.Context(), "a"))
	assert.Equal(t, 2, r.StartFailures("a"))
	assert.Equal(t, 0, r.Restarts("a"), "one Start")
	assert.Empty(t, r.Crashes())
	assert.Equal(t, "127.0.0.1:2", r.XDSAddress("a"))
	require.NoError(t, r.Kill("a"))
	assert.Empty(t, r.Crashes(), "killed on purpose")

	require.NoError(t, r.Start(t.Context(), "a"))
	assert.Equal(t, 1, r.Restarts("a"))
	r.mu.Lock()
	pid := r.replicas["a"].proc.cmd.Process.Pid
	r.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL)) // not through Kill: a crash
	require.Eventually(t, func() bool { return !r.Up("a") && len(r.Crashes()) == 1 }, waitTimeout, tick)
	assert.Contains(t, r.Crashes()[0], "replica a (pid ")
	assert.Contains(t, r.Crashes()[0], "exited on its own: signal: killed")
}

// A line is a crash when the runtime wrote it (a race report, a panic, a fatal error) or
// client-go's HandleCrash logged it, never because of text inside a JSON log line; the
// set serves once both addresses are logged.
func TestReplicaLogLines(t *testing.T) {
	r := &replicaSet{replicas: map[string]*replica{}}
	p := &replicaProc{cmd: &exec.Cmd{Process: &os.Process{Pid: 42}}, serving: make(chan struct{})}
	for _, line := range []string{
		`{"level":"warn","msg":"xds nack","message":"panic: WARNING: DATA RACE fatal error: from a client"}`,
		`{"level":"info","msg":"serving xds","address":"127.0.0.1:1234"}`,
		`goroutine 1 [running]:`,
	} {
		r.noteLine("a", p, []byte(line))
	}
	assert.Empty(t, r.Crashes())
	select {
	case <-p.serving:
		require.FailNow(t, "serving before the http address is known")
	default:
	}
	r.noteLine("a", p, []byte(`{"level":"info","msg":"serving http","address":"127.0.0.1:5678"}`))
	<-p.serving
	assert.Equal(t, "127.0.0.1:1234", p.xdsAddr)
	assert.Equal(t, "127.0.0.1:5678", p.httpAddr)

	for _, line := range []string{
		"WARNING: DATA RACE",
		"panic: runtime error: index out of range [3] with length 3",
		"fatal error: concurrent map writes",
		`{"level":"error","logger":"publisher.client-go","msg":"Observed a panic: boom"}`,
	} {
		r.noteLine("a", p, []byte(line))
	}
	assert.Len(t, r.Crashes(), 4, "%q", r.Crashes())
}

func TestReplicaOptionsValidate(t *testing.T) {
	p := &pki{}
	valid := replicaOptions{Bin: "publisher", WorkDir: "/tmp", Gateway: "ns/gw", LeaseNamespace: "ns", PKI: p,
		Namespaces: []string{"ns"}, ClientNamespaces: []string{"client=ns,other"}}
	for _, tc := range []struct {
		name  string
		edit  func(*replicaOptions)
		wants []string
	}{
		{name: "valid", edit: func(*replicaOptions) {}},
		{name: "every namespace", edit: func(o *replicaOptions) { o.Namespaces = nil }},
		{name: "missing", edit: func(o *replicaOptions) { *o = replicaOptions{} },
			wants: []string{"Bin is required", "WorkDir is required", "Gateway is required", "LeaseNamespace is required", "PKI is required"}},
		{name: "bad namespace", edit: func(o *replicaOptions) { o.Namespaces = []string{"a,b"} }, wants: []string{`namespace "a,b"`}},
		{name: "bad rule", edit: func(o *replicaOptions) { o.ClientNamespaces = []string{"client"} }, wants: []string{`rule "client"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.edit(&o)
			err := o.validate()
			if len(tc.wants) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "replica options: ")
			for _, w := range tc.wants {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// The PKI's client configurations complete a mutual TLS handshake with a server using its
// files; the anonymous one is refused.
func TestPKIMutualTLS(t *testing.T) {
	p, err := newPKI(t.TempDir())
	require.NoError(t, err)
	certFile, keyFile, _ := p.ServerFiles()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	identities := make(chan string, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				identities <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			_ = c.Close()
		}
	}()
	requireTLSServes(t, p, l.Addr().String())
	assert.Equal(t, "chaos-client", <-identities)
}
