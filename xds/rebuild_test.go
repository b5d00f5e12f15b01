package xds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// A rebuild per change serves what a rebuild of everything would: after every step of a
// random sequence of changes (drains, hostnames taken from another map or given up, maps
// added and deleted), each flavour's resources equal a fresh translation of what the sink
// says it serves, no name is served for two maps, and the history says the versions
// served carry every served map's current content.
func TestRebuildPerChangeServesTheFleet(t *testing.T) {
	plans := &memPlans{plans: map[string]*model.Plan{}}
	rng := rand.New(rand.NewPCG(17, 1))
	plan := func(i int) *model.Plan {
		in := weights.Input{}
		for j := range 3 {
			in.Entries = append(in.Entries, weights.Entry{Cluster: fmt.Sprintf("worker-%d", j),
				Endpoint: fmt.Sprintf("https://svc-%d.worker-%d.example.com", i, j), Weight: int64(j + 1)})
		}
		if rng.IntN(2) == 0 {
			in.Drains = []weights.Drain{{ID: "m", Cluster: fmt.Sprintf("worker-%d", rng.IntN(3)), Reason: "r"}}
		}
		res, err := weights.Compute(in)
		require.NoError(t, err)
		p := &model.Plan{Namespace: "prod", Name: fmt.Sprintf("svc-%d", i), Service: fmt.Sprintf("svc-%d", i), Result: res}
		switch rng.IntN(4) {
		case 0: // no hostname: gRPC only
		case 1: // another map's hostname: a hand-over half done
			p.Hostnames = []string{fmt.Sprintf("svc-%d.example.com", rng.IntN(12))}
		default:
			p.Hostnames = []string{fmt.Sprintf("svc-%d.example.com", i)}
		}
		return p
	}
	for i := range 12 {
		plans.set(plan(i))
	}
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	plans.serve(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.server.Serve(ctx, s.listener) }()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, s.loop.rebuild(ctx))
	consume(t, ctx, s.listener.Addr(), "envoy")
	consume(t, ctx, s.listener.Addr(), "gRPC Go")
	require.Eventually(t, func() bool { return consumedAll(s) }, 10e9, 1e6)

	check := func(step int) {
		t.Helper()
		served := map[string]Service{}
		s.mu.Lock()
		for key, svc := range s.served {
			served[key] = svc
		}
		s.mu.Unlock()
		var all, withHosts []Service
		owner := map[string]string{}
		for key, svc := range served {
			all = append(all, svc)
			if len(svc.Hostnames) > 0 {
				withHosts = append(withHosts, svc)
			}
			for _, n := range ListenerNames(svc) {
				require.Empty(t, owner[n], "step %d: %q served for %s and %s", step, n, owner[n], key)
				owner[n] = key
			}
		}
		wantEnvoy, err := TranslateEnvoy(s.envoy, withHosts)
		require.NoError(t, err)
		wantGRPC, err := TranslateGRPC(all)
		require.NoError(t, err)
		for f, want := range map[Flavour]Resources{FlavourEnvoy: wantEnvoy, FlavourGRPC: wantGRPC} {
			got, err := s.loop.translator.Resources(f)
			require.NoError(t, err)
			assertSame(t, step, want, got)
			versions, err := s.server.SetResources(ctx, f, got) // already served: changes nothing
			require.NoError(t, err)
			for key, svc := range served {
				sv, ok := ServedBy(s.envoy, svc)[f]
				if !ok {
					continue
				}
				for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType} {
					if len(sv.Names[typ]) > 0 {
						assert.True(t, s.history.Carries(f, typ, versions[typ], key, svc.Digest()), "step %d: %s %s carries %s", step, f, typ, key)
					}
				}
			}
		}
	}
	require.NoError(t, s.loop.rebuild(ctx)) // builds both flavours
	check(0)
	for step := 1; step <= 60; step++ {
		for range 1 + rng.IntN(3) {
			i := rng.IntN(14) // 12 and 13 come and go
			if rng.IntN(6) == 0 {
				s.Withdraw(types.NamespacedName{Namespace: "prod", Name: fmt.Sprintf("svc-%d", i)})
			} else {
				s.Serve(plan(i))
			}
		}
		require.NoError(t, s.loop.rebuild(ctx))
		check(step)
	}
}

func assertSame(t *testing.T, step int, want, got Resources) {
	t.Helper()
	got = Decoded(t, got) // the Envoy flavour's routes and clusters are held encoded
	for _, l := range []struct {
		kind      string
		want, got []proto.Message
	}{
		{"listener", msgs(want.Listeners), msgs(got.Listeners)},
		{"route configuration", msgs(want.Routes), msgs(got.Routes)},
		{"cluster", msgs(want.Clusters), msgs(got.Clusters)},
	} {
		require.Len(t, l.got, len(l.want), "step %d: %ss", step, l.kind)
		for i := range l.want {
			require.True(t, proto.Equal(l.want[i], l.got[i]), "step %d: %s %d", step, l.kind, i)
		}
	}
}

func msgs[T proto.Message](in []T) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

// A rebuild whose only changes are maps served for the first time (a cold start's maps,
// each once its claim journal lands) waits for more of them, up to coalesceNew after the
// last snapshot, and serves them together; a change to a served map is served at once and
// takes the waiting ones along.
func TestNewMapsCoalesce(t *testing.T) {
	endpoints := []string{"https://chat.worker-a.example.com", "https://chat.worker-b.example.com"}
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { s.loop.queue.ShutDown(); _ = s.listener.Close() })
	s.Serve(chatPlan(t, endpoints, false))
	served := func(key string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.served[key]
		return ok
	}
	require.NoError(t, s.loop.rebuild(t.Context())) // the first, full rebuild
	require.True(t, served("prod/chat"))

	embed := chatPlan(t, endpoints, false)
	embed.Name, embed.Service, embed.Hostnames = "embed", "embed", []string{"embed.example.com"}
	s.Serve(embed)
	key, _ := s.loop.queue.Get()
	s.loop.queue.Done(key)
	require.NoError(t, s.loop.rebuild(t.Context()))
	assert.False(t, served("prod/embed"), "a new map right after a snapshot waits for more")
	s.wants.mu.Lock()
	assert.True(t, s.wants.dirty["prod/embed"], "and stays dirty")
	s.wants.mu.Unlock()
	require.Eventually(t, func() bool { return s.loop.queue.Len() == 1 }, 10*time.Second, 10*time.Millisecond, "its rebuild is queued within coalesceNew")

	// A map whose every name is withheld (claimed, not journaled yet) is not served (the
	// Envoy flavour refuses it); once journaled, it is new content like embed's and waits.
	key, _ = s.loop.queue.Get()
	s.loop.queue.Done(key)
	require.NoError(t, s.loop.rebuild(t.Context())) // serves embed
	require.True(t, served("prod/embed"))
	held := chatPlan(t, endpoints, false)
	held.Name, held.Service, held.Hostnames = "held", "held", []string{"held.example.com"}
	held.Conflicts = []model.Conflict{{Hostname: "held.example.com", Unjournaled: true}, {Hostname: "held.prod", Unjournaled: true}}
	s.Serve(held)
	require.NoError(t, s.loop.rebuild(t.Context()))
	require.False(t, served("prod/held"))
	held = chatPlan(t, endpoints, false)
	held.Name, held.Service, held.Hostnames = "held", "held", []string{"held.example.com"}
	s.Serve(held) // journaled: its names may be served
	require.NoError(t, s.loop.rebuild(t.Context()))
	assert.False(t, served("prod/held"), "a journaled map right after a snapshot waits for more")

	s.Serve(chatPlan(t, endpoints, true)) // a drain of a served map
	require.NoError(t, s.loop.rebuild(t.Context()))
	assert.True(t, served("prod/embed"), "a change to a served map is served at once, with the waiting new map")
	s.mu.Lock()
	assert.NotEmpty(t, ListenerNames(s.served["prod/held"]), "and the waiting names")
	s.mu.Unlock()
	s.mu.Lock()
	assert.True(t, s.served["prod/chat"].entries()[0].effective == 0, "the drain is served")
	s.mu.Unlock()
}
