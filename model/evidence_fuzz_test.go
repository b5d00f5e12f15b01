package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// FuzzJournal fuzzes the claim record decoder and the reading rule with random journals,
// records and policies: nothing panics, a decoded record round-trips, and a journal never
// counts more than the record grants (besides the map's own gRPC name), nor a name the
// policy refuses. The seeds are the forged cases of issue 43.
func FuzzJournal(f *testing.F) {
	const at = "2026-12-03T10:00:00.000Z"
	for _, s := range []struct{ publisher, targets, recordMap, uid, grants, entitlement string }{
		{"p", "grpc:chat.prod\nhostname:chat.example.com", "prod/chat", "uid", "chat.example.com=" + at, ""},
		{"p", "grpc:chat.prod\nhostname:chat.prod\nhostname:*.prod\nhostname:*.com", "evil/x", "uid", "", ""},
		{"p", "hostname:chat.example.com", "evil/x", "other-uid", "chat.example.com=1970-01-01T00:00:00.000Z", ""},
		{"p", "hostname:chat.example.com", "prod/chat", "uid", "chat.example.com=" + at, "example.com=staging"},
		{"gatewayapi", "v1:httproute:prod/chat-global", "prod/chat", "uid", "", ""},
		{"p", "hostname:a.com\nhostname:A.com.\nhostname:", "prod/chat", "uid", "a.com=" + at + ",a.com=" + at, ""},
		{"p", "grpc:\nhostname\n:\nhostname:" + strings.Repeat("a", 600), "prod/chat", "uid", "b.com=x,a.com=" + at, ""},
	} {
		f.Add(s.publisher, s.targets, s.recordMap, s.uid, s.grants, s.entitlement)
	}
	f.Fuzz(func(t *testing.T, publisher, targets, recordMap, uid, grants, entitlement string) {
		policy := ClaimPolicy{GRPCNames: len(targets)%2 == 0}
		if e, err := ParseEntitlement(entitlement); err == nil {
			policy.Entitlements = []Entitlement{e}
		}
		tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", UID: types.UID(uid), CreationTimestamp: metav1.NewTime(t0)},
			Spec: v1beta1.TrafficMapSpec{Service: "chat"}}
		tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: publisher, ClaimedTargets: strings.Split(targets, "\n")}
		var rec *ClaimRecord
		ann := map[string]string{AnnotationClaimMap: recordMap, AnnotationClaimUID: uid, AnnotationClaimGrants: grants}
		if r, err := DecodeClaimRecord(ann); err == nil {
			again, err := DecodeClaimRecord(EncodeClaimRecord(r))
			require.NoError(t, err, "a decoded record encodes to a valid one")
			assert.Equal(t, r, again)
			assert.LessOrEqual(t, len(r.Grants), maxRecordGrants)
			rec = &r
		}
		own := NormalizeHostname(GRPCName(tm.Namespace, tm.Spec.Service))
		ev := ReadJournal(tm, "p", rec, policy)
		granted := 0
		for _, n := range ev.Journaled {
			if n == own {
				continue
			}
			granted++
			assert.Nil(t, policy.Check(tm.Namespace, n), "a counted name %q is one the policy allows", n)
			_, ok := rec.Granted(n)
			require.True(t, ok, "a counted name %q is one the record grants", n)
			require.Equal(t, rec.UID, tm.UID, "the record is the map's")
		}
		assert.LessOrEqual(t, granted, len(rec.Names()), "never more names than the record grants")
		if publisher != "p" {
			assert.Empty(t, ev.Journaled, "another publisher's journal counts for nothing here")
		}
		for _, ig := range ev.Ignored {
			assert.LessOrEqual(t, len(ig.Target), 80)
		}
		legacy := LegacyEvidence(tm, "p", policy)
		for _, n := range legacy.Journaled {
			assert.True(t, n == own || policy.Check(tm.Namespace, n) == nil, "the upgrade reading applies the policy too")
		}
		assert.False(t, slices.ContainsFunc(UnknownEvidence(tm).Journaled, func(string) bool { return true }))
	})
}
