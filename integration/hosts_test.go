package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// localBackend starts a gRPC backend for cluster and returns its endpoint by DNS name
// (localhost), which the HTTPRoute sink needs for an ExternalName Service.
func localBackend(t *testing.T, cluster string) string {
	t.Helper()
	return strings.Replace(xdstest.StartBackend(t, cluster), "127.0.0.1", "localhost", 1)
}

// Two InferenceServices in two namespaces carry the same ome.io/global-host. The older
// TrafficMap owns the hostname on both sinks: its route holds it, a real proxyless gRPC
// client dialing it reaches only the owner's backends, while the newer map reports
// HostnameConflict naming the owner (with a Warning Event), has no route, and is still
// reached under its own "<service>.<namespace>" name. Deleting the owner hands the hostname
// over: the newer map's route is written, Published turns True and the client follows.
func TestHostnameOwnership(t *testing.T) {
	owner := newFixture(t)
	loser := &fixture{t: t, ns: newNamespace(t), routing: standin.Routing{Client: tmc}}
	// The stand-in gateway of owner.ns reports on routes of both namespaces.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err := standin.StartGateway(ctx, kube, gw, owner.ns, gatewayName, t.Logf, standin.WithRouteNamespaces(loser.ns))
	require.NoError(t, err)

	shared := "chat." + owner.ns + ".shared.example.com"
	owner.setAnnotation(service, v1beta1.AnnotationGlobalHost, shared, false)
	ownerMap := owner.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "owner-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: localBackend(t, "owner-b"), Weight: 1},
	})
	// Creation timestamps have a resolution of one second: the second map is created in a
	// later second, so it is the younger without the namespace/name tie-break deciding.
	require.Eventually(t, func() bool { return time.Now().After(ownerMap.CreationTimestamp.Add(time.Second)) }, waitTimeout, tick)
	loser.isvcUID = loser.createISVC(service, map[string]string{v1beta1.AnnotationGlobalHost: shared})
	loser.createMap([]v1beta1.TrafficMapEntry{{Cluster: "worker-a", Endpoint: localBackend(t, "loser-a"), Weight: 1}})

	pub := owner.startPublisher(bothSinks, func(c *publish.Config) { c.Namespaces = []string{owner.ns, loser.ns} })
	loser.pub = pub

	sharedClient := xdsClient(t, pub.xdsAddr, "grpc-shared", shared)
	loserClient := xdsClient(t, pub.xdsAddr, "grpc-loser", service+"."+loser.ns)
	_, err = call(sharedClient)
	require.NoError(t, err)
	_, err = call(loserClient)
	require.NoError(t, err)

	// Only the client dialing the shared name uses the owner's map: the other one dialed the
	// loser's own name and neither blocks nor counts for it.
	owner.waitPublishedWith("ACKed by 1/1 clients")
	require.NotNil(t, owner.route())
	assert.Equal(t, []gwapiv1.Hostname{gwapiv1.Hostname(shared)}, owner.route().Spec.Hostnames)
	conflict := loser.waitCondition(metav1.ConditionFalse, string(model.ReasonHostnameConflict),
		"hostname "+shared+" is held by trafficmap "+owner.ns+"/chat",
		"httproute "+loser.ns+"/chat-global is not written with the contested hostname")
	assert.Nil(t, loser.route(), "the newer map's route is not written")
	assert.False(t, conflict.Status.Published)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		found := false
		for _, e := range loser.events() {
			found = found || e.Type == corev1.EventTypeWarning && e.Reason == string(model.ReasonHostnameConflict)
		}
		assert.True(c, found, "a Warning Event HostnameConflict on the newer map")
	}, waitTimeout, tick)

	// publisher status names the owner, typed (recomputed with the publisher's rule).
	op := admin(t)
	st := op.status(t, loser.ns)
	byName := map[string]report.Hostname{}
	for _, h := range st.Hostnames {
		byName[h.Name] = h
	}
	assert.Equal(t, map[string]report.Hostname{
		service + "." + loser.ns: {Name: service + "." + loser.ns, Held: true},
		shared: {Name: shared, Owner: &report.HostnameOwner{Kind: "TrafficMap", Namespace: owner.ns, Name: service, Hostname: shared,
			Created: ownerMap.CreationTimestamp}},
	}, byName)
	table := op.run(t, "status", service, "-n", loser.ns)
	require.Equal(t, 0, table.code, table.stderr)
	assert.Contains(t, table.stdout, shared+" held by trafficmap "+owner.ns+"/chat")

	got := spread(t, sharedClient, 200)
	assert.Zero(t, got["loser-a"], "the shared host reaches the owner's backends only: %v", got)
	assert.Equal(t, 200, got["owner-a"]+got["owner-b"], "%v", got)
	assert.Positive(t, got["owner-a"], "%v", got)
	assert.Positive(t, got["owner-b"], "%v", got)
	assert.Equal(t, map[string]int{"loser-a": 50}, spread(t, loserClient, 50), "the newer map's own gRPC name still works")
	assert.Equal(t, []string{owner.ns + "/chat"}, envoyVirtualHosts(t, pub, shared), "one virtual host has the shared domain: the owner's")
	owner.waitPublishedWith("ACKed by 1/1 clients") // the Envoy client has left again

	// Hand-over: the owner is deleted.
	require.NoError(t, tmc.OmeV1beta1().TrafficMaps(owner.ns).Delete(ctxFor(t), service, metav1.DeleteOptions{}))
	loser.waitPublishedWith("ACKed by 2/2 clients") // both names are the loser's now
	assert.Equal(t, map[string]int{"loser-a": 100}, spread(t, sharedClient, 100), "Published True: the shared host already goes to the new owner")
	route := loser.route()
	require.NotNil(t, route)
	assert.Equal(t, []gwapiv1.Hostname{gwapiv1.Hostname(shared)}, route.Spec.Hostnames)
	require.Eventually(t, func() bool { return owner.route() == nil }, waitTimeout, tick, "the deleted owner's route is removed")
	assert.Equal(t, []string{loser.ns + "/chat"}, envoyVirtualHosts(t, pub, shared))
}

// envoyVirtualHosts fetches the Envoy flavour's shared route configuration as an Envoy
// would (ADS, state of the world), checks that no domain is listed twice, and returns the
// names of the virtual hosts listing domain. The client disconnects before it returns.
func envoyVirtualHosts(t *testing.T, r *runningPublisher, domain string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	stream, err := adsClient(t, r).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-hosts", UserAgentName: "envoy"},
		TypeUrl: resource.RouteType, ResourceNames: []string{xds.DefaultEnvoyOptions.RouteConfigName}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.Len(t, resp.GetResources(), 1)
	rc := &routev3.RouteConfiguration{}
	require.NoError(t, resp.GetResources()[0].UnmarshalTo(rc))
	seen := map[string]string{}
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			require.NotContains(t, seen, d, "domain %s of %s is also %s's", d, vh.GetName(), seen[d])
			seen[d] = vh.GetName()
		}
		if slices.Contains(vh.GetDomains(), domain) {
			out = append(out, vh.GetName())
		}
	}
	return out
}

// A foreign HTTPRoute (not managed by the publisher) on the same Gateway with the map's
// hostname and a "/" match, older than the map's route: the gateway would give it the
// traffic, so the map reports HostnameConflict naming the route and writes no route; once
// the foreign route is gone the map is published.
func TestForeignRouteHoldsHostname(t *testing.T) {
	f := newFixture(t)
	host := "chat." + f.ns + ".example.com" // the fixture's --host-template name
	legacy, err := gw.GatewayV1().HTTPRoutes(f.ns).Create(ctxFor(t), &gwapiv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: f.ns},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Name: gatewayName}}},
			Hostnames:       []gwapiv1.Hostname{"*." + gwapiv1.Hostname(f.ns) + ".example.com"},
			Rules:           []gwapiv1.HTTPRouteRule{{BackendRefs: []gwapiv1.HTTPBackendRef{{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{Name: "legacy", Port: ptrTo(gwapiv1.PortNumber(80))}}}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.createMap(seedEntries())
	f.startPublisher()

	f.waitCondition(metav1.ConditionFalse, string(model.ReasonHostnameConflict),
		"hostname "+host+" is held by httproute "+f.ns+"/legacy (hostname *."+f.ns+".example.com")
	assert.Nil(t, f.route(), "no route is written for a hostname a foreign route holds")

	require.NoError(t, gw.GatewayV1().HTTPRoutes(f.ns).Delete(ctxFor(t), legacy.Name, metav1.DeleteOptions{}))
	f.waitPublished()
	require.NotNil(t, f.route())
	assert.Equal(t, []gwapiv1.Hostname{gwapiv1.Hostname(host)}, f.route().Spec.Hostnames)
}
