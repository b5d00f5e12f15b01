package report

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/weights"
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
	c, err := publish.Compute(publish.Inputs{TrafficMap: tm, SourceAnnotations: annotations})
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
	assert.Equal(t, XDSNotReported, s.Sinks.XDS)

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
		"xDS sink                   not reported in the Published condition (off, or not reached); the publisher's /debug/xds lists its clients\n",
	} {
		assert.Contains(t, table, want)
	}
}

// A malformed annotation shows the parser's error and the drains the publisher keeps: the
// ones recorded on the route, exactly what publish.Compute uses.
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

	var out bytes.Buffer
	require.NoError(t, Write(&out, s, "table"))
	assert.Contains(t, out.String(), "; the publisher keeps the last valid drains: maintenance-a on worker-a\n")
	assert.Contains(t, out.String(), "Stale: observedGeneration 2, generation 3")
}

func TestBuildMalformedWithoutRoute(t *testing.T) {
	tm := seedMap()
	s := Build(Objects{TrafficMap: tm, Source: source(map[string]string{weights.DrainAnnotation: `nope`})})
	assert.Equal(t, AnnotationMalformed, s.Drains.State)
	assert.Contains(t, s.Error, "no route was published before")
	assert.Nil(t, s.Clusters[0].Effective, "unknown, never read as no drains")
	assert.False(t, s.Sinks.HTTPRoute.Found)

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
	taints := []publish.ClusterTaints{publish.WorkloadClusterTaints("worker-a", map[string]string{
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

	bad := []publish.ClusterTaints{publish.WorkloadClusterTaints("worker-a", map[string]string{weights.TaintsAnnotation: `nope`})}
	s = Build(Objects{TrafficMap: tm, Source: source(nil), Clusters: bad})
	assert.Contains(t, s.Error, "no route records the last valid taints", "malformed taints are never no taints")
	assert.Nil(t, s.Clusters[0].Effective)
}

func TestXDSPartOfPublishedMessage(t *testing.T) {
	for msg, want := range map[string]string{
		"route prod/chat-global generation 2 accepted by gateway prod/global (controller x); xds version 3f2a ACKed by 2/2 clients; weights a=1": "xds version 3f2a ACKed by 2/2 clients",
		"waiting for xds clients: 1/2 ACKed a version with these weights":                                                                        "waiting for xds clients: 1/2 ACKed a version with these weights",
		"route prod/chat-global stored (gateway acceptance not required); no xds client is connected; weights a=1":                               "no xds client is connected",
		"route prod/chat-global generation 2 accepted by gateway prod/global (controller x); weights a=1":                                        "",
	} {
		assert.Equal(t, want, xdsPart(msg), msg)
	}
}
