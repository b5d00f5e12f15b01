package xds

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// A rebuild after a quiet period is not delayed; back-to-back rebuilds are paced so they
// A plan waiting for clients is Pending with a typed count and is the map's wanted content;
// a deleted map leaves nothing in the sink's per-map tables.
func TestApplyPendingAndDelete(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, MinClients: 1}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Endpoint: weights.Endpoint{URL: "https://chat.a.example.com", Scheme: "https", Host: "chat.a.example.com", Port: 443}, Weight: 1, Effective: 1}}}}
	c, err := s.Apply(t.Context(), plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State)
	assert.Equal(t, &model.Progress{Confirmed: 0, Total: 0, Required: 1}, c.Progress)
	assert.False(t, s.Carries(plan), "nothing is served before a rebuild")
	assert.Len(t, s.pending, 1)
	_, given := s.wants.get("prod/chat")
	assert.True(t, given, "Apply gives the plan: it is the map's wanted content")

	_, err = s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	assert.Empty(t, s.pending)
	_, given = s.wants.get("prod/chat")
	assert.False(t, given, "a deleted map's plan is forgotten")
}

// A rebuild that sees a hand-over half done (the new holder's plan is in, the old holder's
// is not yet) never serves a name twice: the map taking the name keeps its last good
// content, is marked invalid and is rebuilt with the next change.
func TestExclusive(t *testing.T) {
	svc := func(ns string, hosts ...string) Service {
		return Service{Namespace: ns, Name: "chat", Service: "chat", Hostnames: hosts, Result: weights.Result{
			Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}.Sealed()
	}
	prev := map[string]Service{"prod/chat": svc("prod", "chat.example.com"), "staging/chat": svc("staging")}
	s := &rebuilder{owner: map[string]string{}}
	index := func(served map[string]Service) { // a full rebuild of served: every name indexed
		t.Helper()
		all := map[string]bool{}
		for key := range served {
			all[key] = true
		}
		require.Empty(t, s.exclusive(all, true, map[string]Service{}, maps.Clone(served), map[string]error{}))
	}
	index(prev)
	next := map[string]Service{"staging/chat": svc("staging", "chat.example.com")}
	invalid := map[string]error{}
	retry := s.exclusive(map[string]bool{"staging/chat": true}, false, prev, next, invalid)
	assert.Equal(t, []string{"staging/chat"}, retry)
	assert.Equal(t, map[string]Service{"staging/chat": prev["staging/chat"]}, next, "the taker keeps its last good content")
	require.ErrorIs(t, invalid["staging/chat"], errNameTaken)
	assert.Contains(t, invalid["staging/chat"].Error(), `"chat.example.com" is served for trafficmap prod/chat`)
	assert.Equal(t, "prod/chat", s.owner["chat.example.com"])

	// Both rebuilt, no last good: the first by key keeps the name, the other leaves.
	index(map[string]Service{})
	next = map[string]Service{"prod/chat": svc("prod", "chat.example.com"), "staging/chat": svc("staging", "chat.example.com")}
	invalid = map[string]error{}
	retry = s.exclusive(map[string]bool{"prod/chat": true, "staging/chat": true}, false, map[string]Service{}, next, invalid)
	assert.Equal(t, []string{"staging/chat"}, retry)
	assert.NotContains(t, next, "staging/chat")
	assert.Contains(t, next, "prod/chat")

	// Distinct names: nothing to do.
	index(prev)
	next = map[string]Service{"staging/chat": svc("staging", "chat.staging.example.com")}
	assert.Empty(t, s.exclusive(map[string]bool{"staging/chat": true}, false, prev, next, map[string]error{}))

	// A map that gives a name up frees it for the next rebuild of another.
	index(prev)
	next = map[string]Service{"prod/chat": svc("prod", "chat.other.example.com")}
	require.Empty(t, s.exclusive(map[string]bool{"prod/chat": true}, false, prev, next, map[string]error{}))
	now := map[string]Service{"prod/chat": next["prod/chat"], "staging/chat": prev["staging/chat"]}
	next = map[string]Service{"staging/chat": svc("staging", "chat.example.com")}
	assert.Empty(t, s.exclusive(map[string]bool{"staging/chat": true}, false, now, next, map[string]error{}))
	assert.Equal(t, "staging/chat", s.owner["chat.example.com"])
}

// Check refuses a plan whose resources fail validation on their own, naming the sink, and
// passes a valid one; it changes nothing served.
func TestCheck(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0"}, zaptest.NewLogger(t))
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
	assert.Equal(t, model.ReasonXDSInvalid, c.Reason)
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
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, ReconnectGrace: 20 * time.Second,
		Now: func() time.Time { return now }}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Endpoint: weights.Endpoint{URL: "https://chat.a.example.com", Scheme: "https", Host: "chat.a.example.com", Port: 443}, Weight: 1, Effective: 0}, {Cluster: "b", Endpoint: weights.Endpoint{URL: "https://chat.b.example.com", Scheme: "https", Host: "chat.b.example.com", Port: 443}, Weight: 1, Effective: 1}}}}
	serveNow(t, s, plan)
	apply := func(before bool) model.Confirmation {
		t.Helper()
		c, err := s.Apply(t.Context(), plan, model.Standing{PublishedBefore: before})
		require.NoError(t, err)
		return c
	}
	requeued := func() []string {
		var out []string
		select {
		case <-s.Updates():
			for _, key := range s.Updated() {
				out = append(out, key.String())
			}
		default:
		}
		return out
	}

	assert.Equal(t, model.InPlace, apply(false).State, "no grace before the start")
	requeued() // the sink's own news: pending content (nothing about the grace)

	s.grace.begin()
	t.Cleanup(s.grace.stop)
	c := apply(false)
	assert.Equal(t, model.Pending, c.State, "changed content waits for clients to reconnect")
	assert.Contains(t, c.Message, "waiting for xds clients to reconnect")
	assert.Contains(t, c.Message, "from 2026-12-03T12:00:20Z on (--xds-reconnect-grace 20s)")
	assert.Equal(t, model.InPlace, apply(true).State, "content published before keeps its condition")

	now = now.Add(19 * time.Second)
	assert.Equal(t, model.Pending, apply(false).State)
	s.grace.ended()
	assert.Equal(t, []string{"prod/chat"}, requeued(), "the held map is reconciled when the window ends")
	now = now.Add(time.Second)
	assert.Equal(t, model.InPlace, apply(false).State, "the window is over")

	s.Leading()
	assert.Equal(t, model.Pending, apply(false).State, "a new leader waits again")
	_, err = s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	s.grace.ended()
	assert.Empty(t, requeued(), "a deleted map is not requeued")
}

// With --xds-min-clients, too few clients right after a start (they are reconnecting)
// keep content confirmed before in place for the window, not content that changed.
func TestReconnectGraceMinClients(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true, MinClients: 2, ReconnectGrace: 20 * time.Second,
		Now: func() time.Time { return now }}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}
	before := model.Standing{PublishedBefore: true, Confirmed: true}
	c, err := s.Apply(t.Context(), plan, before)
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "outside the window too few clients wait")
	assert.Contains(t, c.Message, "--xds-min-clients is 2")

	s.grace.begin()
	t.Cleanup(s.grace.stop)
	c, err = s.Apply(t.Context(), plan, before)
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	assert.Equal(t, "content confirmed before the start; within --xds-reconnect-grace 0/0 reconnected clients ACKed it so far (0 connected, --xds-min-clients 2)", c.Message)

	c, err = s.Apply(t.Context(), plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "changed content is not waived")
	// A new map: published before in the sense of the hold, but never confirmed.
	c, err = s.Apply(t.Context(), plan, model.Standing{PublishedBefore: true})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "a new map is not waived")
}

// With no grace configured, Leading opens no window.
func TestReconnectGraceOff(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	s.Leading()
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Endpoint: weights.Endpoint{URL: "https://chat.a.example.com", Scheme: "https", Host: "chat.a.example.com", Port: 443}, Weight: 1, Effective: 1}}}}
	c, err := s.Apply(t.Context(), plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.Pending, c.State, "no client waits, but the content is not served yet")
	assert.Contains(t, c.Message, "waiting for the xds server to serve these weights")
	require.NoError(t, s.loop.rebuild(t.Context()))
	c, err = s.Apply(t.Context(), plan, model.Standing{})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, "served, and no client to wait for")
}

// serveNow gives s plan and serves it at once (one rebuild), as the rebuild loop would.
func serveNow(t *testing.T, s *Sink, plan *model.Plan) {
	t.Helper()
	s.Serve(plan)
	require.NoError(t, s.loop.rebuild(t.Context()))
}

// The pipeline pushes: Serve records the map's wanted content and asks for a rebuild only
// when the content differs from what was given before; the rebuild serves the given content
// and names the map whose served content changed (Updated); Withdraw removes it.
func TestServeDrivesTheRebuild(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { s.loop.queue.ShutDown(); _ = s.listener.Close() })
	plan := func(drained bool) *model.Plan {
		return chatPlan(t, []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}, drained)
	}
	updated := func() []string {
		t.Helper()
		var out []string
		select {
		case <-s.Updates():
			for _, key := range s.Updated() {
				out = append(out, key.String())
			}
		default:
		}
		return out
	}
	served := func() (Service, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		svc, ok := s.served["prod/chat"]
		return svc, ok
	}
	s.Serve(plan(false)) // given before the start, as the pipeline primes the sink
	assert.Equal(t, 1, s.loop.queue.Len(), "new content asks for a rebuild")
	_, ok := served()
	assert.False(t, ok, "Serve only records")
	require.NoError(t, s.loop.rebuild(t.Context())) // the first, full rebuild
	assert.True(t, s.Carries(plan(false)), "the given content is served")
	assert.Equal(t, []string{"prod/chat"}, updated(), "the served content changed")

	key, _ := s.loop.queue.Get()
	s.loop.queue.Done(key)
	s.Serve(plan(false))
	keys, full := s.wants.take()
	assert.Empty(t, keys, "the same content again is no change")
	assert.False(t, full)

	s.Serve(plan(true))
	require.NoError(t, s.loop.rebuild(t.Context()))
	assert.True(t, s.Carries(plan(true)), "a drain is served")
	assert.Equal(t, []string{"prod/chat"}, updated())

	s.Withdraw(types.NamespacedName{Namespace: "prod", Name: "chat"})
	require.NoError(t, s.loop.rebuild(t.Context()))
	_, ok = served()
	assert.False(t, ok, "a withdrawn map is not served")
	assert.Equal(t, []string{"prod/chat"}, updated())
}

// The teardown: a map being deleted is handed at weight 0 only while it is given (nothing is
// given again for a map the sink no longer holds), and Retire withdraws it, remembering
// what was served, confirmed at once when no client holds it; Delete forgets it.
func TestFinalizingAndRetire(t *testing.T) {
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.listener.Close() })
	plan := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Result: weights.Result{
		Entries: []weights.EffectiveEntry{{Cluster: "a", Weight: 1, Effective: 1}}}}
	zero := model.Zeroed(*plan)
	key := types.NamespacedName{Namespace: "prod", Name: "chat"}

	c, err := s.Apply(t.Context(), &zero, model.Standing{Finalizing: true})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, "nothing given: nothing to set to 0")
	_, given := s.wants.get("prod/chat")
	assert.False(t, given, "a map being deleted is not given again")

	_, err = s.Apply(t.Context(), plan, model.Standing{})
	require.NoError(t, err)
	_, err = s.Apply(t.Context(), &zero, model.Standing{Finalizing: true})
	require.NoError(t, err)
	want, given := s.wants.get("prod/chat")
	require.True(t, given)
	require.NotEmpty(t, want.entries())
	assert.False(t, want.routable(), "the zeros replace what was given")

	c, err = s.Retire(t.Context(), key)
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State, "no client holds it")
	assert.Equal(t, &model.Progress{}, c.Progress)
	_, given = s.wants.get("prod/chat")
	assert.False(t, given, "retired: withdrawn")
	assert.Contains(t, s.retired, "prod/chat")
	c, err = s.Apply(t.Context(), &zero, model.Standing{Finalizing: true})
	require.NoError(t, err)
	assert.Equal(t, model.InPlace, c.State)
	_, given = s.wants.get("prod/chat")
	assert.False(t, given, "a retired map is not served again by its zeros")

	_, err = s.Delete(t.Context(), "prod", "chat")
	require.NoError(t, err)
	assert.Empty(t, s.retired, "Delete forgets the retirement")
}
