package report

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

const seedValue = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`

func seedMap() *v1beta1.TrafficMap {
	return &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", Generation: 3},
		Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1},
			{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1},
		}},
		Status: v1beta1.TrafficMapStatus{Conditions: []metav1.Condition{{
			Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, Reason: "Published", ObservedGeneration: 3, Message: "ok",
		}}},
	}
}

func source(annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "chat", UID: "u1", Annotations: annotations}}
}

// builtRoute is what the publisher stores for tm with these drains, accepted by prod/global.
func builtRoute(t *testing.T, tm *v1beta1.TrafficMap, annotations map[string]string, accepted bool) *gwapiv1.HTTPRoute {
	t.Helper()
	c, err := model.Compute(model.Inputs{TrafficMap: tm, SourceAnnotations: annotations})
	require.NoError(t, err)
	cfg := httproute.Config{Gateway: types.NamespacedName{Namespace: "prod", Name: "global"}}
	d, err := httproute.Build(cfg, httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"},
		c.Result, httproute.Inputs{Generation: tm.Generation, Drains: c.Drains})
	require.NoError(t, err)
	r := d.Route
	r.Generation = 2
	if accepted {
		r.Status.Parents = []gwapiv1.RouteParentStatus{{
			ParentRef:      r.Spec.ParentRefs[0],
			ControllerName: "example.com/gateway",
			Conditions: []metav1.Condition{
				{Type: "Accepted", Status: metav1.ConditionTrue, ObservedGeneration: 2, Reason: "Accepted"},
				{Type: "ResolvedRefs", Status: metav1.ConditionTrue, ObservedGeneration: 2, Reason: "ResolvedRefs"},
			},
		}}
	}
	return r
}

func TestBuildDrained(t *testing.T) {
	tm := seedMap()
	ann := map[string]string{weights.DrainAnnotation: `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"},"typo":{"cluster":"worker-c","reason":"oops"}}`}
	tm.Spec.Entries[1].DrainRefs = []string{"maintenance-a", "old"}
	s := Build(Objects{TrafficMap: tm, Source: source(ann), Route: builtRoute(t, tm, ann, true)})

	require.Empty(t, s.Error)
	require.Len(t, s.Clusters, 2)
	a, b := s.Clusters[0], s.Clusters[1]
	assert.Equal(t, "worker-a", a.Cluster)
	assert.Equal(t, int32(1), a.Weight)
	assert.Equal(t, int32(0), *a.Effective)
	assert.Equal(t, []Hold{{ID: "maintenance-a", Reason: "planned maintenance", Source: "both"}, {ID: "old", Source: "drainRefs"}}, a.HeldBy)
	assert.Equal(t, int32(1), *b.Effective)
	assert.Empty(t, b.HeldBy)
	assert.Equal(t, []Drain{{ID: "typo", Cluster: "worker-c", Reason: "oops"}}, s.Pending)
	assert.Equal(t, AnnotationValid, s.Drains.State)
	assert.Equal(t, Current, s.Published.Freshness)

	r := s.Sinks.HTTPRoute
	assert.True(t, r.Found && r.Owned && r.MatchesComputed)
	assert.Equal(t, "prod/chat-global", r.Name)
	assert.Equal(t, "prod/global", r.Gateway)
	assert.Equal(t, VerdictAccepted, r.Verdict)
	assert.Equal(t, []RouteWeight{
		{Cluster: "worker-a", Backend: httproute.ServiceName("prod", "chat", "worker-a"), Weight: 0},
		{Cluster: "worker-b", Backend: httproute.ServiceName("prod", "chat", "worker-b"), Weight: 1},
	}, r.Weights)
	assert.Equal(t, XDSSink{Clients: []XDSClient{}}, s.Sinks.XDS, "not read without --publisher-url")

	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	table := out.String()
	for _, want := range []string{
		"TrafficMap prod/chat generation 3, InferenceService chat\n",
		"CLUSTER    WEIGHT   EFFECTIVE   HELD BY\n",
		`worker-a   1        0           maintenance-a "planned maintenance", old (drainRefs only)` + "\n",
		"worker-b   1        1           -\n",
		`typo   worker-c   "oops"`,
		"Drain annotation           Valid: maintenance-a on worker-a, typo on worker-c\n",
		"Published                  True (Published), Current: observedGeneration 3 is the generation\n",
		"HTTPRoute sink             route prod/chat-global generation 2 (trafficmap generation 3): worker-a=0, worker-b=1\n",
		"Route weights = computed   yes\n",
		"Gateway                    prod/global: Accepted at route generation 2\n",
		"Message                    ok\n",
		"xDS sink                   " + XDSUnavailable + "\n",
	} {
		assert.Contains(t, table, want)
	}
	assert.NotContains(t, table, "XDS CLIENT")

	out.Reset()
	require.NoError(t, Write(&out, s, "json"))
	assert.Contains(t, out.String(), `"xds": {
      "reported": false,
      "clients": []
    }`)
}

// A malformed annotation shows the parser's error and the drains the publisher keeps: the
// ones recorded on the route, exactly what model.Compute uses.
func TestBuildMalformedKeepsRecordedDrains(t *testing.T) {
	tm := seedMap()
	route := builtRoute(t, tm, map[string]string{weights.DrainAnnotation: seedValue}, true)
	bad := map[string]string{weights.DrainAnnotation: `{"maintenance-a":{"cluster":"worker-a"}}`}
	tm.Status.Conditions[0].ObservedGeneration = 2
	s := Build(Objects{TrafficMap: tm, Source: source(bad), Route: route})

	assert.Equal(t, AnnotationMalformed, s.Drains.State)
	assert.Contains(t, s.Drains.Error, `override "maintenance-a" reason must be non-empty`)
	assert.Equal(t, []Drain{{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}}, s.Drains.InEffect)
	assert.Equal(t, int32(0), *s.Clusters[0].Effective)
	assert.Equal(t, Stale, s.Published.Freshness)

	assert.False(t, s.Drains.NoFallback)
	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	assert.Contains(t, out.String(), "; the publisher keeps the last valid drains: maintenance-a on worker-a\n")
	assert.Contains(t, out.String(), "Stale: observedGeneration 2, generation 3")
}

func TestBuildMalformedWithoutRoute(t *testing.T) {
	tm := seedMap()
	s := Build(Objects{TrafficMap: tm, Source: source(map[string]string{weights.DrainAnnotation: `nope`})})
	assert.Equal(t, AnnotationMalformed, s.Drains.State)
	assert.True(t, s.Drains.NoFallback)
	assert.Contains(t, s.Error, model.ErrNoDrainFallback.Error())
	assert.Nil(t, s.Clusters[0].Effective, "unknown, never read as no drains")
	assert.False(t, s.Sinks.HTTPRoute.Found)
	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	assert.Contains(t, out.String(), "Drain annotation   Malformed: "+s.Drains.Error+"\n", "no last valid drains to speak of")

	ct := ForCluster("worker-a", "prod", []Status{s})
	require.Len(t, ct.Services, 1, "an uncomputable map is not shown as empty")
	assert.Nil(t, ct.Services[0].Effective)
}

func TestBuildForeignRouteAndMissingSource(t *testing.T) {
	tm := seedMap()
	route := builtRoute(t, tm, nil, false)
	route.Labels = map[string]string{"app": "other"}
	route.Annotations[httproute.AnnotationDrains] = seedValue
	s := Build(Objects{TrafficMap: tm, Source: source(map[string]string{weights.DrainAnnotation: "bad"}), Route: route})
	assert.Contains(t, s.Error, "no route was published before", "a foreign route's record is not trusted")
	assert.True(t, s.Sinks.HTTPRoute.Found)
	assert.False(t, s.Sinks.HTTPRoute.Owned)

	s = Build(Objects{TrafficMap: tm})
	assert.Contains(t, s.Error, "inferenceservice prod/chat named by spec.service does not exist")
}

func TestBuildPendingVerdictWithGatewayOverride(t *testing.T) {
	tm := seedMap()
	route := builtRoute(t, tm, nil, true)
	s := Build(Objects{TrafficMap: tm, Source: source(nil), Route: route, Gateway: types.NamespacedName{Namespace: "infra", Name: "other"}})
	assert.Equal(t, "infra/other", s.Sinks.HTTPRoute.Gateway)
	assert.Equal(t, VerdictPending, s.Sinks.HTTPRoute.Verdict)
	assert.Equal(t, AnnotationAbsent, s.Drains.State)
}

func TestForCluster(t *testing.T) {
	tm := seedMap()
	ann := map[string]string{weights.DrainAnnotation: seedValue}
	drained := Build(Objects{TrafficMap: tm, Source: source(ann)})
	other := seedMap()
	other.Namespace, other.Name, other.Spec.Service = "dev", "embed", "embed"
	serving := Build(Objects{TrafficMap: other, Source: source(nil)})

	ct := ForCluster("worker-a", "", []Status{drained, serving})
	require.Len(t, ct.Services, 1)
	assert.Equal(t, "embed", ct.Services[0].Service)
	assert.Equal(t, "True/Current", ct.Services[0].Published)

	var out bytes.Buffer
	require.NoError(t, Write(&out, ForCluster("worker-a", "prod", []Status{drained}), "table"))
	assert.Equal(t, "No service in namespace prod sends traffic to workload cluster worker-a.\n", out.String())

	out.Reset()
	require.NoError(t, Write(&out, ct, "json"))
	var got ClusterTraffic
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	assert.Equal(t, ct, got)
}

func TestBuildFleetTaints(t *testing.T) {
	tm := seedMap()
	taints := []model.ClusterTaints{model.WorkloadClusterTaints("worker-a", map[string]string{
		weights.TaintsAnnotation: `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`,
	})}
	s := Build(Objects{TrafficMap: tm, Source: source(nil), Clusters: taints})
	require.Empty(t, s.Error)
	assert.Equal(t, int32(0), *s.Clusters[0].Effective)
	assert.Equal(t, []string{"maintenance=planned:NoExecute"}, s.Clusters[0].Taints)
	assert.Empty(t, s.Clusters[0].HeldBy)

	tolerated := map[string]string{weights.TolerationsAnnotation: `[{"key":"maintenance","operator":"Exists","effect":"NoExecute"}]`}
	s = Build(Objects{TrafficMap: tm, Source: source(tolerated), Clusters: taints})
	assert.Equal(t, int32(1), *s.Clusters[0].Effective, "a tolerated taint holds nothing")

	bad := []model.ClusterTaints{model.WorkloadClusterTaints("worker-a", map[string]string{weights.TaintsAnnotation: `nope`})}
	s = Build(Objects{TrafficMap: tm, Source: source(nil), Clusters: bad})
	assert.Contains(t, s.Error, "no route records the last valid taints", "malformed taints are never no taints")
	assert.Nil(t, s.Clusters[0].Effective)
}

// The Published condition is shown field by field, its message verbatim, and the xDS client
// state comes from the publisher's /debug/xds document, never from the message.
func TestBuildPublishedAndXDSClients(t *testing.T) {
	tm := seedMap()
	at := metav1.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC)
	tm.Status.Conditions[0] = metav1.Condition{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse, Reason: "XDSRejected",
		ObservedGeneration: 3, LastTransitionTime: at,
		Message: "xds client envoy-b rejected version v2 (Cluster): tls context unsupported; xds version v9 ACKed by 7/7 clients"}
	state := &model.XDSDebugState{
		Snapshots: map[model.Flavour]map[string]string{model.FlavourEnvoy: {"Cluster": "v2", "Listener": "v1", "RouteConfiguration": "v3"}},
		Clients: []model.XDSDebugClient{
			{NodeID: "envoy-b", Flavour: model.FlavourEnvoy, Acked: map[string]string{"Cluster": "v1", "Listener": "v1", "RouteConfiguration": "v3"},
				Nacked: map[string]model.XDSNack{"Cluster": {Version: "v2", Message: "tls context unsupported"}}},
			{NodeID: "envoy-a", Flavour: model.FlavourEnvoy, Acked: map[string]string{"Cluster": "v2", "Listener": "v1", "RouteConfiguration": "v3"}},
			{NodeID: "grpc-a", Flavour: model.FlavourGRPC, Acked: map[string]string{}},
			{NodeID: "odd node\x1b[2J", Flavour: model.FlavourGRPC, Acked: map[string]string{}},
		},
		Maps: []model.XDSDebugMap{
			{Key: "prod/other", Relevant: []string{"grpc-a/sotw-3"}, Acked: []string{}},
			{Key: "prod/chat", Relevant: []string{"envoy-a/delta-1", "envoy-b/delta-2", "odd node\x1b[2J/sotw-4"}, Acked: []string{"envoy-a/delta-1"}},
		},
	}
	s := Build(Objects{TrafficMap: tm, Source: source(nil), XDS: state, XDSSource: "http://127.0.0.1:8080/debug/xds"})

	assert.Equal(t, Published{Status: "False", Reason: "XDSRejected", Message: tm.Status.Conditions[0].Message, ObservedGeneration: 3,
		LastTransitionTime: &at, Freshness: Current}, s.Published)
	assert.Equal(t, XDSSink{
		Reported: true, Source: "http://127.0.0.1:8080/debug/xds",
		Served: map[model.Flavour]map[string]string{model.FlavourEnvoy: {"Cluster": "v2", "Listener": "v1", "RouteConfiguration": "v3"}},
		Clients: []XDSClient{
			{NodeID: "envoy-a", Flavour: model.FlavourEnvoy, Acked: map[string]string{"Cluster": "v2", "Listener": "v1", "RouteConfiguration": "v3"}, Current: true},
			{NodeID: "envoy-b", Flavour: model.FlavourEnvoy, Acked: map[string]string{"Cluster": "v1", "Listener": "v1", "RouteConfiguration": "v3"},
				Nacked: map[string]XDSNack{"Cluster": {Version: "v2", Message: "tls context unsupported"}}},
			{NodeID: "grpc-a", Flavour: model.FlavourGRPC, Acked: map[string]string{}},
			{NodeID: "odd node\x1b[2J", Flavour: model.FlavourGRPC, Acked: map[string]string{}},
		},
		Map: &XDSMap{Relevant: []string{"envoy-a/delta-1", "envoy-b/delta-2", "odd node\x1b[2J/sotw-4"}, Acked: []string{"envoy-a/delta-1"},
			Waiting: []string{"envoy-b/delta-2", "odd node\x1b[2J/sotw-4"}},
	}, s.Sinks.XDS, "the document's state, sorted; the message's \"7/7\" is not read")
	state.Snapshots[model.FlavourEnvoy]["Cluster"] = "changed"
	assert.Equal(t, "v2", s.Sinks.XDS.Served[model.FlavourEnvoy]["Cluster"], "Build copies its input")

	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	table := out.String()
	for _, want := range []string{
		"Published          False (XDSRejected), Current: observedGeneration 3 is the generation\n",
		"Last transition    2026-12-03T09:30:00Z\n",
		"Message            " + tm.Status.Conditions[0].Message + "\n",
		"xDS sink           publisher http://127.0.0.1:8080/debug/xds serves envoy: Cluster=v2, Listener=v1, RouteConfiguration=v3; 1/4 connected clients ACKed the versions served; " +
			`this map: 1/3 relevant clients ACKed its content, waiting for envoy-b/delta-2, "odd node\x1b[2J/sotw-4"` + "\n",
		"\nXDS CLIENT          FLAVOUR   STATE     ACKED                                            NACKED\n" +
			"envoy-a             envoy     Current   Cluster=v2, Listener=v1, RouteConfiguration=v3   -\n" +
			"envoy-b             envoy     Behind    Cluster=v1, Listener=v1, RouteConfiguration=v3   Cluster=v2 \"tls context unsupported\"\n" +
			"grpc-a              grpc      Behind    nothing                                          -\n" +
			`"odd node\x1b[2J"   grpc      Behind    nothing                                          -` + "\n",
	} {
		assert.Contains(t, table, want)
	}

	out.Reset()
	require.NoError(t, Write(&out, s, "yaml"))
	var back Status
	require.NoError(t, yaml.Unmarshal(out.Bytes(), &back))
	assert.Equal(t, s.Sinks.XDS, back.Sinks.XDS)
	assert.True(t, at.Equal(back.Published.LastTransitionTime), "lastTransitionTime round-trips")
}

// ReadXDS decodes what the xDS server's own debug handler serves.
func TestReadXDSFromDebugHandler(t *testing.T) {
	srv := xds.NewServer(xds.ServerConfig{})
	versions, err := srv.SetResources(context.Background(), model.FlavourGRPC, xds.Resources{})
	require.NoError(t, err)
	require.NotEmpty(t, versions)
	hs := httptest.NewServer(srv.DebugHandler())
	t.Cleanup(hs.Close)

	u, err := DebugXDSURL(hs.URL)
	require.NoError(t, err)
	assert.Equal(t, hs.URL+"/debug/xds", u)
	d, err := ReadXDS(context.Background(), hs.Client(), u)
	require.NoError(t, err)
	require.Len(t, d.Snapshots[model.FlavourGRPC], len(versions))
	for typeURL, v := range versions {
		assert.Equal(t, v, d.Snapshots[model.FlavourGRPC][path.Ext(typeURL)[1:]])
	}
	assert.Empty(t, d.Clients)

	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	_, err = ReadXDS(context.Background(), missing.Client(), missing.URL+"/debug/xds")
	assert.ErrorContains(t, err, "404 Not Found: the publisher serves /debug/xds only with its xds sink on, at its --debug-address when set, else its --http-address")

	for _, bad := range []string{"127.0.0.1:8080", "ftp://h", "http://", "http://h?x=1", "http://u:p@h"} {
		_, err := DebugXDSURL(bad)
		assert.Error(t, err, bad)
	}
	u, err = DebugXDSURL("https://publisher.example.com/prefix/")
	require.NoError(t, err)
	assert.Equal(t, "https://publisher.example.com/prefix/debug/xds", u)
}

// The map's names are resolved with the publisher's rule over the other maps' claims: an
// older map holding the same global host is named as the owner, in the typed form and in
// the table; the gRPC name stays the map's.
func TestBuildHostnameConflict(t *testing.T) {
	o := Objects{TrafficMap: seedMap(), Source: source(map[string]string{v1beta1.AnnotationGlobalHost: "chat.example.com"}), ClaimsRead: true}
	o.TrafficMap.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC))
	older := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	o.Claims = []model.Claim{
		{Kind: model.KindTrafficMap, Namespace: "staging", Name: "chat", Created: older, Names: []string{"chat.staging", "chat.example.com"}},
		{Kind: model.KindTrafficMap, Namespace: "zeta", Name: "chat", Created: older.Add(2 * time.Hour), Names: []string{"chat.zeta", "chat.prod"}},
	}
	s := Build(o)
	assert.Equal(t, []Hostname{
		{Name: "chat.example.com", Owner: &HostnameOwner{Kind: "TrafficMap", Namespace: "staging", Name: "chat", Hostname: "chat.example.com", Created: metav1.NewTime(older)}},
		{Name: "chat.prod", Held: true},
	}, s.Hostnames)
	var out strings.Builder
	require.NoError(t, Write(&out, s, "table"))
	assert.Regexp(t, `\nHostnames +chat\.example\.com held by trafficmap staging/chat \(chat\.example\.com, created 2026-12-03T10:00:00Z\), chat\.prod held\n`, out.String())

	o.Claims = nil
	var plain strings.Builder
	require.NoError(t, Write(&plain, Build(o), "table"))
	assert.NotContains(t, plain.String(), "Hostnames", "no line while the map holds every name")
}

// The PublicationFallback condition is shown field by field, its message verbatim, and only
// when the map has one.
func TestBuildPublicationFallback(t *testing.T) {
	tm := seedMap()
	s := Build(Objects{TrafficMap: tm, Source: source(nil)})
	assert.Nil(t, s.PublicationFallback)
	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	assert.NotContains(t, out.String(), "Fallback")

	tm.Status.Conditions = append(tm.Status.Conditions, metav1.Condition{Type: v1beta1.ConditionPublicationFallback,
		Status: metav1.ConditionTrue, Reason: string(model.FallbackLastValidDrains), ObservedGeneration: 3,
		Message: "trafficmap prod/chat is served from a retained plan, not from its current inputs: keeping the last valid drains (m-a on worker-a)"})
	s = Build(Objects{TrafficMap: tm, Source: source(nil)})
	assert.Equal(t, &Condition{Status: "True", Reason: "LastValidDrainsRetained", ObservedGeneration: 3,
		Message: "trafficmap prod/chat is served from a retained plan, not from its current inputs: keeping the last valid drains (m-a on worker-a)"},
		s.PublicationFallback)
	out.Reset()
	require.NoError(t, Write(&out, s, "table"))
	assert.Contains(t, out.String(), "\nFallback           True (LastValidDrainsRetained): trafficmap prod/chat is served from a retained plan")
	out.Reset()
	require.NoError(t, Write(&out, s, "json"))
	var back Status
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	assert.Equal(t, s.PublicationFallback, back.PublicationFallback)
}
