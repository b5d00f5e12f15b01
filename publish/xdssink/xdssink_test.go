package xdssink

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

// A rebuild after a quiet period is not delayed; back-to-back rebuilds are paced so they
// take at most half of the time; a quiet period empties the bucket again.
func TestPacer(t *testing.T) {
	var p pacer
	now := time.Unix(0, 0)
	rebuild := func(took time.Duration) time.Duration {
		start := now
		now = now.Add(took)
		pause := p.pause(start, now)
		now = now.Add(pause)
		return pause
	}

	assert.Zero(t, rebuild(100*time.Millisecond), "a single rebuild")
	now = now.Add(time.Second)
	for range 5 { // one rebuild every 300 ms, a third of the time: never paced
		assert.Zero(t, rebuild(100*time.Millisecond))
		now = now.Add(200 * time.Millisecond)
	}

	begin, busy := now, time.Duration(0)
	var paused bool
	for range 100 { // a storm: the next rebuild is always due at once
		pause := rebuild(100 * time.Millisecond)
		busy += 100 * time.Millisecond
		paused = paused || pause > 0
		assert.LessOrEqual(t, pause, maxRebuildPause)
	}
	assert.True(t, paused, "a storm is paced")
	share := float64(busy) / float64(now.Sub(begin))
	assert.InDelta(t, 0.5, share, 0.05, "rebuilds take half of the time in a storm")

	now = now.Add(2 * time.Second)
	assert.Zero(t, rebuild(100*time.Millisecond), "a quiet period empties the bucket")

	assert.Equal(t, maxRebuildPause, rebuild(10*time.Second), "a pause is bounded")
}

type noPlans struct{}

func (noPlans) Keys() []string { return nil }
func (noPlans) Plan(string, string) (*model.Plan, bool, error) {
	return nil, false, nil
}

// A plan waiting for clients is Pending with a typed count; a deleted map leaves nothing in
// the sink's per-map tables.
func TestApplyPendingAndDelete(t *testing.T) {
	s, err := New(Config{Address: "127.0.0.1:0", RequireAck: true, MinClients: 1, Plans: noPlans{}, Requeue: func(string, string) {}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}
	c, err := s.Apply(t.Context(), plan)
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State)
	assert.Equal(t, &model.Progress{Confirmed: 0, Total: 0, Required: 1}, c.Progress)
	assert.False(t, s.Carries(plan), "nothing is served before a rebuild")
	assert.Len(t, s.pending, 1)

	_, err = s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	assert.Empty(t, s.pending)
}

// A rebuild that sees a hand-over half done (the new holder's plan is in, the old holder's
// is not yet) never serves a name twice: the map taking the name keeps its last good
// content, is marked invalid and is rebuilt with the next change.
func TestExclusive(t *testing.T) {
	svc := func(ns string, hosts ...string) xds.Service {
		return xds.Service{Namespace: ns, Name: "chat", Service: "chat", Hostnames: hosts, Result: weights.Result{
			Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}.Sealed()
	}
	prev := map[string]xds.Service{"prod/chat": svc("prod", "chat.example.com"), "staging/chat": svc("staging")}
	s := &Sink{owner: map[string]string{}}
	index := func(served map[string]xds.Service) { // a full rebuild of served: every name indexed
		t.Helper()
		all := map[string]bool{}
		for key := range served {
			all[key] = true
		}
		require.Empty(t, s.exclusive(all, true, map[string]xds.Service{}, maps.Clone(served), map[string]error{}))
	}
	index(prev)
	next := map[string]xds.Service{"staging/chat": svc("staging", "chat.example.com")}
	invalid := map[string]error{}
	retry := s.exclusive(map[string]bool{"staging/chat": true}, false, prev, next, invalid)
	assert.Equal(t, []string{"staging/chat"}, retry)
	assert.Equal(t, map[string]xds.Service{"staging/chat": prev["staging/chat"]}, next, "the taker keeps its last good content")
	require.ErrorIs(t, invalid["staging/chat"], ErrNameTaken)
	assert.Contains(t, invalid["staging/chat"].Error(), `"chat.example.com" is served for trafficmap prod/chat`)
	assert.Equal(t, "prod/chat", s.owner["chat.example.com"])

	// Both rebuilt, no last good: the first by key keeps the name, the other leaves.
	index(map[string]xds.Service{})
	next = map[string]xds.Service{"prod/chat": svc("prod", "chat.example.com"), "staging/chat": svc("staging", "chat.example.com")}
	invalid = map[string]error{}
	retry = s.exclusive(map[string]bool{"prod/chat": true, "staging/chat": true}, false, map[string]xds.Service{}, next, invalid)
	assert.Equal(t, []string{"staging/chat"}, retry)
	assert.NotContains(t, next, "staging/chat")
	assert.Contains(t, next, "prod/chat")

	// Distinct names: nothing to do.
	index(prev)
	next = map[string]xds.Service{"staging/chat": svc("staging", "chat.staging.example.com")}
	assert.Empty(t, s.exclusive(map[string]bool{"staging/chat": true}, false, prev, next, map[string]error{}))

	// A map that gives a name up frees it for the next rebuild of another.
	index(prev)
	next = map[string]xds.Service{"prod/chat": svc("prod", "chat.other.example.com")}
	require.Empty(t, s.exclusive(map[string]bool{"prod/chat": true}, false, prev, next, map[string]error{}))
	now := map[string]xds.Service{"prod/chat": next["prod/chat"], "staging/chat": prev["staging/chat"]}
	next = map[string]xds.Service{"staging/chat": svc("staging", "chat.example.com")}
	assert.Empty(t, s.exclusive(map[string]bool{"staging/chat": true}, false, now, next, map[string]error{}))
	assert.Equal(t, "staging/chat", s.owner["chat.example.com"])
}

// Check refuses a plan whose resources fail validation on their own, naming the sink, and
// passes a valid one; it changes nothing served.
func TestCheck(t *testing.T) {
	s, err := New(Config{Address: "127.0.0.1:0", Plans: noPlans{}, Requeue: func(string, string) {}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Endpoint: weights.Endpoint{URL: "https://chat.a.example.com", Scheme: "https", Host: "chat.a.example.com", Port: 443}, Weight: 1, Effective: 1}}}}
	assert.Nil(t, s.Check(plan))

	bad := *plan
	bad.Result.Entries = []weights.EffectiveEntry{{Cluster: "a", Endpoint: weights.Endpoint{URL: "https://:443", Scheme: "https", Port: 443}, Weight: 1, Effective: 1}}
	c := s.Check(&bad)
	require.NotNil(t, c)
	assert.Equal(t, model.Refused, c.State)
	assert.Equal(t, ReasonInvalid, c.Reason)
	assert.Contains(t, c.Message, "xds sink cannot serve trafficmap prod/chat")
	assert.Equal(t, c, s.Check(&bad), "the verdict is kept while the content is unchanged")
	assert.Nil(t, s.Check(plan), "a valid plan passes again")
	assert.Empty(t, s.served, "checking serves nothing")
}

// In the reconnect grace after a start (and after becoming leader), a plan that was not
// published before is Pending even with no client connected, and is requeued when the
// window ends; a plan published before keeps being confirmed; after the window the usual
// rules apply.
func TestReconnectGrace(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var requeued []string
	s, err := New(Config{Address: "127.0.0.1:0", RequireAck: true, ReconnectGrace: 20 * time.Second, Plans: noPlans{},
		Now: func() time.Time { return now }, Requeue: func(ns, name string) { requeued = append(requeued, ns+"/"+name) }}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := func(before bool) *model.Plan {
		return &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", PublishedBefore: before, Result: weights.Result{
			Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 0}, {Cluster: "b", Weight: 1, Effective: 1}}}}
	}
	apply := func(p *model.Plan) model.Confirmation {
		t.Helper()
		c, err := s.Apply(t.Context(), p)
		require.NoError(t, err)
		return c
	}

	assert.Equal(t, model.InPlace, apply(plan(false)).State, "no grace before the start")

	s.beginGrace()
	t.Cleanup(func() { s.grace.timer.Stop() })
	c := apply(plan(false))
	assert.Equal(t, model.Pending, c.State, "changed content waits for clients to reconnect")
	assert.Contains(t, c.Message, "waiting for xds clients to reconnect")
	assert.Contains(t, c.Message, "from 2026-12-03T12:00:20Z on (--xds-reconnect-grace 20s)")
	assert.Equal(t, model.InPlace, apply(plan(true)).State, "content published before keeps its condition")

	now = now.Add(19 * time.Second)
	assert.Equal(t, model.Pending, apply(plan(false)).State)
	s.endGrace()
	assert.Equal(t, []string{"prod/chat"}, requeued, "the held map is reconciled when the window ends")
	now = now.Add(time.Second)
	assert.Equal(t, model.InPlace, apply(plan(false)).State, "the window is over")

	s.Leading()
	assert.Equal(t, model.Pending, apply(plan(false)).State, "a new leader waits again")
	_, err = s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	s.endGrace()
	assert.Equal(t, []string{"prod/chat"}, requeued, "a deleted map is not requeued")
}

// With --xds-min-clients, too few clients right after a start (they are reconnecting)
// keep content confirmed before in place for the window, not content that changed.
func TestReconnectGraceMinClients(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	s, err := New(Config{Address: "127.0.0.1:0", RequireAck: true, MinClients: 2, ReconnectGrace: 20 * time.Second, Plans: noPlans{},
		Now: func() time.Time { return now }, Requeue: func(string, string) {}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", PublishedBefore: true, Confirmed: true, Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}
	c, err := s.Apply(t.Context(), plan)
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "outside the window too few clients wait")
	assert.Contains(t, c.Message, "--xds-min-clients is 2")

	s.beginGrace()
	t.Cleanup(func() { s.grace.timer.Stop() })
	c, err = s.Apply(t.Context(), plan)
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Equal(t, "content confirmed before the start; within --xds-reconnect-grace 0/0 reconnected clients ACKed it so far (0 connected, --xds-min-clients 2)", c.Message)

	changed := *plan
	changed.PublishedBefore, changed.Confirmed = false, false
	c, err = s.Apply(t.Context(), &changed)
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "changed content is not waived")
	fresh := *plan
	fresh.Confirmed = false // a new map: published before in the sense of the hold, but never confirmed
	c, err = s.Apply(t.Context(), &fresh)
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "a new map is not waived")
}

// With no grace configured, Leading opens no window.
func TestReconnectGraceOff(t *testing.T) {
	s, err := New(Config{Address: "127.0.0.1:0", RequireAck: true, Plans: noPlans{}, Requeue: func(string, string) {}}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	s.Leading()
	c, err := s.Apply(t.Context(), &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
}
