package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	waitTimeout = 30 * time.Second
	tick        = 50 * time.Millisecond
)

// newControlPlane starts a control plane for one test and stops it at the end.
func newControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp, err := startControlPlane(t.TempDir(), t.Logf)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cp.Stop()) })
	return cp
}

// The API server restarts at the same address with the same certificates (the admin
// kubeconfig file still works, stored objects are still there, a new process serves) and
// a stall freezes the same process for its duration, then it answers again.
func TestControlPlaneRestartAndStall(t *testing.T) {
	cp := newControlPlane(t)
	ctx := t.Context()
	fromFile, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	require.NoError(t, err)
	fromFile.Timeout = 500 * time.Millisecond
	kube := kubernetes.NewForConfigOrDie(fromFile)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}}
	_, err = kubernetes.NewForConfigOrDie(cp.RESTConfig()).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	pid, err := cp.apiServerPID()
	require.NoError(t, err)

	require.NoError(t, cp.RestartAPIServer(ctx))
	_, err = kube.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	require.NoError(t, err, "the kubeconfig file works against the restarted api server, which kept its data")
	restarted, err := cp.apiServerPID()
	require.NoError(t, err)
	assert.NotEqual(t, pid, restarted, "a new kube-apiserver process")

	stalled := make(chan error, 1)
	go func() { stalled <- cp.StallAPIServer(ctx, 3*time.Second) }()
	require.Eventually(t, func() bool {
		_, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		return err != nil
	}, waitTimeout, tick, "requests time out while the api server is stopped")
	st, err := procStatus(restarted)
	require.NoError(t, err)
	assert.Equal(t, "T", st.state, "the process is stopped, not gone")
	select {
	case err := <-stalled:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		require.FailNow(t, "the stall did not end")
	}
	_, err = kube.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	require.NoError(t, err, "it answers again once resumed")
	same, err := cp.apiServerPID()
	require.NoError(t, err)
	assert.Equal(t, restarted, same, "the stall resumes the same process")

	// A stall cut short by its context resumes the process too.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cp.StallAPIServer(short, time.Hour), context.DeadlineExceeded)
	_, err = kube.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	require.NoError(t, err)
}

// After a compaction and restart, a watch from a revision before the compaction is 410
// Gone; a kubeconfig through a proxy works, and not while the proxy blackholes.
func TestControlPlaneCompactionAndProxy(t *testing.T) {
	cp := newControlPlane(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	cm, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	rev, err := cp.CompactAndRestartAPIServer(ctx)
	require.NoError(t, err)
	assert.Positive(t, rev)
	w, err := kube.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
	if err == nil { // the error may come as the watch's first event
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			require.Equal(t, watch.Error, ev.Type, "got %v", ev)
			err = apierrors.FromObject(ev.Object)
		case <-time.After(waitTimeout):
			require.FailNow(t, "no event")
		}
	}
	assert.True(t, apierrors.IsResourceExpired(err) || apierrors.IsGone(err), "want 410 Gone, got %v", err)

	p, err := startTCPProxy(cp.APIServerAddr)
	require.NoError(t, err)
	defer p.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, cp.KubeconfigVia(path, p.Addr()))
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	cfg.Timeout = time.Second
	via := kubernetes.NewForConfigOrDie(cfg)
	_, err = via.CoreV1().ConfigMaps("default").Get(ctx, "new", metav1.GetOptions{})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); p.Blackhole(ctx, 2*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	_, err = via.CoreV1().ConfigMaps("default").Get(ctx, "new", metav1.GetOptions{})
	assert.Error(t, err, "no answer while cut off")
	<-done
	_, err = via.CoreV1().ConfigMaps("default").Get(ctx, "new", metav1.GetOptions{})
	assert.NoError(t, err, "answers again once healed")
}
