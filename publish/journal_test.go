package publish

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// Two workers granting overlapping names at once: exactly one gets each, and a name is
// free again once its holder released it (its journal dropped it) or was deleted.
func TestClaimTableGrantsOnce(t *testing.T) {
	table := newClaimTable()
	var wg sync.WaitGroup
	wins := make([][]string, 8)
	for i := range wins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "chat.example.com"
			if i%2 == 1 {
				name = "*.example.com"
			}
			wins[i], _, _ = table.reserve(model.Key("ns", fmt.Sprintf("m%d", i)), []string{name, fmt.Sprintf("m%d.ns", i)})
		}()
	}
	wg.Wait()
	winners := 0
	for i, w := range wins {
		assert.Contains(t, w, fmt.Sprintf("m%d.ns", i), "unshared names are granted")
		if len(w) == 2 {
			winners++
		}
	}
	assert.Equal(t, 1, winners, "one map is granted the overlapping names: %v", wins)

	table = newClaimTable()
	granted, added, held := table.reserve(model.Key("prod", "chat"), []string{"chat.example.com"})
	assert.Equal(t, []string{"chat.example.com"}, granted)
	assert.Equal(t, granted, added)
	assert.Empty(t, held)
	granted, added, _ = table.reserve(model.Key("prod", "chat"), []string{"chat.example.com"})
	assert.Equal(t, []string{"chat.example.com"}, granted, "granting again to the holder is a no-op")
	assert.Empty(t, added)
	granted, _, held = table.reserve(model.Key("evil", "chat"), []string{"*.example.com"})
	assert.Empty(t, granted)
	assert.Equal(t, map[string]tableHolder{"*.example.com": {Key: model.Key("prod", "chat"), Name: "chat.example.com"}}, held)
	table.release(model.Key("evil", "chat"), []string{"chat.example.com"})
	_, _, held = table.reserve(model.Key("evil", "chat"), []string{"chat.example.com"})
	assert.NotEmpty(t, held, "only the holder releases")
	table.release(model.Key("prod", "chat"), []string{"chat.example.com"})
	granted, _, _ = table.reserve(model.Key("evil", "chat"), []string{"*.example.com"})
	assert.Equal(t, []string{"*.example.com"}, granted)
	table.forget(model.Key("evil", "chat"))
	assert.Empty(t, table.holder)
	assert.Empty(t, table.index)
	assert.Empty(t, table.byKey)
}

func TestClaimPolicy(t *testing.T) {
	open := model.ClaimPolicy{GRPCNames: true}
	for _, tc := range []struct {
		ns, host string
		refused  string
	}{
		{"evil", "chat.prod", "gRPC name of namespace prod"},
		{"evil", "*.prod", "gRPC name of namespace prod"},
		{"evil", "Chat.Prod.", "gRPC name of namespace prod"},
		{"prod", "chat.prod", ""},
		{"prod", "*.prod", ""},
		{"evil", "chat.example.com", ""},
		{"evil", "a.chat.prod", ""}, // three labels: no gRPC name has that form
		{"evil", "*.example.com", ""},
	} {
		got := open.Check(tc.ns, tc.host)
		if tc.refused == "" {
			assert.Nil(t, got, "%s claiming %s", tc.ns, tc.host)
		} else if assert.NotNil(t, got, "%s claiming %s", tc.ns, tc.host) {
			assert.Contains(t, got.Rule, tc.refused)
		}
	}

	e, err := model.ParseEntitlement("Example.com=staging,prod")
	require.NoError(t, err)
	assert.Equal(t, model.Entitlement{Domain: "example.com", Namespaces: []string{"prod", "staging"}}, e)
	policy := model.ClaimPolicy{GRPCNames: true, Entitlements: []model.Entitlement{e, {Domain: "chat.example.com", Namespaces: []string{"prod"}}}}
	for _, tc := range []struct {
		ns, host string
		allowed  bool
	}{
		{"prod", "chat.example.com", true},
		{"staging", "chat.example.com", false}, // the narrower rule lists prod only
		{"staging", "embed.example.com", true},
		{"staging", "a.b.example.com", true},
		{"staging", "example.com", false}, // two labels: the form of a gRPC name of namespace "com"
		{"evil", "embed.example.com", false},
		{"evil", "*.example.com", false},
		{"staging", "*.example.com", false}, // covers chat.example.com too
		{"evil", "*.com", false},            // a gRPC-form name of namespace "com", and covers example.com
		{"evil", "chat.example.org", true},
	} {
		got := policy.Check(tc.ns, tc.host)
		assert.Equal(t, tc.allowed, got == nil, "%s claiming %s: %+v", tc.ns, tc.host, got)
	}
	assert.Contains(t, policy.Check("evil", "embed.example.com").Rule, "--hostname-entitlement example.com=prod,staging gives names under example.com to namespace(s) prod, staging only")

	for _, bad := range []string{"example.com", "example.com=", "*.example.com=prod", "example.com=Prod", "exa mple.com=prod"} {
		_, err := model.ParseEntitlement(bad)
		assert.ErrorIs(t, err, model.ErrInvalidEntitlement, bad)
	}
}

// A refused hostname is no claim: the map is Published False with HostnameNotEntitled,
// naming the object, the field and the rule, with a Warning Event; no sink gets a plan,
// and nothing is journaled.
func TestReconcileHostnameNotEntitled(t *testing.T) {
	s := inPlace("route stored")
	f := newFixture(t, s)
	f.inputs.tm.Namespace = "evil"
	f.inputs.tm.Status.Publisher = nil
	f.api.tm = f.inputs.tm.DeepCopy()
	f.key.Namespace = "evil"
	f.inputs.global = "chat.prod"
	f.inputs.policy = model.ClaimPolicy{GRPCNames: true}
	_, err := f.run(t)
	require.NoError(t, err)
	c := f.published()
	require.NotNil(t, c)
	assert.Equal(t, string(model.ReasonHostnameNotEntitled), c.Reason)
	assert.Equal(t, `inferenceservice evil/chat metadata.annotations[ome.io/global-host] "chat.prod" may not be claimed from namespace evil: `+
		`a name of the form <service>.<namespace> (or *.<namespace>) is a gRPC name of namespace prod, which only maps in namespace prod may claim; `+
		`trafficmap evil/chat claims nothing under it and keeps what it published before`, c.Message)
	assert.Contains(t, f.event(), "Warning HostnameNotEntitled")
	assert.Empty(t, s.applied)
	assert.Nil(t, f.api.tm.Status.Publisher)
}

// The claim journal is written before any sink gets a plan serving a newly granted name,
// and a name the map no longer claims leaves the journal only after the sinks applied the
// plan without it.
func TestReconcileClaimsBeforeSinks(t *testing.T) {
	f := newFixture(t)
	s := &journalSink{fakeSink: inPlace("route stored"), api: f.api}
	f.rec.sinks = []model.Sink{s}
	f.inputs.tm.Status.Publisher = nil // a new map: nothing journaled yet
	f.api.tm = f.inputs.tm.DeepCopy()
	_, err := f.run(t)
	require.NoError(t, err)
	require.Len(t, s.applied, 1)
	assert.Equal(t, []string{"chat.example.com"}, s.applied[0].Hostnames)
	assert.Empty(t, s.applied[0].Conflicts)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, s.journalAtApply[0], "journaled before the sink got the plan")
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	assert.Equal(t, testPublisher, f.api.tm.Status.Publisher.PublisherName)
	assert.Equal(t, model.OptionsDigest(nil), f.api.tm.Status.Publisher.ObservedOptionsDigest)

	// The hostname moves: the new name is journaled next to the old one before the sink
	// applies; the old one is dropped after.
	f.inputs.global = "chat2.example.com"
	_, err = f.run(t)
	require.NoError(t, err)
	require.Len(t, s.applied, 2)
	assert.Equal(t, []string{"chat2.example.com"}, s.applied[1].Hostnames)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com", "hostname:chat2.example.com"}, s.journalAtApply[1],
		"the old name is still journaled while the sink may serve it")
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat2.example.com"}, f.api.tm.Status.Publisher.ClaimedTargets)

	// The hostname moves to a name another map holds: the sinks are not given the new
	// name, and a sink may keep the old one (the route sink leaves its route as it was), so
	// the old name stays journaled.
	other := claim("staging", "x", 0, "x.staging", "held.example.com")
	other.Journaled = other.Names
	f.inputs.claims = []model.Claim{other}
	f.inputs.global = "held.example.com"
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, string(model.ReasonHostnameConflict), f.published().Reason)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat2.example.com"}, f.api.tm.Status.Publisher.ClaimedTargets)
	f.inputs.claims = nil

	// A journal write that fails grants nothing: no sink is applied, and the table is free.
	f.inputs.global = "chat3.example.com"
	f.api.conflicts = 1
	_, err = f.run(t)
	require.Error(t, err)
	assert.Len(t, s.applied, 3)
	assert.NotContains(t, f.rec.claims.holder, "chat3.example.com")
}

// journalSink records the stored map's claim journal whenever it is applied.
type journalSink struct {
	*fakeSink
	api            *fakeStatusAPI
	journalAtApply [][]string
}

func (s *journalSink) Apply(ctx context.Context, p *model.Plan, st model.Standing) (model.Confirmation, error) {
	var targets []string
	if j := s.api.tm.Status.Publisher; j != nil {
		targets = j.ClaimedTargets
	}
	s.journalAtApply = append(s.journalAtApply, targets)
	return s.fakeSink.Apply(ctx, p, st)
}

// A name another worker is granting right now (in the claim table, not yet in the cache)
// is not granted twice: the map reports the conflict naming the holder and is looked at
// again after claimRetry.
func TestReconcileClaimTableHeld(t *testing.T) {
	s := inPlace("route stored")
	f := newFixture(t, s)
	f.inputs.tm.Status.Publisher.ClaimedTargets = []string{"grpc:chat.prod"}
	f.api.tm = f.inputs.tm.DeepCopy()
	f.rec.claims.reserve(model.Key("staging", "other"), []string{"*.example.com"})
	hold, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, claimRetry, hold)
	assert.Equal(t, string(model.ReasonHostnameConflict), f.published().Reason)
	assert.Contains(t, f.published().Message, "hostname chat.example.com is held by trafficmap staging/other (hostname *.example.com, being granted)")
	require.Len(t, s.applied, 1)
	assert.Empty(t, s.applied[0].Hostnames)
	assert.Equal(t, []string{"grpc:chat.prod"}, f.api.tm.Status.Publisher.ClaimedTargets)

	f.rec.claims.forget(model.Key("staging", "other")) // its journal write failed, or it was deleted
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, f.api.tm.Status.Publisher.ClaimedTargets)
}

// lastPositive is written with the True condition of a plan with a positive weight, and
// kept while the map is not published or publishes only zeros.
func TestReconcileLastPositive(t *testing.T) {
	s := inPlace("route stored")
	f := newFixture(t, s)
	f.inputs.tm.Spec.ObservedISVCGeneration = 7
	f.api.tm = f.inputs.tm.DeepCopy()
	_, err := f.run(t)
	require.NoError(t, err)
	require.Equal(t, metav1.ConditionTrue, f.published().Status)
	lp := f.api.tm.Status.Publisher.LastPositive
	require.NotNil(t, lp)
	assert.Equal(t, int64(3), lp.TrafficMapGeneration)
	assert.Equal(t, int64(7), lp.ObservedISVCGeneration)
	assert.Equal(t, []v1beta1.TrafficMapPublisherTarget{{Target: "worker-a", Weight: 1}, {Target: "worker-b", Weight: 1}}, lp.Targets)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, lp.PlanCompatibilityDigest)
	applies := f.api.applies

	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, applies, f.api.applies, "no write when nothing changed")

	// Everything drained: True with zeros; the last positive plan stays.
	f.inputs.annotations = map[string]string{"ome.io/traffic-drain": `{"m-a":{"cluster":"worker-a","reason":"r"},"m-b":{"cluster":"worker-b","reason":"r"}}`}
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, lp, f.api.tm.Status.Publisher.LastPositive)
}

// D6: with names contested per namespace (--gateway NAME without a namespace, no xDS sink),
// the claim table is per namespace: staging/chat is granted chat.example.com while prod/chat
// holds it. With one Gateway for every namespace it stays one table.
func TestClaimTablePerNamespaceWhenScoped(t *testing.T) {
	for _, tc := range []struct {
		gateway types.NamespacedName
		scoped  bool
	}{{types.NamespacedName{Name: "global"}, true}, {types.NamespacedName{Namespace: "infra", Name: "global"}, false}} {
		t.Run(tc.gateway.String(), func(t *testing.T) {
			p, err := New(Config{Gateway: tc.gateway}, &rest.Config{Host: "https://127.0.0.1:1"}, zaptest.NewLogger(t))
			require.NoError(t, err)
			granted, _, _ := p.rec.claims.reserve(model.Key("prod", "chat"), []string{"chat.example.com"})
			require.Equal(t, []string{"chat.example.com"}, granted)
			granted, _, held := p.rec.claims.reserve(model.Key("staging", "chat"), []string{"chat.example.com", "*.example.com"})
			if tc.scoped {
				assert.Equal(t, []string{"*.example.com", "chat.example.com"}, granted, "another namespace's grant holds nothing here")
				assert.Empty(t, held)
				_, _, held = p.rec.claims.reserve(model.Key("staging", "other"), []string{"chat.example.com"})
				assert.Equal(t, model.Key("staging", "chat"), held["chat.example.com"].Key, "within a namespace a name is granted once")
				return
			}
			assert.Empty(t, granted)
			assert.Equal(t, model.Key("prod", "chat"), held["chat.example.com"].Key)
		})
	}
}
