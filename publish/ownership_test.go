package publish

import (
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// ownershipFixture is a Publisher whose informer caches (not running) are filled by hand,
// with both sinks on, a --host-template and a queue to observe.
type ownershipFixture struct {
	p *Publisher
}

func newOwnershipFixture(t *testing.T) *ownershipFixture {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	cfg := Config{Sinks: []string{SinkHTTPRoute, SinkXDS}, FieldManager: testPublisher, ClaimNamespace: "trafficmap-system"}
	route := httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "global"},
		HostTemplate: template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.example.com"))}
	c := clients{kube: kubefake.NewClientset(), gateway: gwfake.NewClientset(), maps: omefake.NewClientset(), meta: metadatafake.NewSimpleMetadataClient(scheme)}
	p := &Publisher{caches: newCaches(c, cfg, route), queue: newQueue()}
	wire(p)
	t.Cleanup(p.queue.ShutDown)
	return &ownershipFixture{p: p}
}

func (f *ownershipFixture) addMap(t *testing.T, ns, name, service string, age int) *v1beta1.TrafficMap {
	t.Helper()
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))},
		Spec: v1beta1.TrafficMapSpec{Service: service}}
	require.NoError(t, f.p.caches.maps[0].GetIndexer().Add(tm))
	return tm
}

func (f *ownershipFixture) addISVC(t *testing.T, ns, name, host string) *metav1.PartialObjectMetadata {
	t.Helper()
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if host != "" {
		m.Annotations = map[string]string{v1beta1.AnnotationGlobalHost: host}
	}
	require.NoError(t, f.p.caches.isvcs[0].GetIndexer().Update(m))
	return m
}

// journal puts names into the cached map's claim journal, as a reconcile would.
func (f *ownershipFixture) journal(t *testing.T, tm *v1beta1.TrafficMap, names ...string) *v1beta1.TrafficMap {
	t.Helper()
	tm = tm.DeepCopy()
	tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher,
		ClaimedTargets: model.ClaimTargets(model.GRPCName(tm.Namespace, tm.Spec.Service), names)}
	require.NoError(t, f.p.caches.maps[0].GetIndexer().Update(tm))
	return tm
}

// ownership is what the plan step decides for the cached map.
func (f *ownershipFixture) ownership(t *testing.T, tm *v1beta1.TrafficMap) model.Ownership {
	t.Helper()
	isvc, err := f.p.caches.inferenceService(tm.Namespace, tm.Spec.Service)
	require.NoError(t, err)
	self := f.p.caches.mapClaim(tm, isvc)
	route, err := f.p.caches.Route(tm.Namespace, httproute.RouteName(tm.Name))
	require.NoError(t, err)
	return model.ForeignConflicts(model.ResolveHostnames(self, f.p.caches.owners.claims(self)), routeCreated(route),
		f.p.caches.owners.foreignClaims(tm.Namespace, self.Names, nil))
}

// queued drains the queue.
func (f *ownershipFixture) queued() []string {
	var out []string
	for f.p.queue.Len() > 0 {
		key, _ := f.p.queue.Get()
		out = append(out, key.String())
		f.p.queue.Done(key)
	}
	return out
}

// The caches' view finds the contenders through the indexes: an annotation, a template
// name, a wildcard and a journal; a journaled name holds against every claim not
// journaled, whatever the ages; a foreign route older than the map's route holds it too.
func TestOwnershipFromCaches(t *testing.T) {
	f := newOwnershipFixture(t)
	prod := f.addMap(t, "prod", "chat", "chat", 5)
	f.addISVC(t, "prod", "chat", "shared.example.com")
	prod = f.journal(t, prod, "chat.prod", "shared.example.com")
	staging := f.addMap(t, "staging", "chat", "chat", 0) // older, claiming later
	f.addISVC(t, "staging", "chat", "shared.example.com")
	tmpl := f.addMap(t, "dev", "embed", "embed", 1) // no annotation: embed.dev.example.com
	f.addISVC(t, "dev", "embed", "")
	tmpl = f.journal(t, tmpl, "embed.dev", "embed.dev.example.com")
	wild := f.addMap(t, "edge", "all", "all", 0)
	f.addISVC(t, "edge", "all", "*.dev.example.com")

	assert.Equal(t, []string{"chat.prod", "shared.example.com"}, f.ownership(t, prod).Owned)
	own := f.ownership(t, staging)
	assert.Equal(t, []string{"chat.staging"}, own.Claimable)
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, "prod", own.Conflicts[0].Owner.Namespace)
	assert.Equal(t, []string{"embed.dev", "embed.dev.example.com"}, f.ownership(t, tmpl).Owned)
	own = f.ownership(t, wild)
	assert.Equal(t, []string{"all.edge"}, own.Claimable)
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, "embed.dev.example.com", own.Conflicts[0].Owner.Hostname, "the wildcard overlaps the journaled template name")

	// prod moves to another hostname: its journal still holds the old one (until the sinks
	// stopped serving it), so staging cannot take it yet; found through the journal index.
	f.addISVC(t, "prod", "chat", "moved.example.com")
	own = f.ownership(t, staging)
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, "prod", own.Conflicts[0].Owner.Namespace)
	prod = f.journal(t, prod, "chat.prod", "moved.example.com")
	assert.Equal(t, []string{"chat.staging", "shared.example.com"}, f.ownership(t, staging).Claimable, "dropped from the journal: free")
	f.addISVC(t, "prod", "chat", "shared.example.com")
	prod = f.journal(t, prod, "chat.prod", "shared.example.com")

	// A foreign route on the Gateway with the shared hostname, older than prod's route.
	foreign := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "legacy", CreationTimestamp: metav1.NewTime(t0)},
		Spec: gwapiv1.HTTPRouteSpec{Hostnames: []gwapiv1.Hostname{"shared.example.com"},
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Name: "global", Namespace: ptrTo(gwapiv1.Namespace("infra"))}}},
			Rules:           []gwapiv1.HTTPRouteRule{{}}}}
	require.NoError(t, f.p.caches.routes[0].GetIndexer().Add(foreign))
	own = f.ownership(t, prod)
	assert.Equal(t, []string{"chat.prod"}, own.Owned)
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, model.KindHTTPRoute, own.Conflicts[0].Owner.Kind)
	assert.Equal(t, "legacy", own.Conflicts[0].Owner.Name)

	ours := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: httproute.RouteName("chat"),
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute)), Labels: httproute.OwnerLabels(httproute.Source{Namespace: "prod", Name: "chat"})}}
	require.NoError(t, f.p.caches.routes[0].GetIndexer().Add(ours))
	assert.Equal(t, []string{"chat.prod", "shared.example.com"}, f.ownership(t, prod).Owned, "the map's own route is older: the gateway prefers it")
}

// Hand-over: when the owner goes or moves to another hostname, the handlers requeue every
// map claiming the name, so the next one takes it within one reconcile.
func TestHandOverRequeuesContenders(t *testing.T) {
	f := newOwnershipFixture(t)
	prod := f.addMap(t, "prod", "chat", "chat", 0)
	old := f.addISVC(t, "prod", "chat", "shared.example.com")
	f.addMap(t, "staging", "chat", "chat", 5)
	f.addISVC(t, "staging", "chat", "shared.example.com")
	f.addMap(t, "other", "x", "x", 7)
	f.addISVC(t, "other", "x", "x.example.com")

	moved := f.addISVC(t, "prod", "chat", "new.example.com")
	f.p.router.onInferenceService(normalPriority, old, moved)
	assert.ElementsMatch(t, []string{"prod/chat", "staging/chat"}, f.queued())

	f.p.router.onInferenceService(bulkPriority, moved, moved.DeepCopy())
	assert.Equal(t, []string{"prod/chat"}, f.queued(), "an unchanged hostname requeues the map alone")

	require.NoError(t, f.p.caches.maps[0].GetIndexer().Delete(prod))
	f.p.router.onTrafficMap(normalPriority, nil, prod) // the delete event
	assert.ElementsMatch(t, []string{"prod/chat"}, f.queued(), "no map claims prod's names any more")

	f.addISVC(t, "prod", "chat", "shared.example.com")
	f.p.router.onTrafficMap(normalPriority, nil, f.addMap(t, "prod", "chat", "chat", 0)) // an owner appears
	assert.ElementsMatch(t, []string{"prod/chat", "staging/chat"}, f.queued())
}

func ptrTo[T any](v T) *T { return &v }

// The scenario through the caches: prod/chat claimed and journaled chat.prod and
// chat.example.com; a map in namespace evil, created BEFORE prod's, then claims chat.prod,
// chat.example.com or *.prod through its annotation. It takes nothing from prod (prod owns
// both its names, evil none of them), whatever evil's age. On main the older evil map won.
func TestOlderNamespaceTakesNothingFromCaches(t *testing.T) {
	for _, host := range []string{"chat.prod", "chat.example.com", "*.prod"} {
		t.Run(host, func(t *testing.T) {
			f := newOwnershipFixture(t)
			evil := f.addMap(t, "evil", "chat", "chat", 0)
			f.addISVC(t, "evil", "chat", "")
			prod := f.addMap(t, "prod", "chat", "chat", 10)
			f.addISVC(t, "prod", "chat", "chat.example.com")
			prod = prod.DeepCopy()
			prod.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher,
				ClaimedTargets: []string{"grpc:chat.prod", "hostname:chat.example.com"}}
			require.NoError(t, f.p.caches.maps[0].GetIndexer().Update(prod))

			f.addISVC(t, "evil", "chat", host) // the new claim, on the older map
			assert.Equal(t, []string{"chat.example.com", "chat.prod"}, f.ownership(t, prod).Owned, "prod keeps its names")
			assert.Empty(t, f.ownership(t, prod).Conflicts)
			own := f.ownership(t, evil)
			for _, n := range own.Owned {
				assert.False(t, model.HostnamesOverlap(n, "chat.prod") || model.HostnamesOverlap(n, "chat.example.com"), "evil owns %s", n)
			}
			for _, c := range own.Conflicts {
				assert.Equal(t, "prod/chat", c.Owner.Namespace+"/"+c.Owner.Name)
			}
		})
	}
}

// A status-only update that moves a map's claim journal reconciles the map (the xDS sink
// plans from the cache, so a newly journaled name is served only now) and every map that
// wants one of the names it took or dropped; other status-only updates requeue nothing.
func TestJournalChangeRequeuesContenders(t *testing.T) {
	f := newOwnershipFixture(t)
	prod := f.addMap(t, "prod", "chat", "chat", 5)
	f.addISVC(t, "prod", "chat", "shared.example.com")
	f.addMap(t, "staging", "chat", "chat", 0)
	f.addISVC(t, "staging", "chat", "shared.example.com")
	f.addMap(t, "other", "x", "x", 7)
	f.addISVC(t, "other", "x", "x.example.com")
	prod.ResourceVersion = "1"

	journaled := f.journal(t, prod, "chat.prod", "shared.example.com")
	journaled.ResourceVersion = "2"
	f.p.router.onTrafficMap(normalPriority, prod, journaled)
	assert.ElementsMatch(t, []string{"prod/chat", "staging/chat"}, f.queued())

	again := journaled.DeepCopy()
	again.ResourceVersion = "3"
	again.Status.Published = true
	f.p.router.onTrafficMap(normalPriority, journaled, again)
	assert.Empty(t, f.queued(), "a status write that leaves the journal as it was")
}

// An older map whose wildcard already lost to a journaled name holds back no younger map
// under that domain: the caches' view brings the wildcard's holder along, so the decision
// sees the wildcard will never be granted.
func TestHopelessOlderClaimHoldsNothingBack(t *testing.T) {
	f := newOwnershipFixture(t)
	prod := f.addMap(t, "prod", "chat", "chat", 5)
	f.addISVC(t, "prod", "chat", "chat.shop.example.com")
	f.journal(t, prod, "chat.prod", "chat.shop.example.com")
	evil := f.addMap(t, "evil", "wild", "wild", 0) // the oldest
	f.addISVC(t, "evil", "wild", "*.shop.example.com")
	api := f.addMap(t, "team", "api", "api", 9)
	f.addISVC(t, "team", "api", "api.shop.example.com")

	own := f.ownership(t, evil)
	require.Len(t, own.Conflicts, 1)
	assert.Equal(t, "prod", own.Conflicts[0].Owner.Namespace, "the wildcard lost to prod's journal")
	own = f.ownership(t, api)
	assert.Equal(t, []string{"api.shop.example.com", "api.team"}, own.Claimable, "evil's hopeless wildcard withholds nothing")
	assert.Empty(t, own.Conflicts)
}

// The plans the first floors hand the sinks that serve on every replica (reconciler.serve,
// on followers and before the sinks start): a map published by a version without claim
// journals keeps its unheld names served while the leader's first reconcile journals them
// (an upgrade does not withdraw every gRPC listener); a new map's names are served only once
// journaled; a name another map journaled is never served provisionally.
func TestServeServesMapsPublishedBeforeJournals(t *testing.T) {
	f := newOwnershipFixture(t)
	route := httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "global"},
		HostTemplate: template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.example.com"))}
	sink := &servingSink{fakeSink: &fakeSink{name: "xds"}}
	rec := &reconciler{inputs: f.p.caches, hosts: route, sinks: []model.Sink{sink}}
	served := func(t *testing.T, ns, name string) *model.Plan {
		t.Helper()
		require.NoError(t, rec.serve(cache.NewObjectName(ns, name)))
		pl := sink.last(ns + "/" + name)
		require.NotNil(t, pl, "a plan is handed over")
		return pl
	}
	unjournaled := func(t *testing.T, ns, name string) []string {
		t.Helper()
		var out []string
		for _, c := range served(t, ns, name).Conflicts {
			if c.Unjournaled {
				out = append(out, c.Hostname)
			}
		}
		return out
	}

	f.addMap(t, "team", "fresh", "fresh", 1)
	f.addISVC(t, "team", "fresh", "")
	assert.Equal(t, []string{"fresh.team", "fresh.team.example.com"}, unjournaled(t, "team", "fresh"), "a new map waits for its journal")

	legacy := f.addMap(t, "prod", "chat", "chat", 0)
	f.addISVC(t, "prod", "chat", "shared.example.com")
	legacy = legacy.DeepCopy()
	legacy.Status.Published = true
	legacy.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: string(model.ReasonPublished)}}
	require.NoError(t, f.p.caches.maps[0].GetIndexer().Update(legacy))
	assert.Empty(t, unjournaled(t, "prod", "chat"), "published before journals: served while being journaled")

	holder := f.addMap(t, "other", "chat", "chat", 5)
	f.addISVC(t, "other", "chat", "shared.example.com")
	f.journal(t, holder, "chat.other", "shared.example.com")
	pl := served(t, "prod", "chat")
	require.Len(t, pl.Conflicts, 1)
	assert.Equal(t, "other", pl.Conflicts[0].Owner.Namespace, "a name another map journaled is not served provisionally")
}

func TestHostIndexKeysFindOverlaps(t *testing.T) {
	names := []string{"chat.example.com", "*.example.com", "a.b.example.com", "*.b.example.com", "example.com", "chat.prod", "*.com", "x.org"}
	for _, a := range names {
		for _, b := range names {
			index := map[string]bool{}
			for _, k := range model.HostIndexKeys(b) {
				index[k] = true
			}
			found := false
			for _, k := range model.HostLookupKeys(a) {
				found = found || index[k]
			}
			if model.HostnamesOverlap(a, b) {
				assert.True(t, found, "lookup of %s finds %s", a, b)
			}
		}
	}
}
