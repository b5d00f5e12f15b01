package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The claim journal: status.publisher of each TrafficMap (OME's TrafficMapPublisherStatus),
// the persisted record of which names a map was granted. Everything about it lives here:
//
//   - the typed targets ("grpc:<service>.<namespace>", "hostname:<name>") and how names are
//     read back from a map's journal (JournaledNames);
//   - the journal a reconcile writes (nextJournal), before any sink serves a newly granted
//     name, and the pruned journal it writes after the sinks applied the plan (a name the
//     map no longer claims leaves the journal only then, so no other map is granted a
//     name while this one may still serve it);
//   - lastPositive, the last plan fully in place with a positive weight, written with the
//     True condition that says so;
//   - the claim table (claimTable), the one lock that makes granting a name and journaling
//     it one step for the workers of this process.
//
// Only the journal of this publisher (publisherName, Config.PublisherName) counts; a journal
// written by another publisher holds nothing here and is replaced on the first grant.

// Target prefixes of status.publisher.claimedTargets.
const (
	// TargetGRPC prefixes a map's "<service>.<namespace>" name.
	TargetGRPC = "grpc:"
	// TargetHostname prefixes a map's hostname (annotation or --host-template).
	TargetHostname = "hostname:"
)

// Bounds of the journal (the CRD's: MaxTrafficMapPublisherTargets and
// MaxTrafficMapPublisherTargetLength).
const (
	maxJournalTargets      = 128
	maxJournalTargetLength = 512
)

// JournaledNames are the names tm's journal holds, normalized and sorted, when the journal
// is publisher's ("" accepts any publisher's, for readers that do not know the name).
func JournaledNames(tm *v1beta1.TrafficMap, publisher string) []string {
	j := tm.Status.Publisher
	if j == nil || publisher != "" && j.PublisherName != publisher {
		return nil
	}
	names := make([]string, 0, len(j.ClaimedTargets))
	for _, t := range j.ClaimedTargets {
		if _, n, ok := strings.Cut(t, ":"); ok {
			names = append(names, n)
		}
	}
	return uniqueNames(names)
}

// claimTargets are the journal targets of names, typed by grpc (the map's gRPC name),
// sorted and unique.
func claimTargets(grpc string, names []string) []string {
	grpc = NormalizeHostname(grpc)
	out := make([]string, 0, len(names))
	for _, n := range uniqueNames(names) {
		if n == grpc {
			out = append(out, TargetGRPC+n)
		} else {
			out = append(out, TargetHostname+n)
		}
	}
	slices.Sort(out)
	return out
}

// journalOf is a journal holding names (nil when there are none and no digest), under
// publisher, with digest as observedOptionsDigest. It fails, a user error, when the journal
// would exceed the CRD's bounds.
func journalOf(tm *v1beta1.TrafficMap, publisher, digest string, names []string) (*v1beta1.TrafficMapPublisherStatus, error) {
	targets := claimTargets(GRPCName(tm.Namespace, tm.Spec.Service), names)
	if len(targets) > maxJournalTargets {
		return nil, &userError{reason: ReasonInvalidTrafficMap, message: fmt.Sprintf(
			"trafficmap %s/%s would claim %d names in status.publisher.claimedTargets, more than the %d allowed; the published state is left as it was",
			tm.Namespace, tm.Name, len(targets), maxJournalTargets)}
	}
	for _, t := range targets {
		if len(t) > maxJournalTargetLength {
			return nil, &userError{reason: ReasonInvalidTrafficMap, message: fmt.Sprintf(
				"trafficmap %s/%s claims a name longer than status.publisher.claimedTargets allows (%d bytes): %.64s...",
				tm.Namespace, tm.Name, maxJournalTargetLength, t)}
		}
	}
	j := &v1beta1.TrafficMapPublisherStatus{PublisherName: publisher, ObservedOptionsDigest: digest}
	if len(targets) > 0 {
		j.ClaimedTargets = targets
	}
	if prev := tm.Status.Publisher; prev != nil && prev.PublisherName == publisher {
		j.LastPositive = prev.LastPositive // replaced only by withLastPositive
	}
	return j, nil
}

// lastPositive is status.publisher.lastPositive for a plan fully in place (Published True)
// with a positive weight: the map and source generations it was built from, its shape's
// digest (the options digest, the hostnames and each target's endpoint: a retained plan is
// replayable only while these still match) and each entry cluster's effective weight. It
// is nil when the plan has no positive weight or does not fit the schema (no source
// generation, more than 128 targets).
func lastPositive(tm *v1beta1.TrafficMap, p *model.Plan, optionsDigest string) *v1beta1.TrafficMapPublisherLastPositive {
	res := p.Result
	if res.AllZero() || tm.Generation < 1 || tm.Spec.ObservedISVCGeneration < 1 || len(res.Entries) > maxJournalTargets {
		return nil
	}
	lp := &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: tm.Generation, ObservedISVCGeneration: tm.Spec.ObservedISVCGeneration}
	shape := []string{"options=" + optionsDigest, "hostnames=" + strings.Join(p.Hostnames, ",")}
	for _, e := range res.Entries {
		lp.Targets = append(lp.Targets, v1beta1.TrafficMapPublisherTarget{Target: e.Cluster, Weight: int64(e.Effective)})
		shape = append(shape, "target="+e.Cluster+"="+e.Endpoint.URL)
	}
	lp.PlanCompatibilityDigest = OptionsDigest(shape)
	return lp
}

// OptionsDigest is observedOptionsDigest: the sha256 of the publisher options that shape
// a map's publication, given as "key=value" lines, sorted.
func OptionsDigest(options []string) string {
	lines := slices.Sorted(slices.Values(options))
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// claimTable is the claim table of this process: the names it granted to each map, from
// the grant until the map's journal drops them or the map is deleted. A reconcile's plan
// sees the journals in the informer cache, which may not yet show a grant another worker
// just made; reserve consults this table under its lock before a grant, so two workers
// never grant overlapping names to two maps. All its state is guarded by mu.
type claimTable struct {
	mu     sync.Mutex
	holder map[string]string   // granted name -> map key
	index  map[string][]string // hostIndexKeys of a granted name -> granted names
	byKey  map[string][]string // map key -> its granted names
}

func newClaimTable() *claimTable {
	return &claimTable{holder: map[string]string{}, index: map[string][]string{}, byKey: map[string][]string{}}
}

// tableHolder is the map that holds a name in the claim table.
type tableHolder struct {
	Key, Name string
}

// reserve grants key each of names that no other map holds in the table (no overlapping
// name), and returns the granted ones, those of them key did not hold before (added: what
// to release should the journal write fail) and, for the others, who holds them.
func (t *claimTable) reserve(key string, names []string) (granted, added []string, held map[string]tableHolder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range uniqueNames(names) {
		if h, ok := t.overlapping(key, n); ok {
			if held == nil {
				held = map[string]tableHolder{}
			}
			held[n] = h
			continue
		}
		granted = append(granted, n)
		if t.holder[n] == key {
			continue
		}
		added = append(added, n)
		t.holder[n] = key
		t.byKey[key] = append(t.byKey[key], n)
		for _, k := range hostIndexKeys(n) {
			t.index[k] = append(t.index[k], n)
		}
	}
	return granted, added, held
}

// overlapping returns a name another map than key holds that overlaps n.
func (t *claimTable) overlapping(key, n string) (tableHolder, bool) {
	for _, k := range hostLookupKeys(n) {
		for _, m := range t.index[k] {
			if h := t.holder[m]; h != key && HostnamesOverlap(n, m) {
				return tableHolder{Key: h, Name: m}, true
			}
		}
	}
	return tableHolder{}, false
}

// release drops key's grants of names (after its journal dropped them, or its journal
// write failed).
func (t *claimTable) release(key string, names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range uniqueNames(names) {
		if t.holder[n] != key {
			continue
		}
		delete(t.holder, n)
		for _, k := range hostIndexKeys(n) {
			t.index[k] = slices.DeleteFunc(t.index[k], func(m string) bool { return m == n })
			if len(t.index[k]) == 0 {
				delete(t.index, k)
			}
		}
		t.byKey[key] = slices.DeleteFunc(t.byKey[key], func(m string) bool { return m == n })
	}
	if len(t.byKey[key]) == 0 {
		delete(t.byKey, key)
	}
}

// forget drops every grant of a deleted map.
func (t *claimTable) forget(key string) {
	t.mu.Lock()
	names := slices.Clone(t.byKey[key])
	t.mu.Unlock()
	t.release(key, names)
}
