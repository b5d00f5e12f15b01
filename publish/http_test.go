package publish

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
