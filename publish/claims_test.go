package publish

import (
	"slices"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// importDone puts the import marker into the claim records' cache: records alone grant.
func (f *ownershipFixture) importDone(t *testing.T) {
	t.Helper()
	s := f.p.caches.claimRecords
	require.NoError(t, s.inf.GetIndexer().Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: s.namespace, Name: model.ClaimMarkerName(s.publisher)}}))
}

// grant puts a claim record granting names to tm at at into the cache, as the leader writes it.
func (f *ownershipFixture) grant(t *testing.T, tm *v1beta1.TrafficMap, at time.Time, names ...string) {
	t.Helper()
	s := f.p.caches.claimRecords
	var grants []model.Grant
	for _, n := range names {
		grants = append(grants, model.Grant{Name: n, At: at})
	}
	rec := model.NewClaimRecord(tm.Namespace, tm.Name, tm.UID, grants)
	require.NoError(t, s.inf.GetIndexer().Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: s.namespace, Name: model.ClaimRecordName(s.publisher, tm.Namespace, tm.Name), Annotations: model.EncodeClaimRecord(rec)}}))
}

// D1 and D2 over the caches, as every replica serves at start and after: prod/chat was
// granted chat.example.com (its record and its journal hold it). The older map evil/x, whose
// tenant writes its status, claims the same name and forges its journal: entries this
// publisher never granted, or a publisherName naming an unknown publisher, or OME's. In
// every case, and whichever map is served first, prod/chat serves chat.example.com and
// evil/x serves no name overlapping it. On 85c9629 the forged journal won: the older journaled
// map took the name (D1), or both maps served it (D2).
func TestForgedJournalsTakeNothingFromCaches(t *testing.T) {
	for name, journal := range map[string]*v1beta1.TrafficMapPublisherStatus{
		"D1 entries never granted": {PublisherName: testPublisher,
			ClaimedTargets: []string{"grpc:chat.prod", "grpc:x.evil", "hostname:*.com", "hostname:chat.example.com"}},
		"D2 unknown publisher": {PublisherName: "someone", ClaimedTargets: []string{"grpc:x.evil", "hostname:chat.example.com"}},
		"D2 OME's name":        {PublisherName: model.OMEPublisherName, ClaimedTargets: []string{"grpc:x.evil", "hostname:chat.example.com"}},
	} {
		for _, order := range [][]string{{"evil/x", "prod/chat"}, {"prod/chat", "evil/x"}} {
			t.Run(name+" "+order[0]+" first", func(t *testing.T) {
				f := newOwnershipFixture(t)
				f.importDone(t)
				prod := f.addMap(t, "prod", "chat", "chat", 5)
				prod.UID = "prod-uid"
				f.addISVC(t, "prod", "chat", "chat.example.com")
				prod = f.journal(t, prod, "chat.prod", "chat.example.com")
				f.grant(t, prod, t0.Add(6*time.Minute), "chat.example.com")

				evil := f.addMap(t, "evil", "x", "x", 0).DeepCopy() // older
				evil.UID = "evil-uid"
				evil.Status.Publisher = journal
				require.NoError(t, f.p.caches.maps[0].GetIndexer().Update(evil))
				f.addISVC(t, "evil", "x", "chat.example.com")

				route := httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "global"},
					HostTemplate: template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.example.com"))}
				sink := &servingSink{fakeSink: &fakeSink{name: "xds"}}
				rec := &reconciler{inputs: f.p.caches, hosts: route, sinks: []model.Sink{sink}, publisher: testPublisher}
				for _, key := range order {
					ns, n, _ := cache.SplitMetaNamespaceKey(key)
					require.NoError(t, rec.serve(cache.NewObjectName(ns, n)))
				}
				p := sink.last("prod/chat")
				require.NotNil(t, p)
				assert.Equal(t, []string{"chat.example.com"}, p.Hostnames, "prod/chat keeps its name")
				assert.False(t, p.Withheld("chat.example.com"))
				assert.False(t, p.Withheld("chat.prod"))
				e := sink.last("evil/x")
				require.NotNil(t, e)
				assert.Empty(t, e.Hostnames, "evil/x serves no hostname")
				assert.True(t, e.Withheld("chat.example.com"), "evil/x does not serve prod's name")
				assert.Equal(t, []string{"chat.example.com", "chat.prod"}, f.ownership(t, prod).Owned)
			})
		}
	}
}

// A name the record grants counts only for the map with the record's UID: a map created
// again under the same name does not inherit the earlier map's grants.
func TestClaimRecordOfAnEarlierMapGrantsNothing(t *testing.T) {
	f := newOwnershipFixture(t)
	f.importDone(t)
	tm := f.addMap(t, "prod", "chat", "chat", 5)
	tm.UID = "new-uid"
	f.addISVC(t, "prod", "chat", "chat.example.com")
	tm = f.journal(t, tm, "chat.prod", "chat.example.com")
	earlier := tm.DeepCopy()
	earlier.UID = "old-uid"
	f.grant(t, earlier, t0, "chat.example.com")
	ev := f.p.caches.evidence(tm)
	assert.Equal(t, []string{"chat.prod"}, ev.Journaled)
	require.Len(t, ev.Ignored, 1)
	assert.Equal(t, model.IgnoredNotGranted, ev.Ignored[0].Reason)

	f.grant(t, tm, t0, "chat.example.com")
	assert.Equal(t, []string{"chat.example.com", "chat.prod"}, f.p.caches.evidence(tm).Journaled)
}

// The grant order: the claim record is written before the journal names the granted name,
// and both before any sink serves it; a name the journal drops leaves the record after the
// journal; a deleted map's record goes after the sinks removed what they served.
func TestClaimRecordOrder(t *testing.T) {
	f := newFixture(t)
	s := &journalSink{fakeSink: inPlace("route stored"), api: f.api}
	f.rec.sinks = []model.Sink{s}
	f.inputs.tm.Status.Publisher = nil // a new map: nothing journaled yet
	f.api.tm = f.inputs.tm.DeepCopy()
	scheme := k8sruntime.NewScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	kube := kubefake.NewClientset()
	f.rec.grants = newClaimRecords(metadatafake.NewSimpleMetadataClient(scheme), kube, "trafficmap-system", testPublisher, testPublisher)
	var journalAtRecord [][]string
	var sinkDeletedAtRecord []string
	kube.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		s.mu.Lock()
		sinkDeletedAtRecord = slices.Clone(s.deleted)
		s.mu.Unlock()
		var targets []string
		if j := f.api.tm.Status.Publisher; j != nil {
			targets = slices.Clone(j.ClaimedTargets)
		}
		journalAtRecord = append(journalAtRecord, append([]string{a.GetVerb()}, targets...))
		return false, nil, nil
	})

	_, err := f.run(t)
	require.NoError(t, err)
	require.Equal(t, [][]string{{"patch"}}, journalAtRecord, "the record is applied before the journal holds the name")
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, s.journalAtApply[0], "journaled before the sink got the plan")
	rec := f.rec.grants.get("prod", "chat")
	require.NotNil(t, rec)
	assert.Equal(t, []string{"chat.example.com"}, rec.Names())

	// The hostname moves: the new name is recorded before it is journaled; the old one
	// leaves the journal after the sink applied the plan, then the record.
	f.inputs.global = "chat2.example.com"
	journalAtRecord = nil
	_, err = f.run(t)
	require.NoError(t, err)
	require.Len(t, journalAtRecord, 2)
	assert.Equal(t, []string{"patch", "grpc:chat.prod", "hostname:chat.example.com"}, journalAtRecord[0], "chat2 recorded before it is journaled")
	assert.Equal(t, []string{"patch", "grpc:chat.prod", "hostname:chat2.example.com"}, journalAtRecord[1], "chat leaves the record after the journal")
	assert.Equal(t, []string{"chat2.example.com"}, f.rec.grants.get("prod", "chat").Names())

	// Deleted: the record goes after the sinks' removal.
	f.inputs.tm = nil
	journalAtRecord = nil
	require.NoError(t, f.rec.delete(t.Context(), f.key, zaptest.NewLogger(t)))
	require.Len(t, journalAtRecord, 1)
	assert.Equal(t, "delete", journalAtRecord[0][0])
	assert.NotEmpty(t, sinkDeletedAtRecord, "the sink removed the map first")
	assert.Nil(t, f.rec.grants.get("prod", "chat"))
}
