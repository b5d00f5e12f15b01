package httproute

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/weights"
)

func TestFleetRecords(t *testing.T) {
	maint := weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}
	tols := []weights.Toleration{{Key: "maintenance", Operator: weights.OperatorExists}, {Key: "zone", Value: "a", Effect: weights.EffectNoSchedule}}
	assert.Equal(t, `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`, weights.EncodeTaints([]weights.Taint{maint}))
	assert.Equal(t, `[]`, weights.EncodeTaints(nil))
	assert.Equal(t, `[{"key":"maintenance","operator":"Exists"},{"key":"zone","value":"a","effect":"NoSchedule"}]`, weights.EncodeTolerations(tols))

	route := func(annotations map[string]string) *gwapiv1.HTTPRoute {
		return &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	rec := route(map[string]string{
		AnnotationClusterTaints:      weights.EncodeClusterTaints(map[string][]weights.Taint{"worker-a": {maint}, "worker-b": nil}),
		AnnotationServiceTolerations: weights.EncodeTolerations(tols),
	})
	assert.Equal(t, `{"worker-a":[{"key":"maintenance","value":"planned","effect":"NoExecute"}],"worker-b":[]}`, rec.Annotations[AnnotationClusterTaints])
	taints, ok := RecordedTaints(rec)
	require.True(t, ok)
	assert.Equal(t, map[string][]weights.Taint{"worker-a": {maint}, "worker-b": {}}, taints)
	gotTols, ok := RecordedTolerations(rec)
	require.True(t, ok)
	assert.Equal(t, tols, gotTols)

	for name, r := range map[string]*gwapiv1.HTTPRoute{
		"nil route":     nil,
		"no annotation": route(nil),
		"not an object": route(map[string]string{AnnotationClusterTaints: `[]`, AnnotationServiceTolerations: `{}`}),
		"bad list":      route(map[string]string{AnnotationClusterTaints: `{"worker-a":[{"key":"a"}]}`, AnnotationServiceTolerations: `[{"value":"x"}]`}),
		"null":          route(map[string]string{AnnotationClusterTaints: `null`, AnnotationServiceTolerations: `x`}),
	} {
		_, ok := RecordedTaints(r)
		assert.False(t, ok, name)
		_, ok = RecordedTolerations(r)
		assert.False(t, ok, name)
	}
}
