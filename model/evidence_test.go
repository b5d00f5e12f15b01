package model

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model/untrusted"
)

// journaledMap is map ns/name (service name) created age minutes after t0, whose journal,
// naming publisher, holds targets.
func journaledMap(ns, name string, age int, publisher string, targets ...string) *v1beta1.TrafficMap {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid"),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))}, Spec: v1beta1.TrafficMapSpec{Service: name}}
	if publisher != "" {
		tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: publisher, ClaimedTargets: targets}
	}
	return tm
}

// claimOf is tm's claim on names, with its evidence.
func claimOf(tm *v1beta1.TrafficMap, ev Evidence, names ...string) Claim {
	return Claim{Kind: KindTrafficMap, Namespace: tm.Namespace, Name: tm.Name, Created: tm.CreationTimestamp.Time,
		Names: append([]string{GRPCName(tm.Namespace, tm.Spec.Service)}, names...), Journaled: ev.Journaled, Granted: ev.Granted}
}

// D1: a tenant that writes its map's status journals names it was never granted (prod's
// gRPC name, a wildcard over prod's gRPC names, *.com, prod's hostname), and its map is
// older than prod/chat, which would have won the old rule (the older journaled map wins).
// Nothing in it counts: evil/x gets no name, prod/chat keeps chat.example.com.
func TestForgedJournalGrantsNothing(t *testing.T) {
	policy := ClaimPolicy{GRPCNames: true}
	prod := journaledMap("prod", "chat", 5, "p", "grpc:chat.prod", "hostname:chat.example.com")
	prodRec := NewClaimRecord("prod", "chat", prod.UID, []Grant{{Name: "chat.example.com", At: t0.Add(6 * time.Minute)}})
	evil := journaledMap("evil", "x", 0, "p", "grpc:x.evil", "grpc:chat.prod", "hostname:chat.prod", "hostname:*.prod",
		"hostname:*.com", "hostname:chat.example.com", "bogus")

	prodEv := ReadJournal(prod, "p", &prodRec, policy)
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, prodEv.Journaled)
	assert.Empty(t, prodEv.Ignored)

	evilEv := ReadJournal(evil, "p", nil, policy)
	assert.Equal(t, []string{"x.evil"}, evilEv.Journaled, "only its own gRPC name counts")
	reasons := map[string]IgnoreReason{}
	for _, ig := range evilEv.Ignored {
		reasons[ig.Target] = ig.Reason
	}
	assert.Equal(t, map[string]IgnoreReason{
		"grpc:chat.prod":            IgnoredForeignGRPC,
		"hostname:chat.prod":        IgnoredNotEntitled,
		"hostname:*.prod":           IgnoredNotEntitled,
		"hostname:*.com":            IgnoredNotEntitled, // "*.<ns>" is a gRPC-form name of namespace com
		"hostname:chat.example.com": IgnoredNotGranted,
		"bogus":                     IgnoredMalformed,
	}, reasons)
	assert.Contains(t, IgnoredMessage(evil, evilEv.Ignored), "trafficmap evil/x status.publisher.claimedTargets: entries ignored")

	// Someone else's record (prod's) grants evil nothing, nor does a record of an earlier
	// map of evil's name (another UID).
	stale := NewClaimRecord("evil", "x", "earlier-uid", []Grant{{Name: "chat.example.com", At: t0}})
	assert.Equal(t, []string{"x.evil"}, ReadJournal(evil, "p", &prodRec, policy).Journaled)
	assert.Equal(t, []string{"x.evil"}, ReadJournal(evil, "p", &stale, policy).Journaled)

	prodClaim := claimOf(prod, prodEv, "chat.example.com")
	evilClaim := claimOf(evil, evilEv, "chat.example.com", "*.com")
	own := ResolveHostnames(prodClaim, []Claim{evilClaim})
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, own.Owned, "prod/chat keeps its names")
	assert.Empty(t, own.Conflicts)
	evilOwn := ResolveHostnames(evilClaim, []Claim{prodClaim})
	assert.Equal(t, []string{"x.evil"}, evilOwn.Owned)
	assert.Empty(t, evilOwn.Claimable, "*.com and chat.example.com overlap prod's held name")
	require.Len(t, evilOwn.Conflicts, 2)
	for _, c := range evilOwn.Conflicts {
		assert.Equal(t, "prod", c.Owner.Namespace)
	}
}

// D1: between two recorded grants, the earlier grant wins, not the older map: an older
// map granted a name later (e.g. after prod/chat gave it up and took it back, or a
// restored object) cannot backdate its claim.
func TestGrantTimeDecidesNotAge(t *testing.T) {
	policy := ClaimPolicy{}
	prod := journaledMap("prod", "chat", 5, "p", "hostname:chat.example.com")
	old := journaledMap("staging", "chat", 0, "p", "hostname:chat.example.com")
	prodRec := NewClaimRecord("prod", "chat", prod.UID, []Grant{{Name: "chat.example.com", At: t0.Add(10 * time.Minute)}})
	oldRec := NewClaimRecord("staging", "chat", old.UID, []Grant{{Name: "chat.example.com", At: t0.Add(20 * time.Minute)}})
	p := claimOf(prod, ReadJournal(prod, "p", &prodRec, policy), "chat.example.com")
	o := claimOf(old, ReadJournal(old, "p", &oldRec, policy), "chat.example.com")
	assert.Equal(t, []string{"chat.example.com"}, ResolveHostnames(p, []Claim{o}).Owned, "the earlier grant wins")
	lost := ResolveHostnames(o, []Claim{p})
	assert.Empty(t, lost.Owned, "the older map's later grant loses")
	require.Len(t, lost.Conflicts, 1)
	assert.Equal(t, "prod", lost.Conflicts[0].Owner.Namespace)
}

// A map held by another known publisher ranks after every grant this publisher recorded;
// an unknown publisher's journal counts for no one.
func TestForeignAndUnknownEvidence(t *testing.T) {
	policy := ClaimPolicy{GRPCNames: true}
	prod := journaledMap("prod", "chat", 5, "p", "hostname:chat.example.com")
	prodRec := NewClaimRecord("prod", "chat", prod.UID, []Grant{{Name: "chat.example.com", At: t0.Add(6 * time.Minute)}})
	held := journaledMap("evil", "x", 0, "other", "grpc:x.evil", "hostname:chat.example.com", "hostname:chat.prod")
	ev := ForeignEvidence(held, policy)
	assert.Equal(t, []string{"chat.example.com", "x.evil"}, ev.Journaled)
	assert.Equal(t, ForeignGrant, ev.Granted["chat.example.com"])
	h := claimOf(held, ev, "chat.example.com")
	p := claimOf(prod, ReadJournal(prod, "p", &prodRec, policy), "chat.example.com")
	assert.NotContains(t, ResolveHostnames(h, []Claim{p}).Owned, "chat.example.com")
	assert.Contains(t, ResolveHostnames(p, []Claim{h}).Owned, "chat.example.com")

	unknown := UnknownEvidence(held)
	assert.Empty(t, unknown.Journaled)
	assert.Len(t, unknown.Ignored, 3)
	assert.Equal(t, IgnoredUnknownPublisher, unknown.Ignored[0].Reason)
}

// The claim record round-trips, and a record with any invalid part is refused whole.
func TestClaimRecordCodec(t *testing.T) {
	r := NewClaimRecord("prod", "chat", "uid-1", []Grant{{Name: "Chat.Example.com.", At: t0.Add(1500 * time.Microsecond)},
		{Name: "a.example.com", At: t0}, {Name: "chat.example.com", At: t0.Add(time.Hour)}})
	ann := EncodeClaimRecord(r)
	assert.Equal(t, "a.example.com=2026-12-03T10:00:00.000Z,chat.example.com=2026-12-03T10:00:00.001Z", ann[AnnotationClaimGrants])
	got, err := DecodeClaimRecord(ann)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	at, ok := got.Granted("CHAT.example.com")
	assert.True(t, ok)
	assert.Equal(t, t0.Add(time.Millisecond), at)

	for name, mutate := range map[string]func(map[string]string){
		"no map": func(a map[string]string) { delete(a, AnnotationClaimMap) },
		"no uid": func(a map[string]string) { delete(a, AnnotationClaimUID) },
		"unsorted": func(a map[string]string) {
			a[AnnotationClaimGrants] = "b.com=2026-12-03T10:00:00.000Z,a.com=2026-12-03T10:00:00.000Z"
		},
		"duplicate": func(a map[string]string) {
			a[AnnotationClaimGrants] = "a.com=2026-12-03T10:00:00.000Z,a.com=2026-12-03T10:00:00.000Z"
		},
		"bad time":      func(a map[string]string) { a[AnnotationClaimGrants] = "a.com=yesterday" },
		"not normal":    func(a map[string]string) { a[AnnotationClaimGrants] = "A.com=2026-12-03T10:00:00.000Z" },
		"map with more": func(a map[string]string) { a[AnnotationClaimMap] = "a/b/c" },
	} {
		t.Run(name, func(t *testing.T) {
			a := EncodeClaimRecord(r)
			mutate(a)
			_, err := DecodeClaimRecord(a)
			assert.ErrorIs(t, err, ErrInvalidClaimRecord)
		})
	}
}

// The upgrade import: journals of an earlier version, read under the policy; overlapping
// names go to the older map; grants at creationTimestamp; gRPC names need no record.
func TestImportGrants(t *testing.T) {
	policy := ClaimPolicy{GRPCNames: true}
	older := journaledMap("evil", "x", 0, "p", "grpc:x.evil", "hostname:chat.prod", "hostname:*.example.com")
	prod := journaledMap("prod", "chat", 5, "p", "grpc:chat.prod", "hostname:chat.example.com")
	other := journaledMap("ops", "y", 1, "someone-else", "hostname:y.example.com")
	recs, ignored := ImportGrants([]*v1beta1.TrafficMap{prod, older, other}, "p", policy, false)
	require.Len(t, recs, 1)
	assert.Equal(t, NewClaimRecord("evil", "x", older.UID, []Grant{{Name: "*.example.com", At: older.CreationTimestamp.Time}}), recs[0])
	assert.Equal(t, IgnoredNotEntitled, ignored["evil/x"][0].Reason)
	require.Len(t, ignored["prod/chat"], 1)
	assert.Equal(t, IgnoredOverlap, ignored["prod/chat"][0].Reason)
	assert.Contains(t, ignored["prod/chat"][0].Rule, "evil/x")

	recs, _ = ImportGrants([]*v1beta1.TrafficMap{prod, older}, "p", policy, true)
	assert.Len(t, recs, 2, "scoped: names overlap only within a namespace")

	// A wildcard journaled later over a name kept before, and the same name again, are
	// overlaps; a name beside them is not.
	first := journaledMap("a", "first", 0, "p", "hostname:api.corp.io")
	later := journaledMap("b", "later", 3, "p", "hostname:*.corp.io", "hostname:API.corp.io.", "hostname:web.corp.net")
	recs, ignored = ImportGrants([]*v1beta1.TrafficMap{later, first}, "p", policy, false)
	require.Len(t, recs, 2)
	assert.Equal(t, []Grant{{Name: "web.corp.net", At: later.CreationTimestamp.Time}}, recs[1].Grants)
	require.Len(t, ignored["b/later"], 2)
	for _, ig := range ignored["b/later"] {
		assert.Equal(t, IgnoredOverlap, ig.Reason)
		assert.Contains(t, ig.Rule, "a/first")
	}
}

func TestIgnoredMessageIsBoundedAndEscaped(t *testing.T) {
	tm := &v1beta1.TrafficMap{}
	tm.Namespace, tm.Name = "evil", "x"
	var ignored []Ignored
	for i := range 20 {
		ignored = append(ignored, Ignored{Target: "hostname:a\n\"b" + strings.Repeat("x", 300) + string(rune('a'+i)), Reason: IgnoredNotGranted, Rule: "rule"})
	}
	msg := IgnoredMessage(tm, ignored)
	assert.NotContains(t, msg, "\n", "a tenant's entry never reaches the message raw")
	assert.Equal(t, 8, strings.Count(msg, "(NotGranted: rule)"), "at most 8 entries listed")
	assert.Contains(t, msg, "and 12 more")
	assert.Less(t, len(msg), 8*(untrusted.MaxID+40)+200)
	assert.Empty(t, IgnoredMessage(tm, nil))
}

// BenchmarkImportGrants imports the journals of 10,000 maps, each with its gRPC name and a
// hostname (the upgrade import runs before the leader's first reconcile).
func BenchmarkImportGrants(b *testing.B) {
	var fleet []*v1beta1.TrafficMap
	for i := range 10000 {
		fleet = append(fleet, journaledMap(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("m-%d", i), i, "p",
			fmt.Sprintf("grpc:m-%d.ns-%d", i, i%100), fmt.Sprintf("hostname:svc-%d.example.com", i)))
	}
	for b.Loop() {
		if recs, _ := ImportGrants(fleet, "p", ClaimPolicy{GRPCNames: true}, false); len(recs) != len(fleet) {
			b.Fatalf("%d records for %d maps", len(recs), len(fleet))
		}
	}
}
