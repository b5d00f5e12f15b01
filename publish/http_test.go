package publish

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// A failing watch is logged once per window, not on every retry, and readiness names it
// while it keeps failing.
func TestWatchHealth(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	h := newWatchHealth(zap.New(core))
	fail := h.handler("trafficmaps.ome.io")
	r := cache.NewReflector(&cache.ListWatch{}, &corev1.Pod{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	for range 3 {
		fail(t.Context(), r, errors.New("connection refused"))
	}
	assert.Equal(t, 1, logs.FilterMessage("list or watch failing; retrying").Len(), "throttled")
	now := time.Now()
	assert.Equal(t, []string{"trafficmaps.ome.io"}, h.failing(now))
	assert.Empty(t, h.failing(now.Add(watchFailureWindow)), "a healed watch drops out after the window")
}

// Only the leader records Events; a replica that stopped leading records none.
func TestLeaderRecorder(t *testing.T) {
	fake := record.NewFakeRecorder(4)
	leading := &atomic.Bool{}
	r := &leaderRecorder{EventRecorder: fake, leading: leading}
	obj := &corev1.Pod{}
	r.Event(obj, corev1.EventTypeWarning, "InvalidTaints", "follower")
	leading.Store(true)
	r.Eventf(obj, corev1.EventTypeNormal, "Published", "leader %d", 1)
	leading.Store(false)
	r.AnnotatedEventf(obj, nil, corev1.EventTypeNormal, "Published", "former leader")
	close(fake.Events)
	var got []string
	for e := range fake.Events {
		got = append(got, e)
	}
	assert.Equal(t, []string{"Normal Published leader 1"}, got)
}

// With a debug address the debug endpoints (and Go's profiles) are served there alone: the
// main address, which a Service exposes, serves /metrics, /healthz and /readyz and answers
// 404 for /debug/*. Without one they stay on the main address.
func TestDebugEndpointsOnTheirOwnListener(t *testing.T) {
	get := func(t *testing.T, addr net.Addr, path string) int {
		t.Helper()
		resp, err := http.Get("http://" + addr.String() + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	debug := map[string]http.Handler{"/debug/xds": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) })}
	serve := func(t *testing.T, debugAddress string) *httpServer {
		t.Helper()
		h, err := newHTTPServer("127.0.0.1:0", debugAddress, newWatchHealth(zaptest.NewLogger(t)), true)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); h.serve(ctx, zaptest.NewLogger(t), debug) }()
		t.Cleanup(func() { cancel(); <-done })
		return h
	}

	h := serve(t, "127.0.0.1:0")
	require.NotNil(t, h.debug)
	for _, path := range []string{"/debug/xds", "/debug/pprof/"} {
		assert.Equal(t, http.StatusNotFound, get(t, h.listener.Addr(), path), "%s is not on the main address", path)
		assert.Equal(t, http.StatusOK, get(t, h.debug.Addr(), path), "%s is on the debug address", path)
	}
	assert.Equal(t, http.StatusOK, get(t, h.listener.Addr(), "/healthz"))
	assert.Equal(t, http.StatusOK, get(t, h.listener.Addr(), "/metrics"))
	assert.Equal(t, http.StatusNotFound, get(t, h.debug.Addr(), "/metrics"), "the debug address serves only /debug/*")

	h = serve(t, "")
	assert.Nil(t, h.debug)
	assert.Equal(t, http.StatusOK, get(t, h.listener.Addr(), "/debug/xds"), "without a debug address: on the main address")
}

// A fenced replica (its report to the leader not renewed) is not ready, so a Service stops
// sending it new clients; it is ready again once unfenced.
func TestReadyzFollowsTheFence(t *testing.T) {
	h, err := newHTTPServer("127.0.0.1:0", "", newWatchHealth(zaptest.NewLogger(t)), false)
	require.NoError(t, err)
	var fenced atomic.Bool
	h.fenced = fenced.Load
	h.ready.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.serve(ctx, zaptest.NewLogger(t), nil) }()
	t.Cleanup(func() { cancel(); <-done })
	readyz := func() int {
		resp, err := http.Get("http://" + h.listener.Addr().String() + "/readyz")
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, readyz())
	fenced.Store(true)
	assert.Equal(t, http.StatusServiceUnavailable, readyz(), "fenced: not ready")
	fenced.Store(false)
	assert.Equal(t, http.StatusOK, readyz(), "unfenced: ready again")
}
