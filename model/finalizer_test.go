package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/weights"
)

func TestFinalizerDecisions(t *testing.T) {
	now := metav1.Now()
	lp := &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: 1, ObservedISVCGeneration: 1}
	ours := &v1beta1.TrafficMapPublisherStatus{PublisherName: "trafficmap-publisher"}
	claims := func(name string) *v1beta1.TrafficMapPublisherStatus {
		return &v1beta1.TrafficMapPublisherStatus{PublisherName: name, ClaimedTargets: []string{"v1:httproute:prod/chat-global"}}
	}
	tests := []struct {
		name       string
		finalizers []string
		deleting   bool
		journal    *v1beta1.TrafficMapPublisherStatus
		takeOver   string
		needs      bool
		finalizing bool // this publisher tears the map down
		byOther    bool // another publisher does
	}{
		{name: "new map: add before the first write", needs: true},
		{name: "other finalizers only", finalizers: []string{"example.com/keep"}, needs: true},
		{name: "carries it", finalizers: []string{Finalizer}},
		{name: "deleting, never touched: no finalizer, removed at once", deleting: true},
		{name: "deleting, ours, no journal", finalizers: []string{Finalizer}, deleting: true, finalizing: true},
		{name: "deleting, ours, our journal", finalizers: []string{"example.com/keep", Finalizer}, deleting: true, journal: ours, finalizing: true},
		{name: "deleting, a known publisher holds it with claims: its teardown", finalizers: []string{Finalizer}, deleting: true,
			journal: claims("ome"), byOther: true},
		{name: "deleting, a known publisher holds it with a last positive plan: its teardown", finalizers: []string{Finalizer}, deleting: true,
			journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "ome", LastPositive: lp}, byOther: true},
		{name: "deleting, OME's gatewayapi holds it: its teardown", finalizers: []string{Finalizer}, deleting: true,
			journal: claims(OMEPublisherName), byOther: true},
		{name: "deleting, journaled by gatewayapi, taken over (--take-over-from gatewayapi): ours", finalizers: []string{Finalizer}, deleting: true,
			journal: claims(OMEPublisherName), takeOver: OMEPublisherName, finalizing: true},
		{name: "deleting, taken over from another publisher: ours", finalizers: []string{Finalizer}, deleting: true,
			journal: claims("ome"), takeOver: "ome", finalizing: true},
		{name: "deleting, a retired known publisher with no claims: adopted, ours", finalizers: []string{Finalizer}, deleting: true,
			journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "ome", ObservedOptionsDigest: "sha256:00"}, finalizing: true},
		{name: "deleting, a retired unknown publisher with no claims: adopted, ours", finalizers: []string{Finalizer}, deleting: true,
			journal: &v1beta1.TrafficMapPublisherStatus{PublisherName: "retired"}, finalizing: true},
		{name: "deleting, an unknown publisher with claims: held, as for a live map", finalizers: []string{Finalizer}, deleting: true,
			journal: claims("forged"), byOther: true},
		{name: "deleting, taken over but without the finalizer: removed at once", deleting: true,
			journal: claims(OMEPublisherName), takeOver: OMEPublisherName},
		{name: "live, taken over: no teardown", finalizers: []string{Finalizer}, journal: claims(OMEPublisherName), takeOver: OMEPublisherName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Finalizers: tc.finalizers}}
			tm.Status.Publisher = tc.journal
			if tc.deleting {
				tm.DeletionTimestamp = &now
			}
			p := Publishers{Self: "trafficmap-publisher", TakeOverFrom: tc.takeOver, Known: []string{"ome"}}
			assert.Equal(t, tc.needs, NeedsFinalizer(tm))
			assert.Equal(t, tc.finalizing, Finalizing(tm, p), "Finalizing")
			assert.Equal(t, tc.byOther, TornDownByOther(tm, p), "TornDownByOther")
			if tc.deleting && HasFinalizer(tm) {
				assert.Equal(t, HolderOf(tm, p).Held(), TornDownByOther(tm, p), "one holder rule: the live map's and the teardown's")
			}
		})
	}
	assert.False(t, Finalizing(nil, Publishers{Self: "trafficmap-publisher"}), "a map that is gone")
	assert.False(t, TornDownByOther(nil, Publishers{Self: "trafficmap-publisher"}), "a map that is gone")
}

func TestWithoutFinalizer(t *testing.T) {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"a/x", Finalizer, "b/y"}}}
	assert.Equal(t, []string{"a/x", "b/y"}, WithoutFinalizer(tm), "only ours goes, the others keep their order")
	assert.Equal(t, []string{"a/x", Finalizer, "b/y"}, tm.Finalizers, "the map is not modified")
	assert.Empty(t, WithoutFinalizer(&v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{Finalizer}}}))
}

func TestZeroed(t *testing.T) {
	p := Plan{Namespace: "prod", Name: "chat", Hostnames: []string{"chat.example.com"},
		Conflicts: []Conflict{{Hostname: "other.example.com"}},
		Result: weights.Result{Entries: []weights.EffectiveEntry{
			{Cluster: "worker-a", Weight: 3, Effective: 3, Endpoint: weights.Endpoint{URL: "https://a.example.com"}},
			{Cluster: "worker-b", Weight: 1, Effective: 0, HeldBy: []string{"m"}},
		}}}
	z := Zeroed(p)
	assert.True(t, z.Result.AllZero())
	assert.Equal(t, p.Hostnames, z.Hostnames, "the same names: no route or listener disappears")
	assert.Equal(t, p.Conflicts, z.Conflicts)
	assert.Equal(t, []int32{3, 1}, []int32{z.Result.Entries[0].Weight, z.Result.Entries[1].Weight}, "map weights kept")
	assert.Equal(t, "https://a.example.com", z.Result.Entries[0].Endpoint.URL)
	assert.Equal(t, int32(3), p.Result.Entries[0].Effective, "the plan given is not modified")
}

func TestTeardownWait(t *testing.T) {
	in := Confirmation{Sink: "httproute", State: InPlace}
	pending := Confirmation{Sink: "xds", State: Pending}
	rejected := Confirmation{Sink: "httproute", State: Rejected}
	refused := Confirmation{Sink: "httproute", State: Refused}
	tests := []struct {
		name           string
		confs          []Confirmation
		expired        bool
		done, timedOut bool
		waitingFor     string
	}{
		{name: "no sink", done: true},
		{name: "every sink in place", confs: []Confirmation{in, in}, done: true},
		{name: "a refusal has nothing to wait for", confs: []Confirmation{refused, in}, done: true},
		{name: "one pending", confs: []Confirmation{in, pending}, waitingFor: "xds"},
		{name: "rejected waits too", confs: []Confirmation{rejected, in}, waitingFor: "httproute"},
		{name: "expired: proceed, timed out", confs: []Confirmation{in, pending}, expired: true, done: true, timedOut: true, waitingFor: "xds"},
		{name: "expired but done: no time-out", confs: []Confirmation{in}, expired: true, done: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done, timedOut, waiting := TeardownWait(tc.confs, tc.expired)
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.timedOut, timedOut)
			if tc.waitingFor == "" {
				assert.Nil(t, waiting)
			} else if assert.NotNil(t, waiting) {
				assert.Equal(t, tc.waitingFor, waiting.Sink)
			}
		})
	}
}

func TestTeardownPlanYieldsClaimedNames(t *testing.T) {
	p := Plan{Namespace: "prod", Name: "chat", Hostnames: []string{"chat.example.com"},
		Result: weights.Result{Entries: []weights.EffectiveEntry{{Cluster: "worker-a", Weight: 1, Effective: 1}}}}
	z := TeardownPlan(p, nil)
	assert.Equal(t, []string{"chat.example.com"}, z.Hostnames, "no one else claims it: kept, at weight 0")
	assert.True(t, z.Result.AllZero())
	assert.Empty(t, z.Conflicts)

	self := Claim{Kind: KindTrafficMap, Namespace: "prod", Name: "chat", Names: []string{"chat.example.com"}}
	other := Claim{Kind: KindTrafficMap, Namespace: "staging", Name: "chat", Names: []string{"chat.staging", "*.example.com"}}
	z = TeardownPlan(p, []Claim{self, other})
	assert.Empty(t, z.Hostnames, "another map claims it: yielded at once")
	require.Len(t, z.Conflicts, 1)
	assert.Equal(t, "chat.example.com", z.Conflicts[0].Hostname)
	assert.Equal(t, Owner{Kind: KindTrafficMap, Namespace: "staging", Name: "chat", Hostname: "*.example.com"}, z.Conflicts[0].Owner)
	assert.True(t, z.Withheld("chat.example.com"))
	assert.Equal(t, []string{"chat.example.com"}, p.Hostnames, "the plan given is not modified")
}

func TestFallbackTeardownPlan(t *testing.T) {
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", UID: "uid-1", Generation: 4},
		Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 3},
			{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1},
		}}}
	tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: "p", ClaimedTargets: []string{"grpc:chat.prod", "hostname:chat.example.com"}}
	p, err := FallbackTeardownPlan(tm, JournaledNames(tm, "p"))
	require.NoError(t, err)
	assert.Equal(t, "chat.example.com", p.GlobalHost)
	assert.Equal(t, []string{"chat.example.com"}, p.Hostnames)
	assert.Empty(t, p.Conflicts, "its gRPC name is journaled: served at weight 0")
	assert.True(t, p.Result.AllZero())
	require.Len(t, p.Result.Entries, 2)
	assert.Equal(t, "worker-a", p.Result.Entries[0].Cluster, "sorted, as every plan")
	assert.Equal(t, "https://a.example.com", p.Result.Entries[0].Endpoint.URL)
	assert.Equal(t, []any{"uid-1", int64(4), "chat"}, []any{p.UID, p.Generation, p.Service})

	tm.Status.Publisher.PublisherName = "other"
	p, err = FallbackTeardownPlan(tm, JournaledNames(tm, "p"))
	require.NoError(t, err)
	assert.Empty(t, p.Hostnames, "another publisher's journal holds nothing for us")
	assert.True(t, p.Withheld("chat.prod"), "an unjournaled gRPC name is not served")

	tm.Spec.Entries = append(tm.Spec.Entries, tm.Spec.Entries[0])
	_, err = FallbackTeardownPlan(tm, JournaledNames(tm, "p"))
	require.Error(t, err, "duplicate cluster: no plan")
}

func TestReplacedNames(t *testing.T) {
	grpc := NormalizeHostname(GRPCName("prod", "chat"))
	other := Conflict{Hostname: "shared.example.com", Owner: Owner{Kind: KindTrafficMap, Namespace: "prod", Name: "other"}}
	tests := []struct {
		name      string
		hostnames []string
		conflicts []Conflict
		wantHosts []string
		wantConfl []Conflict
	}{
		{name: "unjournaled hostname becomes the map's", conflicts: []Conflict{{Hostname: "chat.example.com", Unjournaled: true}},
			wantHosts: []string{"chat.example.com"}},
		{name: "unjournaled gRPC name is served, not a hostname", conflicts: []Conflict{{Hostname: grpc, Unjournaled: true}}},
		{name: "a name another map holds stays withheld", conflicts: []Conflict{other, {Hostname: "chat.example.com", Unjournaled: true}},
			wantHosts: []string{"chat.example.com"}, wantConfl: []Conflict{other}},
		{name: "owned names stay", hostnames: []string{"chat.example.com"}, conflicts: []Conflict{{Hostname: "chat.example.com", Unjournaled: true}},
			wantHosts: []string{"chat.example.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: tc.hostnames, Conflicts: tc.conflicts}
			got := ReplacedNames(p)
			assert.Equal(t, tc.wantHosts, got.Hostnames)
			assert.Equal(t, tc.wantConfl, got.Conflicts)
			assert.Equal(t, tc.conflicts, p.Conflicts, "p is not modified")
		})
	}
}
