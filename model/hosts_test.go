package model

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func claim(ns, name string, age int, names ...string) Claim {
	return Claim{Kind: KindTrafficMap, Namespace: ns, Name: name, Created: t0.Add(time.Duration(age) * time.Minute), Names: names}
}

func TestHostnamesOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"chat.example.com", "chat.example.com", true},
		{"Chat.Example.com.", "chat.example.com", true},
		{"chat.example.com", "embed.example.com", false},
		{"*.example.com", "chat.example.com", true},
		{"*.example.com", "a.b.example.com", true}, // one or more labels, as Gateway API and Envoy's suffix match
		{"*.example.com", "example.com", false},    // the wildcard needs a label
		{"*.example.com", "chat.example.org", false},
		{"*.example.com", "*.b.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.a.example.com", "*.b.example.com", false},
		{"*.example.com", "xexample.com", false}, // a suffix match is on whole labels
		{"chat.prod", "chat.prod", true},
	} {
		t.Run(tc.a+" "+tc.b, func(t *testing.T) {
			assert.Equal(t, tc.want, HostnamesOverlap(tc.a, tc.b))
			assert.Equal(t, tc.want, HostnamesOverlap(tc.b, tc.a), "symmetric")
		})
	}
}

// The index keys find every overlapping name: HostLookupKeys(a) meets HostIndexKeys(b)
// whenever a and b overlap.
// journaled is c with every name in its claim journal.
func journaled(c Claim) Claim {
	c.Journaled = c.Names
	return c
}

func TestResolveHostnamesOrder(t *testing.T) {
	prod := journaled(claim("prod", "chat", 5, "chat.prod", "chat.example.com"))
	staging := claim("staging", "chat", 0, "chat.staging", "chat.example.com") // older, claiming later

	own := ResolveHostnames(staging, []Claim{prod})
	assert.Equal(t, []string{"chat.staging"}, own.Claimable, "its unshared name is free to journal")
	assert.Empty(t, own.Owned, "nothing is owned before it is journaled")
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, Conflict{Hostname: "chat.example.com", Owner: Owner{Kind: KindTrafficMap, Namespace: "prod", Name: "chat",
		Hostname: "chat.example.com", Created: prod.Created}}, own.Conflicts[0], "a journaled name beats an older map's new claim")

	staging.Journaled = []string{"chat.staging"}
	own = ResolveHostnames(staging, []Claim{prod})
	assert.Equal(t, []string{"chat.staging"}, own.Owned)
	assert.Empty(t, own.Claimable)

	own = ResolveHostnames(prod, []Claim{staging})
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, own.Owned, "the holder keeps everything")
	assert.Empty(t, own.Conflicts)

	t.Run("both journaled (a race, a restore): the older wins, then namespace/name", func(t *testing.T) {
		a, b := journaled(claim("a", "chat", 0, "h.example.com")), journaled(claim("b", "chat", 0, "h.example.com"))
		assert.Equal(t, []string{"h.example.com"}, ResolveHostnames(a, []Claim{b}).Owned)
		assert.Equal(t, "a", ResolveHostnames(b, []Claim{a}).Conflicts[0].Owner.Namespace)
		c := journaled(claim("a", "zz", 0, "h.example.com"))
		assert.Equal(t, "chat", ResolveHostnames(c, []Claim{a}).Conflicts[0].Owner.Name)
		old := journaled(claim("z", "z", -1, "h.example.com"))
		assert.Equal(t, "z", ResolveHostnames(a, []Claim{b, old}).Conflicts[0].Owner.Namespace)
	})

	t.Run("no one journaled: the older claimant is granted first", func(t *testing.T) {
		a, b := claim("b", "old", 0, "h.example.com"), claim("a", "new", 1, "h.example.com")
		assert.Equal(t, []string{"h.example.com"}, ResolveHostnames(a, []Claim{b}).Claimable)
		own := ResolveHostnames(b, []Claim{a})
		assert.Empty(t, own.Claimable)
		require.Len(t, own.Conflicts, 1)
		assert.Equal(t, "old", own.Conflicts[0].Owner.Name)
		assert.Equal(t, "new", ResolveHostnames(a, []Claim{journaled(b)}).Conflicts[0].Owner.Name, "once the younger journaled it, it holds it")
	})

	t.Run("wildcard against exact: the holder wins either way", func(t *testing.T) {
		wild, exact := journaled(claim("w", "m", 5, "*.example.com")), claim("e", "m", 1, "chat.example.com")
		assert.Equal(t, "*.example.com", ResolveHostnames(exact, []Claim{wild}).Conflicts[0].Owner.Hostname)
		wild, exact = claim("w", "m", 0, "*.example.com"), journaled(claim("e", "m", 1, "chat.example.com"))
		assert.Equal(t, "chat.example.com", ResolveHostnames(wild, []Claim{exact}).Conflicts[0].Owner.Hostname)
	})

	t.Run("an older claim that already lost to a holder holds nothing back", func(t *testing.T) {
		// evil (oldest) wants *.example.com, which prod's journaled chat.example.com already
		// beats: evil will never be granted it, so api.example.com of a younger map is free.
		prod := journaled(claim("prod", "chat", 5, "chat.example.com"))
		evil := claim("evil", "wild", 0, "*.example.com")
		api := claim("team", "api", 9, "api.example.com")
		own := ResolveHostnames(api, []Claim{evil, prod})
		assert.Equal(t, []string{"api.example.com"}, own.Claimable)
		assert.Empty(t, own.Conflicts)
		assert.Equal(t, "prod", ResolveHostnames(evil, []Claim{prod, api}).Conflicts[0].Owner.Namespace)
		// Without the holder, the older wildcard goes first (rule 3).
		assert.Equal(t, "evil", ResolveHostnames(api, []Claim{evil}).Conflicts[0].Owner.Namespace)
	})

	t.Run("a journaled name no longer claimed still holds until it is dropped", func(t *testing.T) {
		a := claim("ns", "a", 5, "a.example.com")
		a.Journaled = []string{"a.example.com", "old.example.com"}
		b := claim("ns", "b", 0, "old.example.com")
		own := ResolveHostnames(b, []Claim{a})
		require.Len(t, own.Conflicts, 1)
		assert.Equal(t, "a", own.Conflicts[0].Owner.Name)
	})

	t.Run("the gRPC name counts within its namespace", func(t *testing.T) {
		a := journaled(claim("prod", "chat", 5, "chat.prod", "chat.example.com"))
		b := claim("prod", "y", 1, "y.prod", "chat.prod") // a hostname equal to a's gRPC name, same namespace
		assert.Equal(t, "chat.prod", ResolveHostnames(b, []Claim{a}).Conflicts[0].Hostname)
	})
}

// The scenario, on the pure level: prod/chat journaled its names; an OLDER map in
// namespace evil claims chat.prod, chat.example.com and *.prod. It takes nothing: the
// gRPC-form names are no claim at all (ClaimPolicy), chat.example.com loses to prod's
// journal, and prod's ownership does not change. On main the older map won all three.
func TestOlderNamespaceTakesNothing(t *testing.T) {
	policy := ClaimPolicy{GRPCNames: true}
	prod := journaled(claim("prod", "chat", 10, "chat.prod", "chat.example.com"))
	for _, host := range []string{"chat.prod", "chat.example.com", "*.prod"} {
		t.Run(host, func(t *testing.T) {
			evil := claim("evil", "chat", 0, "chat.evil")
			refused := policy.Check("evil", host)
			if host != "chat.example.com" {
				require.NotNil(t, refused, "a gRPC-form name of namespace prod is not evil's to claim")
				assert.Contains(t, refused.Rule, "gRPC name of namespace prod")
			} else {
				require.Nil(t, refused)
				evil.Names = append(evil.Names, host)
			}
			own := ResolveHostnames(evil, []Claim{prod})
			assert.Equal(t, []string{"chat.evil"}, own.Claimable, "evil keeps only its own gRPC name")
			assert.Empty(t, own.Owned)
			for _, c := range own.Conflicts {
				assert.Equal(t, "prod/chat", c.Owner.Namespace+"/"+c.Owner.Name)
			}
			// prod's ownership does not move.
			own = ResolveHostnames(prod, []Claim{evil})
			assert.Equal(t, []string{"chat.example.com", "chat.prod"}, own.Owned)
			assert.Empty(t, own.Conflicts)
		})
	}
	// A map in prod itself may claim a gRPC-form name of prod; the claim competes by claim
	// time with prod's gRPC names.
	assert.Nil(t, policy.Check("prod", "*.prod"))
	assert.Nil(t, ClaimPolicy{}.Check("evil", "chat.prod"), "without the xDS sink gRPC names are not served")
}

func TestForeignConflicts(t *testing.T) {
	own := Ownership{Owned: []string{"chat.example.com", "chat.prod"}}
	foreign := Claim{Kind: KindHTTPRoute, Namespace: "prod", Name: "legacy", Created: t0, Names: []string{"*.example.com"}}

	got := ForeignConflicts(own, nil, []Claim{foreign})
	assert.Equal(t, []string{"chat.prod"}, got.Owned, "no route yet: the foreign route is older")
	require.Len(t, got.Conflicts, 1)
	assert.Equal(t, "legacy", got.Conflicts[0].Owner.Name)

	older := t0.Add(-time.Minute)
	got = ForeignConflicts(own, &older, []Claim{foreign})
	assert.Equal(t, own.Owned, got.Owned, "the map's route is older: the gateway prefers it")
	assert.Empty(t, got.Conflicts)
}
