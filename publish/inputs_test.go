package publish

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

func TestCompute(t *testing.T) {
	tm := &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
		{Cluster: "worker-b", Endpoint: "https://b.example.com", Weight: 1},
		{Cluster: "worker-a", Endpoint: "https://a.example.com", Weight: 1, DrainRefs: []string{"old"}},
	}}}
	tm.Name, tm.Namespace = "chat", "prod"
	drainB := []weights.Drain{{ID: "m-b", Cluster: "worker-b", Reason: "r"}}
	res, err := weights.Compute(weights.Input{Entries: entries(tm), Drains: drainB})
	require.NoError(t, err)
	built, err := httproute.Build(httproute.Config{Gateway: types.NamespacedName{Name: "g"}},
		httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com"}, res, httproute.Inputs{Drains: drainB})
	require.NoError(t, err)
	malformed := map[string]string{weights.DrainAnnotation: `{"x":{}}`}

	tests := []struct {
		name      string
		in        Inputs
		effective map[string]int32
		drainErr  bool
		err       error
	}{
		{"no annotation: drainRefs still hold", Inputs{TrafficMap: tm}, map[string]int32{"worker-a": 0, "worker-b": 1}, false, nil},
		{"valid annotation", Inputs{TrafficMap: tm, SourceAnnotations: map[string]string{weights.DrainAnnotation: `{"m-b":{"cluster":"worker-b","reason":"r"}}`}},
			map[string]int32{"worker-a": 0, "worker-b": 0}, false, nil},
		{"malformed, route records drains", Inputs{TrafficMap: tm, SourceAnnotations: malformed, Route: built.Route},
			map[string]int32{"worker-a": 0, "worker-b": 0}, true, nil},
		{"malformed, no route", Inputs{TrafficMap: tm, SourceAnnotations: malformed}, nil, false, ErrNoDrainFallback},
		{"invalid map", Inputs{TrafficMap: &v1beta1.TrafficMap{Spec: v1beta1.TrafficMapSpec{Entries: []v1beta1.TrafficMapEntry{{Cluster: "a", Endpoint: "ftp://x"}}}}},
			nil, false, weights.ErrEndpointInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(tc.in)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			eff := map[string]int32{}
			for _, e := range got.Result.Entries {
				eff[e.Cluster] = e.Effective
			}
			assert.Equal(t, tc.effective, eff)
			assert.Equal(t, tc.drainErr, got.DrainErr != nil)
		})
	}
}
