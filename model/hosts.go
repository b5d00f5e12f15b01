package model

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Hostname ownership: one owner per name. Everything in this file is pure.
//
// The names a map claims are its hostname (the ome.io/global-host annotation or the
// rendered --host-template) and "<service>.<namespace>", the name proxyless gRPC clients
// dial. Two names overlap when some host matches both, the way Gateway API and Envoy match
// them: equal names overlap; a wildcard "*.example.com" matches every name with one or more
// labels before ".example.com" (so it overlaps "a.example.com", "a.b.example.com" and
// "*.b.example.com", never "example.com"). Names compare case-insensitively, without a
// trailing dot.
//
// Ownership goes by claim time. A map holds a name once the name counts in its claim journal
// (status.publisher.claimedTargets, journal.go): the publisher records the grant where
// tenants cannot write (record.go) and journals it, both before any sink serves it; what
// counts is what the journal and the record agree on, under the claim policy (evidence.go:
// Claim.Journaled, with each name's grant time). Among the claims on overlapping names:
//
//  1. a name journaled by another map wins over a claim not journaled yet, whatever the
//     maps' ages: a new annotation on an old map is a new claim and loses to a name
//     already held;
//  2. when both journaled overlapping names (a race between publishers, a restored
//     object, an import), the earlier grant wins: the grant time the publisher recorded
//     (a map's own gRPC name: its metadata.creationTimestamp), ties broken by the older
//     map, then namespace/name (Gateway API's route precedence). Nothing a tenant writes
//     sets a grant time, so a claim cannot be backdated;
//  3. among claims journaled by no one, the older claimant is first to be granted (so a
//     cold start over maps that never journaled decides deterministically), unless the
//     older claimant's name already lost to a journaled one (it will never be granted, so
//     it holds nothing back); a name no one holds and no older claimant wants is Claimable: the pipeline grants it (claim
//     table, journal.go) by writing it into the map's journal, and only then is it Owned.
//
// Only Owned names are served, by either sink; a name lost is served for no one but its
// owner. Which names a map may claim at all (a gRPC-form name of another namespace, a
// domain the entitlement policy gives to other namespaces) is decided before, by
// ClaimPolicy (policy.go): a refused name is no claim.

// Kinds of claimants (Claim.Kind).
const (
	// KindTrafficMap is a TrafficMap's claim.
	KindTrafficMap = "TrafficMap"
	// KindHTTPRoute is the claim of an HTTPRoute the publisher does not manage.
	KindHTTPRoute = "HTTPRoute"
)

// Claim is one map's claim on names.
type Claim struct {
	// Kind is "TrafficMap", or "HTTPRoute" for a route the publisher does not manage.
	Kind string
	// Namespace and Name identify the claimant.
	Namespace, Name string
	// Created is the claimant's metadata.creationTimestamp.
	Created time.Time
	// Names are the names it claims (the ones its policy allows).
	Names []string
	// Journaled are the names its claim journal holds that count (Evidence): the ones it
	// was granted, including names it no longer claims but whose journal entry is not
	// dropped yet (a name leaves the journal only after the sinks stopped serving it). A
	// route's claim has none.
	Journaled []string
	// Granted is each journaled name's grant time (Evidence.Granted); a name without one
	// was granted at Created.
	Granted map[string]time.Time
}

// grantedAt is when c was granted its journaled name n.
func (c Claim) grantedAt(n string) time.Time {
	if t, ok := c.Granted[n]; ok {
		return t
	}
	return c.Created
}

// grantPrecedes reports whether a's grant of an precedes b's grant of bn: earlier, or as
// early and a precedes b.
func grantPrecedes(a Claim, an string, b Claim, bn string) bool {
	if c := a.grantedAt(an).Compare(b.grantedAt(bn)); c != 0 {
		return c < 0
	}
	return Precedes(a, b)
}

// Key is the claimant's key.
func (c Claim) Key() types.NamespacedName { return Key(c.Namespace, c.Name) }

// Precedes reports whether a wins over b in a tie between two journaled (or two
// unjournaled) claims: a is older, or as old and first by namespace/name.
func Precedes(a, b Claim) bool { return compareClaims(a, b) < 0 }

func compareClaims(a, b Claim) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.Kind, b.Kind)
}

// NormalizeHostname is name lower-cased, without a trailing dot.
func NormalizeHostname(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// HostnamesOverlap reports whether some host matches both a and b (see the rule above).
func HostnamesOverlap(a, b string) bool {
	a, b = NormalizeHostname(a), NormalizeHostname(b)
	if a == b {
		return true
	}
	aw, bw := strings.HasPrefix(a, "*."), strings.HasPrefix(b, "*.")
	switch {
	case aw && bw:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return false
}

// ForeignConflicts moves to the conflicts each of own's owned and claimable names that an
// older foreign route overlaps: a route the publisher does not manage, attached to the same
// Gateway listener with a "/" match, created before the map's own route (routeCreated; nil
// when the map has no route yet, which a new route would be younger than). That is the
// gateway's own precedence between routes, so the map never claims traffic the gateway
// gives to the foreign route.
func ForeignConflicts(own Ownership, routeCreated *time.Time, foreign []Claim) Ownership {
	out := Ownership{Conflicts: slices.Clone(own.Conflicts)}
	foreign = slices.SortedFunc(slices.Values(foreign), compareClaims) // the gateway's oldest route first
	lost := func(n string) bool {
		for _, f := range foreign {
			if routeCreated != nil && !f.Created.Before(*routeCreated) {
				continue
			}
			for _, fn := range UniqueNames(f.Names) {
				if HostnamesOverlap(n, fn) {
					out.Conflicts = append(out.Conflicts, Conflict{Hostname: n,
						Owner: Owner{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Hostname: fn, Created: f.Created}})
					return true
				}
			}
		}
		return false
	}
	for _, n := range own.Owned {
		if !lost(n) {
			out.Owned = append(out.Owned, n)
		}
	}
	for _, n := range own.Claimable {
		if !lost(n) {
			out.Claimable = append(out.Claimable, n)
		}
	}
	sortConflicts(out.Conflicts)
	return out
}

// Ownership is the outcome of ResolveHostnames for one claim.
type Ownership struct {
	// Owned are the claim's journaled names no other claim takes precedence over, sorted:
	// the names the sinks serve for it.
	Owned []string
	// Claimable are its names no one holds and no older claim journaled by no one wants,
	// sorted: the pipeline grants them by journaling them; until then no sink serves them.
	Claimable []string
	// Conflicts are its other names, each with the claim that holds it, sorted by name.
	Conflicts []Conflict
}

// ResolveHostnames decides which of self's names self owns, given claims: every other
// claim that may hold or want a name overlapping one of self's (the others are ignored;
// self may be among them, and is skipped). See the rules at the top of this file. Two
// claims never both own overlapping names: between two journaled grants exactly one
// precedes the other, and an unjournaled name is never Owned.
func ResolveHostnames(self Claim, claims []Claim) Ownership {
	rivals := slices.DeleteFunc(slices.Clone(claims), func(c Claim) bool { return c.Kind == self.Kind && c.Key() == self.Key() })
	slices.SortFunc(rivals, compareClaims)
	journaled := UniqueNames(self.Journaled)
	var out Ownership
	for _, n := range UniqueNames(self.Names) {
		mine := slices.Contains(journaled, n)
		var holder, wanter *Conflict
		for _, r := range rivals {
			if holder == nil {
				if hn, ok := heldOver(n, r, self, mine); ok {
					holder = &Conflict{Hostname: n, Owner: ownerOf(r, hn)}
				}
			}
			if wanter == nil && !mine && Precedes(r, self) {
				if wn, ok := overlapping(n, r.Names); ok && !slices.Contains(UniqueNames(r.Journaled), wn) && !heldAgainst(wn, r, self, rivals) {
					wanter = &Conflict{Hostname: n, Owner: ownerOf(r, wn)}
				}
			}
		}
		switch {
		case holder != nil:
			out.Conflicts = append(out.Conflicts, *holder)
		case mine:
			out.Owned = append(out.Owned, n)
		case wanter != nil:
			out.Conflicts = append(out.Conflicts, *wanter)
		default:
			out.Claimable = append(out.Claimable, n)
		}
	}
	sortConflicts(out.Conflicts)
	return out
}

// heldOver returns the first of r's journaled names overlapping self's name n that holds
// n: any one when self did not journal n, else one granted before self's grant of n. (Every
// overlapping name is compared, so that two journaled claims never both hold: if self
// holds n over all of r's names, r's name overlapping n does not hold over self's n.)
func heldOver(n string, r, self Claim, mine bool) (string, bool) {
	for _, hn := range UniqueNames(r.Journaled) {
		if HostnamesOverlap(n, hn) && (!mine || grantPrecedes(r, hn, self, n)) {
			return hn, true
		}
	}
	return "", false
}

// heldAgainst reports whether wanter's unjournaled name wn is already lost: another claim
// (self or one of rivals) journaled a name overlapping it. Such a wanter will never be
// granted wn, so it must not hold back a younger claim (rule 3 applies to names that can
// still be granted; a neighbour's hopeless claim withholds nothing).
func heldAgainst(wn string, wanter, self Claim, rivals []Claim) bool {
	if _, ok := overlapping(wn, self.Journaled); ok {
		return true
	}
	for _, q := range rivals {
		if q.Kind == wanter.Kind && q.Key() == wanter.Key() {
			continue
		}
		if _, ok := overlapping(wn, q.Journaled); ok {
			return true
		}
	}
	return false
}

// overlapping returns the first of names (normalized, sorted) that overlaps n.
func overlapping(n string, names []string) (string, bool) {
	for _, m := range UniqueNames(names) {
		if HostnamesOverlap(n, m) {
			return m, true
		}
	}
	return "", false
}

func ownerOf(c Claim, name string) Owner {
	return Owner{Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, Hostname: name, Created: c.Created}
}

func sortConflicts(cs []Conflict) {
	slices.SortStableFunc(cs, func(a, b Conflict) int { return cmp.Compare(a.Hostname, b.Hostname) })
}

// UniqueNames are names normalized, sorted and without repeats.
func UniqueNames(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = NormalizeHostname(n); n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// GRPCName is "<service>.<namespace>", the name gRPC clients dial a map's service by.
func GRPCName(namespace, service string) string { return service + "." + namespace }

// HostIndexKeys are the index keys a name is stored under: "=" and the name, and "<" and
// every suffix after one of its dots (so "*.example.com" and "a.example.com" are both found
// under "<example.com").
func HostIndexKeys(name string) []string {
	name = NormalizeHostname(name)
	if name == "" {
		return nil
	}
	keys := []string{"=" + name}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' && i+1 < len(name) {
			keys = append(keys, "<"+name[i+1:])
		}
	}
	return keys
}

// HostLookupKeys are the index keys under which every name overlapping name is stored:
// the name itself, every wildcard over one of its parent domains, and, for a wildcard, every
// name below its domain.
func HostLookupKeys(name string) []string {
	name = NormalizeHostname(name)
	if name == "" {
		return nil
	}
	keys := []string{"=" + name}
	rest := name
	if strings.HasPrefix(name, "*.") {
		rest = name[2:]
		keys = append(keys, "<"+rest)
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' && i+1 < len(rest) {
			keys = append(keys, "=*."+rest[i+1:])
		}
	}
	return keys
}
