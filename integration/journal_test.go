package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/publish"
)

// forgeJournal writes status.publisher of the fixture's map as a tenant that may write its
// map's status would (a namespace-admin role with a wildcard grants trafficmaps/status).
func (f *fixture) forgeJournal(j *v1beta1.TrafficMapPublisherStatus) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tm, err := tmc.OmeV1beta1().TrafficMaps(f.ns).Get(ctxFor(f.t), service, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tm.Status.Publisher = j
		_, err = tmc.OmeV1beta1().TrafficMaps(f.ns).UpdateStatus(ctxFor(f.t), tm, metav1.UpdateOptions{})
		return err
	}))
}

// namedNamespace creates the namespace name for one test and deletes it afterwards.
func namedNamespace(t *testing.T, name string) string {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// olderNeighbour sets up issue 43's scene: evil's map, in a namespace that sorts before
// prod's, is created first (the older map), without a claim; then prod/chat, with
// chat.example.com and two backends. The stand-in gateway of prod reports on both.
func olderNeighbour(t *testing.T) (prod, evil *fixture) {
	t.Helper()
	prod = newFixture(t)
	evil = &fixture{t: t, ns: namedNamespace(t, "aaa-"+prod.ns), routing: standin.Routing{Client: tmc}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err := standin.StartGateway(ctx, kube, gw, prod.ns, gatewayName, t.Logf, standin.WithRouteNamespaces(evil.ns))
	require.NoError(t, err)
	evil.isvcUID = evil.createISVC(service, nil)
	evilMap := evil.createMap([]v1beta1.TrafficMapEntry{{Cluster: "worker-a", Endpoint: localBackend(t, "evil-a"), Weight: 1}})
	require.Eventually(t, func() bool { return time.Now().After(evilMap.CreationTimestamp.Add(time.Second)) }, waitTimeout, tick)
	prod.setAnnotation(service, v1beta1.AnnotationGlobalHost, sharedHost, false)
	prodMap := prod.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "prod-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: localBackend(t, "prod-b"), Weight: 1},
	})
	require.True(t, evilMap.CreationTimestamp.Before(&prodMap.CreationTimestamp), "evil's map is older")
	return prod, evil
}

const sharedHost = "chat.example.com"

// assertProdServes checks that prod/chat keeps chat.example.com: its route is the one it
// had, with the name, and it stays Published with the name in its journal.
func assertProdServes(t *testing.T, prod *fixture, route *gwapiv1.HTTPRoute) {
	t.Helper()
	if route != nil {
		after := prod.route()
		require.NotNil(t, after, "prod's route is not deleted")
		assert.Equal(t, route.UID, after.UID)
		assert.Equal(t, []gwapiv1.Hostname{sharedHost}, after.Spec.Hostnames)
	}
	now := prod.getMap()
	assert.True(t, now.Status.Published, "prod stays published: %+v", published(now))
	require.NotNil(t, now.Status.Publisher)
	assert.Contains(t, now.Status.Publisher.ClaimedTargets, "hostname:"+sharedHost)
}

// D1 (issue 43) on the real API server: evil/x's tenant, whose map is older than prod/chat,
// claims chat.example.com and writes its own claim journal: the shared name, prod's gRPC
// name and *.com, none of which the publisher granted it (a backdated claim: by the old rule
// the older journaled map won). It takes nothing: prod's route keeps its hostname, prod stays
// Published, real gRPC clients dialing chat.example.com reach prod's backends only, the
// Envoy flavour has one virtual host for the name (prod's); evil is told which entries were
// ignored and why (Warning Event ClaimJournalIgnored), and its journal loses them. The
// grant is recorded in the publisher's namespace, not where the tenant writes.
func TestForgedJournalTakesNothing(t *testing.T) {
	prod, evil := olderNeighbour(t)
	pub := prod.startPublisher(bothSinks, func(c *publish.Config) { c.Namespaces = []string{prod.ns, evil.ns} })
	evil.pub = pub
	byHost := xdsClient(t, pub.xdsAddr, "grpc-shared", sharedHost)
	_, err := call(byHost)
	require.NoError(t, err)
	held := prod.waitPublished()
	assert.Contains(t, held.Status.Publisher.ClaimedTargets, "hostname:"+sharedHost)
	evil.waitPublished()
	route := prod.route()
	require.NotNil(t, route)
	records, err := kube.CoreV1().ConfigMaps("default").List(ctxFor(t), metav1.ListOptions{LabelSelector: "publisher.trafficmap.dev/claim-record-for"})
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(records.Items, func(cm corev1.ConfigMap) bool {
		return cm.Annotations["publisher.trafficmap.dev/map"] == prod.ns+"/chat" && strings.Contains(cm.Annotations["publisher.trafficmap.dev/grants"], sharedHost+"=")
	}), "prod's grant is recorded in the publisher's namespace")

	forged := []string{"grpc:chat." + evil.ns, "grpc:chat." + prod.ns, "hostname:*.com", "hostname:" + sharedHost}
	evil.setAnnotation(service, v1beta1.AnnotationGlobalHost, sharedHost, false)
	evil.forgeJournal(&v1beta1.TrafficMapPublisherStatus{PublisherName: publish.DefaultFieldManager, ClaimedTargets: forged})

	// evil's claim loses to prod's grant (by the old rule the older journaled map won it).
	evil.waitCondition(metav1.ConditionFalse, "HostnameConflict", "hostname "+sharedHost+" is held by trafficmap "+prod.ns+"/chat")
	assertProdServes(t, prod, route)
	assert.Equal(t, map[string]int{}, without(spread(t, byHost, 100), "prod-a", "prod-b"), "the shared name reaches prod's backends only")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		found := slices.ContainsFunc(evil.events(), func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == "ClaimJournalIgnored" &&
				strings.Contains(e.Message, "status.publisher.claimedTargets") && strings.Contains(e.Message, "hostname:"+sharedHost)
		})
		assert.True(c, found, "a Warning Event ClaimJournalIgnored names the ignored entries")
	}, waitTimeout, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j := evil.getMap().Status.Publisher
		require.NotNil(c, j)
		for _, f := range forged[1:] {
			assert.NotContains(c, j.ClaimedTargets, f, "the forged entry is not kept")
		}
	}, waitTimeout, tick)
	// The Envoy flavour agrees (an Envoy's fetch counts as a client of prod's map until it
	// leaves, so it comes last).
	assert.Equal(t, []string{prod.ns + "/chat"}, envoyVirtualHosts(t, pub, sharedHost), "one virtual host has the shared name: prod's")
}

// D2 (issue 43) on the real API server, at start: evil/x (older, and first in key order)
// claims chat.example.com and its tenant forges its journal to name another publisher, with
// the shared name in it, while no publisher runs. A publisher starting then decides by the
// same rules as in steady state, not by key order: prod/chat serves the name on xDS, evil/x
// does not, and prod's route keeps it.
func TestForgedPublisherNameAtStart(t *testing.T) {
	prod, evil := olderNeighbour(t)
	cfg := func(c *publish.Config) { c.Namespaces = []string{prod.ns, evil.ns} }
	first := prod.startPublisher(bothSinks, cfg)
	prod.waitPublished()
	evil.pub = first
	evil.waitPublished()
	route := prod.route()
	require.NotNil(t, route)
	first.stop(t)

	evil.setAnnotation(service, v1beta1.AnnotationGlobalHost, sharedHost, false)
	evil.forgeJournal(&v1beta1.TrafficMapPublisherStatus{PublisherName: "someone-else",
		ClaimedTargets: []string{"grpc:chat." + evil.ns, "hostname:" + sharedHost}})

	pub := prod.startPublisher(bothSinks, cfg)
	byHost := xdsClient(t, pub.xdsAddr, "grpc-shared", sharedHost)
	_, err := call(byHost)
	require.NoError(t, err, "the shared name is served at start")
	assert.Equal(t, map[string]int{}, without(spread(t, byHost, 100), "prod-a", "prod-b"), "the shared name reaches prod's backends only")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		found := slices.ContainsFunc(evil.events(), func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == "PublisherChanged" && strings.Contains(e.Message, "is not a known publisher")
		})
		assert.True(c, found, "evil is told its journal names an unknown publisher")
	}, waitTimeout, tick)
	prod.waitPublished()
	assertProdServes(t, prod, route)
	// The Envoy flavour agrees (an Envoy's fetch counts as a client of prod's map until it
	// leaves, so it comes last).
	assert.Equal(t, []string{prod.ns + "/chat"}, envoyVirtualHosts(t, pub, sharedHost), "one virtual host has the shared name: prod's")
}

// The upgrade import (issue 43): a fleet journaled by a version without claim records.
// prod/chat's journal holds chat.example.com; evil/chat's, younger and forged before the
// upgrade, holds prod's gRPC name (outside the claim policy) and chat.example.com (the older
// map's). The first leader imports the journals once, before its first reconcile, under the
// claim policy and the old rule: prod keeps its name, recorded as granted at its
// creationTimestamp; none of evil's forged entries is imported; the marker is written.
func TestUpgradeImportsJournalsOnce(t *testing.T) {
	prod := newFixture(t)
	prod.setAnnotation(service, v1beta1.AnnotationGlobalHost, sharedHost, false)
	prodMap := prod.createMap(seedEntries())
	name := "upgrade-" + prod.ns // a publisher name no record exists for yet
	writeJournal(t, prod, &v1beta1.TrafficMapPublisherStatus{PublisherName: name,
		ClaimedTargets: []string{"grpc:chat." + prod.ns, "hostname:" + sharedHost}})
	evil := &fixture{t: t, ns: newNamespace(t), routing: standin.Routing{Client: tmc}}
	evil.isvcUID = evil.createISVC(service, map[string]string{v1beta1.AnnotationGlobalHost: sharedHost})
	require.Eventually(t, func() bool { return time.Now().After(prodMap.CreationTimestamp.Add(time.Second)) }, waitTimeout, tick)
	evil.createMap(seedEntries())
	writeJournal(t, evil, &v1beta1.TrafficMapPublisherStatus{PublisherName: name,
		ClaimedTargets: []string{"grpc:chat." + evil.ns, "grpc:chat." + prod.ns, "hostname:" + sharedHost}})

	prod.startPublisher(func(c *publish.Config) {
		c.PublisherName, c.ClaimNamespace, c.Namespaces = name, prod.ns, []string{prod.ns, evil.ns}
		c.Sinks, c.XDSAddress = []string{publish.SinkXDS}, "127.0.0.1:0"
	})
	held := prod.waitPublished()
	assert.Contains(t, held.Status.Publisher.ClaimedTargets, "hostname:"+sharedHost)
	evil.waitCondition(metav1.ConditionFalse, "HostnameConflict", "hostname "+sharedHost+" is held by trafficmap "+prod.ns+"/chat")

	list, err := kube.CoreV1().ConfigMaps(prod.ns).List(ctxFor(t), metav1.ListOptions{LabelSelector: "publisher.trafficmap.dev/claim-record-for"})
	require.NoError(t, err)
	grants := map[string]string{}
	marker := false
	for _, cm := range list.Items {
		if strings.HasSuffix(cm.Name, "-imported") {
			marker = true
			continue
		}
		grants[cm.Annotations["publisher.trafficmap.dev/map"]] = cm.Annotations["publisher.trafficmap.dev/grants"]
	}
	assert.True(t, marker, "the import marker is written")
	assert.Equal(t, map[string]string{prod.ns + "/chat": sharedHost + "=" + prodMap.CreationTimestamp.UTC().Format("2006-01-02T15:04:05.000Z")}, grants,
		"prod's name is imported, granted at its creationTimestamp; none of evil's entries is")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		j := evil.getMap().Status.Publisher
		require.NotNil(c, j)
		assert.Equal(c, []string{"grpc:chat." + evil.ns}, j.ClaimedTargets, "evil's journal keeps only its own gRPC name")
	}, waitTimeout, tick)
}
