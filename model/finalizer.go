package model

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

// The ordered teardown of a deleted map (OME's contract, reference 1.1 and 5.5): OME's
// publisher finalizer holds the map until the publisher removed what it published for
// it, in order: every weight 0 (and confirmed, within the teardown timeout), then the
// route, Services and xDS resources (the xDS removal confirmed, within the timeout), then
// the finalizer goes. The decisions are here, pure; the writes are the pipeline's.

// Finalizer is OME's publisher finalizer: it holds a TrafficMap the publisher wrote
// anything for until its published state is removed.
const Finalizer = "ome.io/trafficmap-publisher"

// FinalizingMessage is the Published condition's message while a map is torn down.
const FinalizingMessage = "removing published state: weights 0, then the route and xDS resources"

// HasFinalizer reports whether tm carries Finalizer.
func HasFinalizer(tm *v1beta1.TrafficMap) bool { return slices.Contains(tm.Finalizers, Finalizer) }

// NeedsFinalizer reports whether Finalizer must be added to tm before the publisher's next
// external write for it (its claim journal, an announce, a sink's Apply): tm is not being
// deleted (the API server takes no new finalizer then) and does not carry it yet. The
// pipeline asks only once every enabled sink passed the map's plan (a map refused before
// any write, or seen on a replica that does not lead, never gets it).
func NeedsFinalizer(tm *v1beta1.TrafficMap) bool {
	return tm.DeletionTimestamp == nil && !HasFinalizer(tm)
}

// Finalizing reports whether tm is a deleted map this publisher tears down in order: it is
// being deleted, carries Finalizer, and no other publisher holds it by the holder rule
// (HolderOf(tm, p).Held() is false): its claim journal is absent or p.Self's, or names a
// publisher whose map this one adopts (neither claims nor a last positive plan: a retired
// publisher's) or takes over (--take-over-from). The one holder rule decides the live map
// and its teardown alike, so a map handed over is never left with a finalizer no publisher
// removes. A deleted map without Finalizer (never written for) is removed at once; one
// another publisher holds is that publisher's to tear down (TornDownByOther).
func Finalizing(tm *v1beta1.TrafficMap, p Publishers) bool {
	if tm == nil || tm.DeletionTimestamp == nil || !HasFinalizer(tm) {
		return false
	}
	return !HolderOf(tm, p).Held()
}

// WithoutFinalizer is tm's finalizers without Finalizer, in their order (every other
// finalizer stays).
func WithoutFinalizer(tm *v1beta1.TrafficMap) []string {
	return slices.DeleteFunc(slices.Clone(tm.Finalizers), func(f string) bool { return f == Finalizer })
}

// Zeroed is p with every entry's effective weight 0 and everything else as it is (the
// same names, entries and endpoints), so a sink handed it keeps every route, listener and
// cluster of the map and routes nothing to it. The teardown hands it to every sink before
// it removes anything.
func Zeroed(p Plan) Plan {
	entries := slices.Clone(p.Result.Entries)
	for i := range entries {
		entries[i].Effective = 0
	}
	p.Result.Entries = entries
	return p
}

// TeardownPlan is the plan a map being deleted is torn down with: its plan at weight 0
// (Zeroed), except that it yields at once every hostname another map claims (others: the
// other maps' claims, as in Gathered.Claims), as if it were gone: such a name moves to the
// conflicts, held by that map, so no sink serves it for the deleted map any more and the
// other map publishes it without waiting for the teardown.
func TeardownPlan(pl Plan, others []Claim) Plan {
	z := Zeroed(pl)
	var kept []string
	for _, h := range z.Hostnames {
		if c, n, ok := claimedBy(h, z.Key(), others); ok {
			z.Conflicts = append(slices.Clone(z.Conflicts), Conflict{Hostname: h, Owner: ownerOf(c, n)})
			continue
		}
		kept = append(kept, h)
	}
	z.Hostnames = kept
	sortConflicts(z.Conflicts)
	return z
}

// ReplacedNames is the plan p of a map this publisher replaces (HoldAdopt, HoldTakeOver:
// its claim journal is another publisher's, so none of its names is journaled for this one)
// with the names no one else holds (the Unjournaled conflicts) as its own, as the hand-over
// would have granted them: a map handed over and deleted before it was claimed is torn down
// with the names the other publisher's route carries, so that route is set to weight 0 in
// place before it is removed. TeardownPlan then gives up every name another map claims.
func ReplacedNames(p Plan) Plan {
	grpc := NormalizeHostname(GRPCName(p.Namespace, p.Service))
	hosts := slices.Clone(p.Hostnames)
	var kept []Conflict
	for _, c := range p.Conflicts {
		switch {
		case !c.Unjournaled:
			kept = append(kept, c)
		case c.Hostname != grpc && !slices.Contains(hosts, c.Hostname):
			hosts = append(hosts, c.Hostname)
		}
	}
	p.Hostnames, p.Conflicts = hosts, kept
	return p
}

// FallbackTeardownPlan is the zero plan of tm made from the map alone, for a map being
// deleted whose plan cannot be made any more (its InferenceService is gone, or one of its
// inputs fails): every entry of its spec at weight 0, the hostname among journaled (the
// names its claim journal holds that count: Evidence.Journaled) as its hostname, and its gRPC name withheld unless the journal holds
// it, so no sink is handed a name the map does not own. Drains, taints and tolerations do
// not matter at weight 0 and are left out. It fails when the spec's entries are invalid.
func FallbackTeardownPlan(tm *v1beta1.TrafficMap, journaled []string) (Plan, error) {
	res, err := weights.Compute(weights.Input{Entries: entries(tm)})
	if err != nil {
		return Plan{}, fmt.Errorf("trafficmap %s/%s spec.entries: %w", tm.Namespace, tm.Name, err)
	}
	p := Zeroed(Plan{Namespace: tm.Namespace, Name: tm.Name, UID: string(tm.UID), Generation: tm.Generation,
		Service: tm.Spec.Service, Result: res})
	grpc := NormalizeHostname(GRPCName(tm.Namespace, tm.Spec.Service))
	journaled = UniqueNames(journaled)
	for _, n := range journaled {
		if n != grpc && len(p.Hostnames) == 0 {
			p.GlobalHost, p.Hostnames = n, []string{n}
		}
	}
	if !slices.Contains(journaled, grpc) {
		p.Conflicts = []Conflict{{Hostname: grpc, Unjournaled: true}}
	}
	return p, nil
}

// claimedBy is the first of others (not self) that claims a name overlapping host, and that
// name.
func claimedBy(host string, self types.NamespacedName, others []Claim) (Claim, string, bool) {
	for _, c := range others {
		if c.Key() == self {
			continue
		}
		for _, n := range c.Names {
			if HostnamesOverlap(host, n) {
				return c, n, true
			}
		}
	}
	return Claim{}, "", false
}

// TeardownWait judges one step of the teardown from the sinks' confirmations of it (the
// zero plan in place, then the removal confirmed): done once every sink is InPlace or
// Refused (a sink that cannot carry the step has nothing to wait for), or once the wait
// expired (timedOut, when some sink still waits). waiting is the first confirmation still
// waiting (Pending or Rejected), nil when none.
func TeardownWait(confs []Confirmation, expired bool) (done, timedOut bool, waiting *Confirmation) {
	for i := range confs {
		if s := confs[i].State; s != InPlace && s != Refused {
			waiting = &confs[i]
			break
		}
	}
	switch {
	case waiting == nil:
		return true, false, nil
	case expired:
		return true, true, waiting
	}
	return false, false, waiting
}
