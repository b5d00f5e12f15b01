package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// Issue 25, item 1: a map in another namespace, OLDER than prod/chat, claims prod's names
// after prod claimed them: chat.<prod> (prod's gRPC name), chat.example.com (prod's global
// host) and *.<prod> (every gRPC name in prod). It takes nothing: real proxyless gRPC
// clients dialing prod's names reach prod's backends only (200/200), prod's route is
// untouched and prod stays Published, and the Envoy flavour has one virtual host for
// chat.example.com (prod's); the claimant is told why (HostnameNotEntitled for the gRPC-form names,
// HostnameConflict naming prod for the global host) with a Warning Event. On main the older
// map won all three.
func TestOlderNamespaceTakesNothing(t *testing.T) {
	prod := newFixture(t)
	evil := &fixture{t: t, ns: newNamespace(t), routing: standin.Routing{Client: tmc}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The stand-in gateway of prod.ns reports on routes of both namespaces.
	_, err := standin.StartGateway(ctx, kube, gw, prod.ns, gatewayName, t.Logf, standin.WithRouteNamespaces(evil.ns))
	require.NoError(t, err)

	// evil's map is created first, without a claim on prod's names.
	evil.isvcUID = evil.createISVC(service, nil)
	evilMap := evil.createMap([]v1beta1.TrafficMapEntry{{Cluster: "worker-a", Endpoint: localBackend(t, "evil-a"), Weight: 1}})
	// Creation timestamps have a resolution of one second: prod's map is the younger.
	require.Eventually(t, func() bool { return time.Now().After(evilMap.CreationTimestamp.Add(time.Second)) }, waitTimeout, tick)
	const shared = "chat.example.com"
	prod.setAnnotation(service, v1beta1.AnnotationGlobalHost, shared, false)
	prodMap := prod.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "prod-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: localBackend(t, "prod-b"), Weight: 1},
	})
	require.True(t, evilMap.CreationTimestamp.Before(&prodMap.CreationTimestamp), "evil's map is older")

	pub := prod.startPublisher(bothSinks, func(c *publish.Config) { c.Namespaces = []string{prod.ns, evil.ns} })
	evil.pub = pub
	grpcName := service + "." + prod.ns
	byGRPC := xdsClient(t, pub.xdsAddr, "grpc-prod", grpcName)
	byHost := xdsClient(t, pub.xdsAddr, "grpc-shared", shared)
	_, err = call(byGRPC)
	require.NoError(t, err)
	_, err = call(byHost)
	require.NoError(t, err)

	// prod claimed its names: they are in its claim journal. (Both clients reached prod
	// above; the condition may have turned True before the second subscribed, and a True
	// condition is not rewritten for a consumer count alone.)
	held := prod.waitPublished()
	require.NotNil(t, held.Status.Publisher)
	assert.Equal(t, publish.DefaultFieldManager, held.Status.Publisher.PublisherName)
	assert.Equal(t, []string{"grpc:" + grpcName, "hostname:" + shared}, held.Status.Publisher.ClaimedTargets)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, held.Status.Publisher.ObservedOptionsDigest)
	if lp := held.Status.Publisher.LastPositive; assert.NotNil(t, lp, "the positive plan in place is journaled") {
		assert.Equal(t, []v1beta1.TrafficMapPublisherTarget{{Target: "worker-a", Weight: 1}, {Target: "worker-b", Weight: 1}}, lp.Targets)
	}
	evil.waitPublished()
	route := prod.route()
	require.NotNil(t, route)
	assert.Equal(t, []gwapiv1.Hostname{shared}, route.Spec.Hostnames)

	for _, tc := range []struct {
		claim, reason string
		message       []string
	}{
		{grpcName, string(model.ReasonHostnameNotEntitled), []string{
			"inferenceservice " + evil.ns + "/chat metadata.annotations[ome.io/global-host] \"" + grpcName + "\" may not be claimed from namespace " + evil.ns,
			"is a gRPC name of namespace " + prod.ns + ", which only maps in namespace " + prod.ns + " may claim"}},
		{shared, string(model.ReasonHostnameConflict), []string{
			"hostname " + shared + " is held by trafficmap " + prod.ns + "/chat (hostname " + shared}},
		{"*." + prod.ns, string(model.ReasonHostnameNotEntitled), []string{
			"metadata.annotations[ome.io/global-host] \"*." + prod.ns + "\" may not be claimed from namespace " + evil.ns,
			"is a gRPC name of namespace " + prod.ns}},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			evil.t, prod.t = t, t
			evil.setAnnotation(service, v1beta1.AnnotationGlobalHost, tc.claim, false)
			told := evil.waitCondition(metav1.ConditionFalse, tc.reason, tc.message...)
			assert.False(t, told.Status.Published)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				found := slices.ContainsFunc(evil.events(), func(e corev1.Event) bool {
					return e.Type == corev1.EventTypeWarning && e.Reason == tc.reason
				})
				assert.True(c, found, "a Warning Event %s on the claimant", tc.reason)
			}, waitTimeout, tick)
			for _, n := range []string{"grpc:" + grpcName, "hostname:" + shared, "hostname:*." + prod.ns} {
				if told.Status.Publisher != nil {
					assert.NotContains(t, told.Status.Publisher.ClaimedTargets, n, "the claimant journaled none of prod's names")
				}
			}

			assert.Equal(t, map[string]int{}, without(spread(t, byGRPC, 200), "prod-a", "prod-b"), "prod's gRPC name reaches prod's backends only")
			assert.Equal(t, map[string]int{}, without(spread(t, byHost, 200), "prod-a", "prod-b"), "prod's hostname reaches prod's backends only")

			after := prod.route()
			require.NotNil(t, after, "prod's route is not deleted")
			assert.Equal(t, route.UID, after.UID)
			assert.Equal(t, route.ResourceVersion, after.ResourceVersion, "prod's route is untouched")
			now := prod.getMap()
			assert.True(t, now.Status.Published, "prod stays published: %+v", published(now))
			assert.Equal(t, metav1.ConditionTrue, published(now).Status)
			assert.Equal(t, held.Status.Publisher.ClaimedTargets, now.Status.Publisher.ClaimedTargets)
		})
	}
	evil.t, prod.t = t, t
	got := spread(t, byGRPC, 200)
	assert.Equal(t, 200, got["prod-a"]+got["prod-b"], "%v", got)
	assert.Positive(t, got["prod-a"], "%v", got)
	assert.Positive(t, got["prod-b"], "%v", got)
	// The Envoy flavour agrees (an Envoy's fetch, which counts as a client of prod's map
	// until it leaves, so it comes last).
	assert.Equal(t, []string{prod.ns + "/chat"}, envoyVirtualHosts(t, pub, shared), "one virtual host has the shared domain: prod's")
}

// without is counts without the keys.
func without(counts map[string]int, keys ...string) map[string]int {
	out := map[string]int{}
	for k, v := range counts {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// Two deployments of the publisher under the same name share a claim namespace and watch
// disjoint namespaces (two releases side by side, or a second replica set, as the chaos
// run's -gateways does): neither touches the other's claim records. Before, each one's
// claim-record watch queued the other's maps, which were absent from its cache and so
// looked deleted: their teardown deleted the other's records, whose followers then withheld
// the hostnames and held every map Publishing (found by the chaos run).
func TestSharedClaimNamespaceKeepsTheOtherDeploymentsRecords(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	claims := newNamespace(t)
	for _, f := range []*fixture{a, b} {
		f.createMap([]v1beta1.TrafficMapEntry{{Cluster: "worker-a", Endpoint: localBackend(t, "a"), Weight: 1}})
		f.startPublisher(bothSinks, func(c *publish.Config) { c.ClaimNamespace = claims })
	}
	a.waitPublished()
	b.waitPublished()
	records := []string{model.ClaimRecordName(publish.DefaultFieldManager, a.ns, service), model.ClaimRecordName(publish.DefaultFieldManager, b.ns, service)}
	ctx := context.Background()
	present := func() bool {
		for _, name := range records {
			if _, err := kube.CoreV1().ConfigMaps(claims).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false
			}
		}
		return true
	}
	require.Eventually(t, present, waitTimeout, tick, "both maps' claim records are written")
	// Each deployment's record watch has seen the other's record by now; a change of b's
	// map writes b's record again, which a sees too.
	b.setAnnotation(service, v1beta1.AnnotationGlobalHost, "b.example.com", false)
	require.Eventually(t, func() bool {
		r := b.route()
		return r != nil && slices.Equal(r.Spec.Hostnames, []gwapiv1.Hostname{"b.example.com"})
	}, waitTimeout, tick, "b publishes its new hostname")
	b.waitPublished()
	require.Never(t, func() bool { return !present() }, 3*time.Second, tick, "a deployment deleted the other's claim record")
}
