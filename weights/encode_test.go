package weights

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeRoundTrip(t *testing.T) {
	maint := Taint{Key: "maintenance", Value: "planned", Effect: EffectNoExecute}
	bare := Taint{Key: "example.com/gpu", Effect: EffectNoSchedule}
	for _, tc := range []struct {
		name   string
		taints []Taint
		want   string
	}{
		{"none", nil, `[]`},
		{"empty", []Taint{}, `[]`},
		{"one with value", []Taint{maint}, `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`},
		{"value omitted when empty", []Taint{bare}, `[{"key":"example.com/gpu","effect":"NoSchedule"}]`},
		{"sorted as parsed", []Taint{bare, maint}, `[{"key":"example.com/gpu","effect":"NoSchedule"},{"key":"maintenance","value":"planned","effect":"NoExecute"}]`},
	} {
		t.Run("taints "+tc.name, func(t *testing.T) {
			got := EncodeTaints(tc.taints)
			assert.Equal(t, tc.want, got)
			back, err := ParseTaints(got)
			require.NoError(t, err)
			assert.Equal(t, append([]Taint{}, tc.taints...), back)
		})
	}

	for _, tc := range []struct {
		name string
		tols []Toleration
		want string
	}{
		{"none", nil, `[]`},
		{"exists and equal", []Toleration{{Key: "maintenance", Operator: OperatorExists}, {Key: "zone", Value: "a", Effect: EffectNoSchedule}},
			`[{"key":"maintenance","operator":"Exists"},{"key":"zone","value":"a","effect":"NoSchedule"}]`},
		{"everything", []Toleration{{Operator: OperatorExists, Effect: EffectNoExecute}}, `[{"operator":"Exists","effect":"NoExecute"}]`},
	} {
		t.Run("tolerations "+tc.name, func(t *testing.T) {
			got := EncodeTolerations(tc.tols)
			assert.Equal(t, tc.want, got)
			back, err := ParseTolerations(got)
			require.NoError(t, err)
			assert.Equal(t, append([]Toleration{}, tc.tols...), back)
		})
	}

	for _, tc := range []struct {
		name   string
		taints map[string][]Taint
		want   string
	}{
		{"none", map[string][]Taint{}, `{}`},
		{"untainted cluster is an empty list", map[string][]Taint{"worker-b": nil, "worker-a": {maint}},
			`{"worker-a":[{"key":"maintenance","value":"planned","effect":"NoExecute"}],"worker-b":[]}`},
	} {
		t.Run("cluster taints "+tc.name, func(t *testing.T) {
			got := EncodeClusterTaints(tc.taints)
			assert.Equal(t, tc.want, got)
			back, err := ParseClusterTaints(got)
			require.NoError(t, err)
			want := map[string][]Taint{}
			for c, list := range tc.taints {
				want[c] = append([]Taint{}, list...)
			}
			assert.Equal(t, want, back)
		})
	}
	for _, bad := range []string{`null`, `[]`, `{"worker-a":[{"key":"a"}]}`, `{`} {
		_, err := ParseClusterTaints(bad)
		assert.Error(t, err, bad)
	}

	drains := []Drain{{ID: "m-a", Cluster: "worker-a", Reason: "kernel upgrade"}, {ID: "m-b", Cluster: "worker-b", Reason: "r"}}
	assert.Equal(t, `{}`, EncodeDrains(nil))
	enc := EncodeDrains(drains)
	assert.Equal(t, `{"m-a":{"cluster":"worker-a","reason":"kernel upgrade"},"m-b":{"cluster":"worker-b","reason":"r"}}`, enc)
	back, err := ParseDrains(enc)
	require.NoError(t, err)
	assert.Equal(t, drains, back)
}
