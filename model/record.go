package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The claim record: the publisher's own record of the hostnames it granted to a map, kept
// where tenants cannot write (ConfigMaps with no data in the publisher's namespace, one per
// map that holds a hostname grant; package publish stores and reads them). The claim journal
// in status.publisher, which a tenant that may write its map's status can forge, is only
// evidence: a hostname in it counts when this record grants it to the same map (same UID).
// Everything in this file is pure; DecodeClaimRecord takes untrusted annotations and is
// bounded.

// Labels and annotations of the claim record ConfigMaps.
const (
	// LabelClaimRecordFor is on every record and on the import marker: PublisherLabelValue of
	// the publisher that wrote it (what the publisher's informer selects).
	LabelClaimRecordFor = "publisher.trafficmap.dev/claim-record-for"
	// AnnotationClaimMap is the map's "namespace/name".
	AnnotationClaimMap = "publisher.trafficmap.dev/map"
	// AnnotationClaimUID is the map's metadata.uid.
	AnnotationClaimUID = "publisher.trafficmap.dev/map-uid"
	// AnnotationClaimGrants are the granted hostnames with their grant times:
	// "name=2006-01-02T15:04:05.000Z" entries, sorted by name, joined by ",".
	AnnotationClaimGrants = "publisher.trafficmap.dev/grants"
	// AnnotationClaimsImported is on the import marker only: when the journals of an
	// earlier version were imported (ImportGrants).
	AnnotationClaimsImported = "publisher.trafficmap.dev/claims-imported"
)

// Bounds of a record, the journal's (a record never grants more than a journal can hold).
const (
	maxRecordMapLength = 253 + 1 + 253
	maxRecordUIDLength = 128
	maxRecordGrants    = maxJournalTargets
	maxRecordGrantsLen = maxRecordGrants * (maxJournalTargetLength + 1 + len(grantTimeLayout) + 1)
)

// grantTimeLayout is a grant time's encoding: UTC, milliseconds.
const grantTimeLayout = "2006-01-02T15:04:05.000Z"

// ForeignGrant is the grant time of a name another (known) publisher journaled: it ranks
// after every grant this publisher recorded, so a map another publisher holds never takes a
// name this publisher granted to one of its maps.
var ForeignGrant = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Grant is one hostname granted to a map, and when.
type Grant struct {
	Name string
	At   time.Time
}

// ClaimRecord is the publisher's record of the hostnames granted to one map.
type ClaimRecord struct {
	Namespace, Name string
	UID             types.UID
	// Grants are sorted by name, unique, normalized.
	Grants []Grant
}

// Granted returns name's grant time and whether the record grants name.
func (r *ClaimRecord) Granted(name string) (time.Time, bool) {
	if r == nil {
		return time.Time{}, false
	}
	name = NormalizeHostname(name)
	i, ok := slices.BinarySearchFunc(r.Grants, name, func(g Grant, n string) int { return strings.Compare(g.Name, n) })
	if !ok {
		return time.Time{}, false
	}
	return r.Grants[i].At, true
}

// Names are the granted names, sorted.
func (r *ClaimRecord) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.Grants))
	for _, g := range r.Grants {
		out = append(out, g.Name)
	}
	return out
}

// NewClaimRecord is the record of grants to the map namespace/name with uid: normalized,
// sorted, the earliest time kept for a name given twice, empty names dropped.
func NewClaimRecord(namespace, name string, uid types.UID, grants []Grant) ClaimRecord {
	r := ClaimRecord{Namespace: namespace, Name: name, UID: uid}
	at := map[string]time.Time{}
	for _, g := range grants {
		n := NormalizeHostname(g.Name)
		if n == "" {
			continue
		}
		if t, ok := at[n]; !ok || g.At.Before(t) {
			at[n] = g.At
		}
	}
	for n, t := range at {
		r.Grants = append(r.Grants, Grant{Name: n, At: t.UTC().Truncate(time.Millisecond)})
	}
	slices.SortFunc(r.Grants, func(a, b Grant) int { return strings.Compare(a.Name, b.Name) })
	return r
}

// ClaimRecordName is the name of the record of map namespace/name for publisher: derived
// from hashes, so it is a valid ConfigMap name whatever the inputs, and two publishers'
// records never share a name.
func ClaimRecordName(publisher, namespace, name string) string {
	p := sha256.Sum256([]byte(publisher))
	m := sha256.Sum256([]byte(namespace + "/" + name))
	return "tm-claim-" + hex.EncodeToString(p[:5]) + "-" + hex.EncodeToString(m[:12])
}

// ClaimMarkerName is the name of publisher's import marker (ImportGrants).
func ClaimMarkerName(publisher string) string {
	p := sha256.Sum256([]byte(publisher))
	return "tm-claim-" + hex.EncodeToString(p[:5]) + "-imported"
}

// PublisherLabelValue is LabelClaimRecordFor's value for publisher (a hash: a publisher name
// may be longer than a label value).
func PublisherLabelValue(publisher string) string {
	p := sha256.Sum256([]byte(publisher))
	return hex.EncodeToString(p[:20])
}

// EncodeClaimRecord is r's annotations.
func EncodeClaimRecord(r ClaimRecord) map[string]string {
	entries := make([]string, 0, len(r.Grants))
	for _, g := range r.Grants {
		entries = append(entries, g.Name+"="+g.At.UTC().Format(grantTimeLayout))
	}
	return map[string]string{
		AnnotationClaimMap:    r.Namespace + "/" + r.Name,
		AnnotationClaimUID:    string(r.UID),
		AnnotationClaimGrants: strings.Join(entries, ","),
	}
}

// ErrInvalidClaimRecord marks annotations that are no valid claim record.
var ErrInvalidClaimRecord = errors.New("invalid claim record")

// DecodeClaimRecord reads a record from its annotations (untrusted: bounded, every entry
// checked). A record with any invalid part is refused whole.
func DecodeClaimRecord(annotations map[string]string) (ClaimRecord, error) {
	key := annotations[AnnotationClaimMap]
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || len(key) > maxRecordMapLength || strings.Contains(name, "/") {
		return ClaimRecord{}, fmt.Errorf("%w: annotation %s %.80q: want namespace/name", ErrInvalidClaimRecord, AnnotationClaimMap, key)
	}
	uid := annotations[AnnotationClaimUID]
	if uid == "" || len(uid) > maxRecordUIDLength {
		return ClaimRecord{}, fmt.Errorf("%w: annotation %s: want a uid of 1 to %d bytes", ErrInvalidClaimRecord, AnnotationClaimUID, maxRecordUIDLength)
	}
	r := ClaimRecord{Namespace: ns, Name: name, UID: types.UID(uid)}
	raw := annotations[AnnotationClaimGrants]
	if len(raw) > maxRecordGrantsLen {
		return ClaimRecord{}, fmt.Errorf("%w: annotation %s is %d bytes, more than %d", ErrInvalidClaimRecord, AnnotationClaimGrants, len(raw), maxRecordGrantsLen)
	}
	if raw == "" {
		return r, nil
	}
	entries := strings.Split(raw, ",")
	if len(entries) > maxRecordGrants {
		return ClaimRecord{}, fmt.Errorf("%w: %d grants, more than %d", ErrInvalidClaimRecord, len(entries), maxRecordGrants)
	}
	for _, e := range entries {
		n, at, ok := strings.Cut(e, "=")
		t, err := time.Parse(grantTimeLayout, at)
		switch {
		case !ok || n == "" || n != NormalizeHostname(n) || len(n) > maxJournalTargetLength:
			return ClaimRecord{}, fmt.Errorf("%w: grant %.80q: want a normalized hostname=time", ErrInvalidClaimRecord, e)
		case err != nil:
			return ClaimRecord{}, fmt.Errorf("%w: grant %.80q: time: want %s", ErrInvalidClaimRecord, e, grantTimeLayout)
		case len(r.Grants) > 0 && r.Grants[len(r.Grants)-1].Name >= n:
			return ClaimRecord{}, fmt.Errorf("%w: grant %.80q: names must be sorted and unique", ErrInvalidClaimRecord, e)
		}
		r.Grants = append(r.Grants, Grant{Name: n, At: t})
	}
	return r, nil
}
