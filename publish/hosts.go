package publish

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/trafficmap/publisher/publish/sink"
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
// Among the claims on overlapping names the oldest wins: the TrafficMap with the older
// metadata.creationTimestamp, ties broken by namespace/name (Gateway API's route
// precedence, applied to the maps because both sinks must decide alike and the xDS sink
// has no route). A name is granted to a claim when it overlaps no name already granted to an
// older claim; a name lost to an older claim is served for no one but that owner, by either
// sink.

// Claim is one map's claim on names.
type Claim struct {
	// Kind is "TrafficMap", or "HTTPRoute" for a route the publisher does not manage.
	Kind string
	// Namespace and Name identify the claimant.
	Namespace, Name string
	// Created is the claimant's metadata.creationTimestamp.
	Created time.Time
	// Names are the names it claims.
	Names []string
}

// Key is the claimant's namespace/name.
func (c Claim) Key() string { return c.Namespace + "/" + c.Name }

// Precedes reports whether a wins over b: a is older, or as old and first by
// namespace/name.
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

// ForeignConflicts moves to the conflicts each of own's names that an older foreign route
// overlaps: a route the publisher does not manage, attached to the same Gateway listener
// with a "/" match, created before the map's own route (routeCreated; nil when the map has
// no route yet, which a new route would be younger than). That is the gateway's own
// precedence between routes, so the map never claims traffic the gateway gives to the
// foreign route.
func ForeignConflicts(own Ownership, routeCreated *time.Time, foreign []Claim) Ownership {
	out := Ownership{Conflicts: slices.Clone(own.Conflicts)}
	foreign = slices.SortedFunc(slices.Values(foreign), compareClaims) // the gateway's oldest route first
	for _, n := range own.Owned {
		lost := false
		for _, f := range foreign {
			if routeCreated != nil && !f.Created.Before(*routeCreated) {
				continue
			}
			for _, fn := range uniqueNames(f.Names) {
				if HostnamesOverlap(n, fn) {
					out.Conflicts = append(out.Conflicts, sink.Conflict{Hostname: n,
						Owner: sink.Owner{Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, Hostname: fn, Created: f.Created}})
					lost = true
					break
				}
			}
			if lost {
				break
			}
		}
		if !lost {
			out.Owned = append(out.Owned, n)
		}
	}
	slices.SortFunc(out.Conflicts, func(a, b sink.Conflict) int { return cmp.Compare(a.Hostname, b.Hostname) })
	return out
}

// Ownership is the outcome of ResolveHostnames for one claim.
type Ownership struct {
	// Owned are the claim's names no older claim overlaps, sorted.
	Owned []string
	// Conflicts are its other names, each with the claim that holds it, sorted by name.
	Conflicts []sink.Conflict
}

// ResolveHostnames decides which of self's names self owns, given claims: every claim that
// may hold a name overlapping one of self's (the others are ignored; self may be among
// them). The result is the same as granting names oldest claim first over every claim
// there is, as long as claims holds each older claim that overlaps self or, recursively,
// such a claim.
func ResolveHostnames(self Claim, claims []Claim) Ownership {
	order := slices.Clone(claims)
	order = slices.DeleteFunc(order, func(c Claim) bool { return c.Kind == self.Kind && c.Key() == self.Key() })
	order = append(order, self)
	slices.SortFunc(order, compareClaims)
	type grant struct {
		name  string
		owner Claim
	}
	var granted []grant
	for _, c := range order {
		isSelf := c.Kind == self.Kind && c.Key() == self.Key()
		var mine []grant
		var out Ownership
		for _, n := range uniqueNames(c.Names) {
			holder := -1
			for i, g := range granted {
				if HostnamesOverlap(n, g.name) {
					holder = i
					break
				}
			}
			if holder < 0 {
				mine = append(mine, grant{n, c})
				out.Owned = append(out.Owned, n)
				continue
			}
			g := granted[holder]
			out.Conflicts = append(out.Conflicts, sink.Conflict{Hostname: n,
				Owner: sink.Owner{Kind: g.owner.Kind, Namespace: g.owner.Namespace, Name: g.owner.Name, Hostname: g.name, Created: g.owner.Created}})
		}
		if isSelf {
			return out
		}
		granted = append(granted, mine...)
	}
	return Ownership{} // not reached: self is in order
}

// uniqueNames are names normalized, sorted and without repeats.
func uniqueNames(names []string) []string {
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

// hostIndexKeys are the index keys a name is stored under: "=" and the name, and "<" and
// every suffix after one of its dots (so "*.example.com" and "a.example.com" are both found
// under "<example.com").
func hostIndexKeys(name string) []string {
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

// hostLookupKeys are the index keys under which every name overlapping name is stored:
// the name itself, every wildcard over one of its parent domains, and, for a wildcard, every
// name below its domain.
func hostLookupKeys(name string) []string {
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
