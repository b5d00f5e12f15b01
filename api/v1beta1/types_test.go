package v1beta1_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"

	omev1beta1 "github.com/trafficmap/publisher/api/v1beta1"
)

var testDigest = "sha256:" + strings.Repeat("ab", 32)

func fullTrafficMap() *omev1beta1.TrafficMap {
	factor := resource.MustParse("1500m")
	reported := int32(3)
	probed := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &omev1beta1.TrafficMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "models", Generation: 4},
		Spec: omev1beta1.TrafficMapSpec{
			Service:                "llama",
			Mode:                   omev1beta1.PlacementModeSplitByCapacity,
			ObservedISVCGeneration: 7,
			Entries: []omev1beta1.TrafficMapEntry{
				{
					Cluster:  "east",
					Endpoint: "https://llama.east.example.com",
					Weight:   600000,
					Healthy:  true,
					Capacity: &omev1beta1.TrafficMapCapacity{
						Allocated: 3, Ready: 3, Factor: &factor,
						Source: omev1beta1.CapacitySourceEndpoint, Reported: &reported,
					},
					Probe: &omev1beta1.TrafficMapProbe{
						PolicyDigest: testDigest, Result: omev1beta1.ProbeResultPassing,
						LastProbeTime: &probed, Message: "ok",
					},
				},
				{Cluster: "west", Weight: 0, DrainRefs: []string{"d1", "d2"}},
			},
		},
		Status: omev1beta1.TrafficMapStatus{
			SourceUID:                    "uid-1",
			Published:                    true,
			GatewayRef:                   &omev1beta1.TrafficMapGatewayRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "llama"},
			ObservedTrafficMapGeneration: 4,
			Publisher: &omev1beta1.TrafficMapPublisherStatus{
				PublisherName:         "gatewayapi",
				ClaimedTargets:        []string{"v1:httproute:models/llama"},
				ObservedOptionsDigest: testDigest,
				LastPositive: &omev1beta1.TrafficMapPublisherLastPositive{
					TrafficMapGeneration: 4, ObservedISVCGeneration: 7, PlanCompatibilityDigest: testDigest,
					Targets: []omev1beta1.TrafficMapPublisherTarget{{Target: "east", Weight: 600000}, {Target: "west", Weight: 0}},
				},
			},
			Conditions: []metav1.Condition{{
				Type: omev1beta1.ConditionRoutable, Status: metav1.ConditionTrue, Reason: "Routable",
				Message: "1 home(s) serving", LastTransitionTime: probed, ObservedGeneration: 4,
			}},
		},
	}
}

func TestTrafficMapJSONRoundTrip(t *testing.T) {
	in := fullTrafficMap()

	data, err := json.Marshal(in)
	require.NoError(t, err)

	var out omev1beta1.TrafficMap
	require.NoError(t, json.Unmarshal(data, &out))
	// Quantities cache their string form and times decode as local time, so
	// compare semantically, as the apiserver does.
	assert.True(t, equality.Semantic.DeepEqual(in, &out), "round trip changed the object:\n%s", diff.Diff(in, &out))

	// A zero weight is meaningful and must be serialized; empty optional fields must not be.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	west := raw["spec"].(map[string]any)["entries"].([]any)[1].(map[string]any)
	assert.Equal(t, map[string]any{"cluster": "west", "weight": float64(0), "drainRefs": []any{"d1", "d2"}}, west)
	targets := raw["status"].(map[string]any)["publisher"].(map[string]any)["lastPositive"].(map[string]any)["targets"].([]any)
	assert.Equal(t, map[string]any{"target": "west", "weight": float64(0)}, targets[1])
}

func TestTrafficMapDeepCopyIsIndependent(t *testing.T) {
	orig := fullTrafficMap()
	want := fullTrafficMap()

	cp := orig.DeepCopy()
	require.Equal(t, orig, cp)

	cp.Spec.Entries[0].Weight = 1
	cp.Spec.Entries[0].Capacity.Allocated = 99
	*cp.Spec.Entries[0].Capacity.Reported = 99
	cp.Spec.Entries[0].Capacity.Factor.Set(42)
	cp.Spec.Entries[0].Probe.LastProbeTime.Time = time.Time{}
	cp.Spec.Entries[1].DrainRefs[0] = "changed"
	cp.Status.GatewayRef.Name = "changed"
	cp.Status.Publisher.ClaimedTargets[0] = "changed"
	cp.Status.Publisher.LastPositive.Targets[0].Weight = 1
	cp.Status.Conditions[0].Reason = "Changed"
	cp.Spec.Entries = append(cp.Spec.Entries, omev1beta1.TrafficMapEntry{Cluster: "north"})

	assert.Equal(t, want, orig)

	obj := orig.DeepCopyObject()
	assert.Equal(t, orig, obj)
	assert.NotSame(t, orig, obj)

	list := &omev1beta1.TrafficMapList{Items: []omev1beta1.TrafficMap{*orig}}
	listCopy := list.DeepCopyObject().(*omev1beta1.TrafficMapList)
	listCopy.Items[0].Spec.Entries[0].Weight = 5
	assert.Equal(t, want.Spec.Entries[0].Weight, list.Items[0].Spec.Entries[0].Weight)
}

func TestAddToScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, omev1beta1.AddToScheme(scheme))

	for _, kind := range []string{"TrafficMap", "TrafficMapList", "ListOptions"} {
		assert.True(t, scheme.Recognizes(omev1beta1.SchemeGroupVersion.WithKind(kind)), kind)
	}
	gvks, _, err := scheme.ObjectKinds(&omev1beta1.TrafficMap{})
	require.NoError(t, err)
	assert.Equal(t, []schema.GroupVersionKind{{Group: "ome.io", Version: "v1beta1", Kind: "TrafficMap"}}, gvks)

	assert.Equal(t, schema.GroupResource{Group: "ome.io", Resource: "trafficmaps"}, omev1beta1.Resource("trafficmaps"))
	assert.Equal(t, schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "trafficmaps"}, omev1beta1.TrafficMapsResource)
	assert.Equal(t, schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "inferenceservices"}, omev1beta1.InferenceServicesResource)
}
