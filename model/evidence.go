package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model/untrusted"
)

// Reading a claim journal. The journal (status.publisher.claimedTargets) is written by the
// publisher, but a tenant that may write its map's status may write it too; so it is
// evidence, never authority. Each entry of a journal that names this publisher counts only
// when:
//
//   - it is "grpc:<service>.<namespace>", the map's own gRPC name (granted with the map:
//     its grant time is the map's creationTimestamp, which the API server sets); or
//   - it is "hostname:<name>", the claim policy lets the map's namespace claim name
//     (ClaimPolicy: the gRPC-name rule and the entitlements), and the publisher's claim
//     record (record.go) grants name to this map, same UID: its grant time is the record's.
//
// Every other entry is ignored, with a reason (Ignored), and counts for no one. Precedence
// between two counted claims goes by grant time (ResolveHostnames), so a claim cannot be
// backdated: nothing a tenant writes sets a grant time.

// IgnoreReason says why a journal entry does not count.
type IgnoreReason string

// Why journal entries are ignored.
const (
	// IgnoredMalformed: not "grpc:<name>" or "hostname:<name>", or past the journal's bound.
	IgnoredMalformed IgnoreReason = "Malformed"
	// IgnoredForeignGRPC: a grpc: entry that is not the map's own "<service>.<namespace>".
	IgnoredForeignGRPC IgnoreReason = "ForeignGRPCName"
	// IgnoredNotEntitled: the claim policy does not let the map's namespace claim the name.
	IgnoredNotEntitled IgnoreReason = "NotEntitled"
	// IgnoredNotGranted: the publisher's claim record does not grant the name to this map.
	IgnoredNotGranted IgnoreReason = "NotGranted"
	// IgnoredOverlap: on import, an older map's journal holds an overlapping name.
	IgnoredOverlap IgnoreReason = "Overlap"
	// IgnoredUnknownPublisher: the journal names a publisher that is not a known one.
	IgnoredUnknownPublisher IgnoreReason = "UnknownPublisher"
)

// IgnoreReasons are every IgnoreReason, for metrics.
var IgnoreReasons = []IgnoreReason{IgnoredMalformed, IgnoredForeignGRPC, IgnoredNotEntitled, IgnoredNotGranted, IgnoredOverlap, IgnoredUnknownPublisher}

// Ignored is one journal entry that does not count, and why.
type Ignored struct {
	// Target is the entry as written (shortened to 80 bytes).
	Target string
	Reason IgnoreReason
	// Rule says the rule, readable.
	Rule string
}

// Evidence is what a map's claim journal counts for.
type Evidence struct {
	// Journaled are the names that count, normalized and sorted.
	Journaled []string
	// Granted is each counted name's grant time.
	Granted map[string]time.Time
	// Ignored are the entries that do not count, in journal order.
	Ignored []Ignored
}

// grantLookup says whether name is granted to tm and when.
type grantLookup func(name string) (time.Time, bool)

// ReadJournal is the evidence of tm's journal when it names publisher (else none): its
// entries read against rec, the publisher's record for the map (nil: none), under policy.
func ReadJournal(tm *v1beta1.TrafficMap, publisher string, rec *ClaimRecord, policy ClaimPolicy) Evidence {
	if rec != nil && (rec.UID != tm.UID || rec.Namespace != tm.Namespace || rec.Name != tm.Name) {
		rec = nil // the record of an earlier map of that name
	}
	return readJournal(tm, publisher, policy, rec.Granted, "the publisher's claim record grants it to this trafficmap (uid "+string(tm.UID)+")")
}

// LegacyEvidence is the evidence of tm's journal when it names publisher, before the
// journals of an earlier version were imported (ImportGrants): every entry the policy
// allows counts, granted at the map's creationTimestamp (the old rule: the older map wins).
// This trusts the journal; it is used only in the upgrade window.
func LegacyEvidence(tm *v1beta1.TrafficMap, publisher string, policy ClaimPolicy) Evidence {
	at := tm.CreationTimestamp.Time
	return readJournal(tm, publisher, policy, func(string) (time.Time, bool) { return at, true }, "")
}

// ForeignEvidence is the evidence of the journal of tm held by another known publisher: the
// entries the policy allows, granted at ForeignGrant (after every grant this publisher
// recorded).
func ForeignEvidence(tm *v1beta1.TrafficMap, policy ClaimPolicy) Evidence {
	j := tm.Status.Publisher
	if j == nil {
		return Evidence{}
	}
	return readJournal(tm, j.PublisherName, policy, func(string) (time.Time, bool) { return ForeignGrant, true }, "")
}

// UnknownEvidence is the evidence of a journal naming a publisher that is not known: none;
// every entry is ignored.
func UnknownEvidence(tm *v1beta1.TrafficMap) Evidence {
	var ev Evidence
	j := tm.Status.Publisher
	if j == nil {
		return ev
	}
	for i, t := range j.ClaimedTargets {
		if i >= maxJournalTargets {
			break
		}
		ev.Ignored = append(ev.Ignored, Ignored{Target: short(t), Reason: IgnoredUnknownPublisher,
			Rule: fmt.Sprintf("status.publisher.publisherName %q is not a known publisher (this publisher's name, --take-over-from, --known-publishers or %q)", short(j.PublisherName), OMEPublisherName)})
	}
	return ev
}

func readJournal(tm *v1beta1.TrafficMap, publisher string, policy ClaimPolicy, granted grantLookup, grantRule string) Evidence {
	var ev Evidence
	j := tm.Status.Publisher
	if j == nil || j.PublisherName != publisher {
		return ev
	}
	own := NormalizeHostname(GRPCName(tm.Namespace, tm.Spec.Service))
	ev.Granted = map[string]time.Time{}
	ignore := func(t string, r IgnoreReason, rule string) {
		ev.Ignored = append(ev.Ignored, Ignored{Target: short(t), Reason: r, Rule: rule})
	}
	for i, t := range j.ClaimedTargets {
		if i >= maxJournalTargets {
			ignore(t, IgnoredMalformed, fmt.Sprintf("a journal holds at most %d targets", maxJournalTargets))
			continue
		}
		kind, raw, ok := strings.Cut(t, ":")
		n := NormalizeHostname(raw)
		switch {
		case !ok || n == "" || len(t) > maxJournalTargetLength || kind+":" != TargetGRPC && kind+":" != TargetHostname:
			ignore(t, IgnoredMalformed, "an entry is grpc:<name> or hostname:<name>")
		case n == own:
			ev.Journaled = append(ev.Journaled, n)
			ev.Granted[n] = tm.CreationTimestamp.Time
		case kind+":" == TargetGRPC:
			ignore(t, IgnoredForeignGRPC, fmt.Sprintf("a grpc: entry counts only for the map's own gRPC name %s", own))
		default:
			if refused := policy.Check(tm.Namespace, n); refused != nil {
				ignore(t, IgnoredNotEntitled, refused.Rule)
				continue
			}
			at, ok := granted(n)
			if !ok {
				ignore(t, IgnoredNotGranted, "a hostname counts only when "+grantRule)
				continue
			}
			ev.Journaled = append(ev.Journaled, n)
			ev.Granted[n] = at
		}
	}
	ev.Journaled = UniqueNames(ev.Journaled)
	return ev
}

// short is s (an entry, a publisher name: text a tenant chose) cut to 80 bytes at a UTF-8
// boundary, for messages, which quote it.
func short(s string) string { return untrusted.Cut(s, 80) }

// maxIgnoredListed bounds the entries IgnoredMessage lists (a journal holds up to 128).
const maxIgnoredListed = 8

// IgnoredMessage says which of tm's journal entries were ignored and why, naming the object
// and the field; "" when none were. It lists at most 8 entries, each quoted, and counts
// the others.
func IgnoredMessage(tm *v1beta1.TrafficMap, ignored []Ignored) string {
	if len(ignored) == 0 {
		return ""
	}
	parts := make([]string, 0, min(len(ignored), maxIgnoredListed)+1)
	for _, ig := range ignored[:min(len(ignored), maxIgnoredListed)] {
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", untrusted.Quote(ig.Target, untrusted.MaxID), ig.Reason, ig.Rule))
	}
	if more := len(ignored) - maxIgnoredListed; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return fmt.Sprintf("trafficmap %s/%s status.publisher.claimedTargets: entries ignored, they grant no name: %s",
		tm.Namespace, tm.Name, strings.Join(parts, "; "))
}

// ImportGrants imports the journals of maps written by an earlier version (which kept no
// claim record) into records, once, on upgrade: each map's journal naming publisher, read
// under policy (LegacyEvidence); overlapping names go to the older map, the old rule
// (creationTimestamp, then namespace/name), compared within a namespace when scoped. Each
// hostname kept is granted at the map's creationTimestamp; a map's own gRPC name needs no
// record. It returns the records (maps with hostnames only, by key) and what each map's
// journal had ignored.
func ImportGrants(maps []*v1beta1.TrafficMap, publisher string, policy ClaimPolicy, scoped bool) ([]ClaimRecord, map[string][]Ignored) {
	maps = slices.Clone(maps)
	slices.SortFunc(maps, func(a, b *v1beta1.TrafficMap) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	type kept struct{ ns, key, name string }
	var held []kept
	index := map[string][]int{} // HostIndexKeys of a held name -> its places in held
	// firstHolder is the place in held of the first name kept that overlaps n (in ns when
	// scoped), -1 for none: found through the index, not by comparing every name kept.
	firstHolder := func(ns, n string) int {
		first := -1
		for _, k := range HostLookupKeys(n) {
			for _, i := range index[k] {
				if (first < 0 || i < first) && (!scoped || held[i].ns == ns) && HostnamesOverlap(held[i].name, n) {
					first = i
				}
			}
		}
		return first
	}
	var records []ClaimRecord
	ignored := map[string][]Ignored{}
	for _, tm := range maps {
		if tm.DeletionTimestamp != nil {
			continue
		}
		key := KeyOf(tm).String()
		ev := LegacyEvidence(tm, publisher, policy)
		ignored[key] = ev.Ignored
		own := NormalizeHostname(GRPCName(tm.Namespace, tm.Spec.Service))
		var grants []Grant
		var mine []kept
		for _, n := range ev.Journaled {
			if i := firstHolder(tm.Namespace, n); i >= 0 {
				ignored[key] = append(ignored[key], Ignored{Target: short(n), Reason: IgnoredOverlap,
					Rule: fmt.Sprintf("on import, the older trafficmap %s's journal holds the overlapping name %s", held[i].key, held[i].name)})
				continue
			}
			mine = append(mine, kept{ns: tm.Namespace, key: key, name: n})
			if n != own {
				grants = append(grants, Grant{Name: n, At: tm.CreationTimestamp.Time})
			}
		}
		for _, k := range mine {
			for _, ik := range HostIndexKeys(k.name) {
				index[ik] = append(index[ik], len(held))
			}
			held = append(held, k)
		}
		if len(grants) > 0 {
			records = append(records, NewClaimRecord(tm.Namespace, tm.Name, tm.UID, grants))
		}
		if len(ignored[key]) == 0 {
			delete(ignored, key)
		}
	}
	return records, ignored
}
