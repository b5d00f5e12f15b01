package weights_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

var (
	maintNoExec  = weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute}
	maintNoSched = weights.Taint{Key: "maintenance", Value: "planned", Effect: weights.EffectNoSchedule}
	gpuNoExec    = weights.Taint{Key: "modelplane.ai/gpu", Effect: weights.EffectNoExecute}
)

// TestTolerates pins the seed's matching rules one by one.
func TestTolerates(t *testing.T) {
	tests := []struct {
		name  string
		tol   weights.Toleration
		taint weights.Taint
		want  bool
	}{
		{"Exists same key ignores value", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists}, maintNoExec, true},
		{"Exists other key", weights.Toleration{Key: "other", Operator: weights.OperatorExists}, maintNoExec, false},
		{"Equal same key and value", weights.Toleration{Key: "maintenance", Operator: weights.OperatorEqual, Value: "planned"}, maintNoExec, true},
		{"Equal is the default operator", weights.Toleration{Key: "maintenance", Value: "planned"}, maintNoExec, true},
		{"Equal other value", weights.Toleration{Key: "maintenance", Value: "unplanned"}, maintNoExec, false},
		{"Equal empty value vs valued taint", weights.Toleration{Key: "maintenance"}, maintNoExec, false},
		{"Equal empty value vs valueless taint", weights.Toleration{Key: "modelplane.ai/gpu"}, gpuNoExec, true},
		{"Equal other key same value", weights.Toleration{Key: "other", Value: "planned"}, maintNoExec, false},
		{"empty key Exists tolerates everything", weights.Toleration{Operator: weights.OperatorExists}, maintNoExec, true},
		{"empty key Exists tolerates another key", weights.Toleration{Operator: weights.OperatorExists}, gpuNoExec, true},
		{"empty key Exists with effect NoSchedule only that effect", weights.Toleration{Operator: weights.OperatorExists, Effect: weights.EffectNoSchedule}, maintNoExec, false},
		{"empty key Equal matches nothing", weights.Toleration{Value: "planned"}, maintNoExec, false},
		{"empty effect matches NoExecute", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists}, maintNoExec, true},
		{"empty effect matches NoSchedule", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists}, maintNoSched, true},
		{"same effect", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists, Effect: weights.EffectNoExecute}, maintNoExec, true},
		{"other effect", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists, Effect: weights.EffectNoSchedule}, maintNoExec, false},
		{"unknown operator matches nothing", weights.Toleration{Key: "maintenance", Operator: "In"}, maintNoExec, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.tol.Tolerates(tc.taint))
		})
	}
}

func TestUntolerated(t *testing.T) {
	exists := func(key string) weights.Toleration {
		return weights.Toleration{Key: key, Operator: weights.OperatorExists}
	}
	tests := []struct {
		name   string
		taints []weights.Taint
		tols   []weights.Toleration
		want   []weights.Taint
	}{
		{"no taints", nil, nil, nil},
		{"NoSchedule never drains", []weights.Taint{maintNoSched}, nil, nil},
		{"untolerated NoExecute", []weights.Taint{maintNoExec}, nil, []weights.Taint{maintNoExec}},
		{"tolerated NoExecute", []weights.Taint{maintNoExec}, []weights.Toleration{exists("maintenance")}, nil},
		{"must tolerate every NoExecute taint", []weights.Taint{maintNoExec, gpuNoExec}, []weights.Toleration{exists("maintenance")}, []weights.Taint{gpuNoExec}},
		{"every NoExecute taint tolerated", []weights.Taint{gpuNoExec, maintNoExec, maintNoSched}, []weights.Toleration{exists("maintenance"), exists("modelplane.ai/gpu")}, nil},
		{"sorted and deduplicated", []weights.Taint{maintNoExec, gpuNoExec, maintNoExec}, nil, []weights.Taint{maintNoExec, gpuNoExec}},
		{"tolerate everything", []weights.Taint{maintNoExec, gpuNoExec}, []weights.Toleration{{Operator: weights.OperatorExists}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, weights.Untolerated(tc.taints, tc.tols))
		})
	}
}

func TestComputeWithTaints(t *testing.T) {
	in := weights.Input{
		Entries: []weights.Entry{entry("worker-b", 3), entry("worker-a", 7), entry("worker-c", 5)},
		Drains:  []weights.Drain{drain("maintenance-a", "worker-a")},
		Taints: map[string][]weights.Taint{
			"worker-a": {maintNoExec},
			"worker-b": {maintNoSched},
			"worker-c": {gpuNoExec, maintNoExec},
			"worker-z": {maintNoExec}, // no entry: ignored
		},
		Tolerations: []weights.Toleration{{Key: "modelplane.ai/gpu", Operator: weights.OperatorExists}},
	}
	res, err := weights.Compute(in)
	require.NoError(t, err)
	require.Len(t, res.Entries, 3)
	a, b, c := res.Entries[0], res.Entries[1], res.Entries[2]

	assert.Equal(t, "worker-a", a.Cluster)
	assert.Equal(t, int32(0), a.Effective)
	assert.Equal(t, []string{"maintenance-a"}, a.HeldBy)
	assert.Equal(t, []weights.Taint{maintNoExec}, a.Taints)

	assert.Equal(t, "worker-b", b.Cluster, "NoSchedule keeps the weight")
	assert.Equal(t, int32(3), b.Effective)
	assert.False(t, b.Drained())
	assert.Nil(t, b.Taints)

	assert.Equal(t, "worker-c", c.Cluster, "the tolerated taint is not listed, the other holds it")
	assert.Equal(t, int32(0), c.Effective)
	assert.True(t, c.Drained())
	assert.Nil(t, c.HeldBy)
	assert.Equal(t, []weights.Taint{maintNoExec}, c.Taints)
	assert.Equal(t, []string{"worker-a", "worker-c"}, res.Drained())

	// Without taints the result is what it always was.
	in.Taints, in.Tolerations = nil, nil
	res, err = weights.Compute(in)
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 3, 5}, []int32{res.Entries[0].Effective, res.Entries[1].Effective, res.Entries[2].Effective})
	for _, e := range res.Entries {
		assert.Nil(t, e.Taints)
	}
}

func TestComputeEveryClusterTainted(t *testing.T) {
	res, err := weights.Compute(weights.Input{
		Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1)},
		Taints:  map[string][]weights.Taint{"worker-a": {maintNoExec}, "worker-b": {maintNoExec}},
	})
	require.NoError(t, err)
	assert.True(t, res.AllZero())
	assert.Equal(t, []string{"worker-a", "worker-b"}, res.Drained())
}

func TestTaintAndTolerationString(t *testing.T) {
	assert.Equal(t, "maintenance=planned:NoExecute", maintNoExec.String())
	assert.Equal(t, "modelplane.ai/gpu:NoExecute", gpuNoExec.String())
	assert.Equal(t, "maintenance:Exists", weights.Toleration{Key: "maintenance", Operator: weights.OperatorExists}.String())
	assert.Equal(t, "*:Exists:NoExecute", weights.Toleration{Operator: weights.OperatorExists, Effect: weights.EffectNoExecute}.String())
	assert.Equal(t, "maintenance=planned", weights.Toleration{Key: "maintenance", Value: "planned"}.String())
}

func TestParseTaints(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []weights.Taint
		wantErr string
	}{
		{"null", `null`, []weights.Taint{}, ""},
		{"empty", ` [] `, []weights.Taint{}, ""},
		{"sorted", `[{"key":"modelplane.ai/gpu","effect":"NoExecute"},{"key":"maintenance","value":"planned","effect":"NoExecute"},{"key":"maintenance","value":"planned","effect":"NoSchedule"}]`,
			[]weights.Taint{maintNoExec, maintNoSched, gpuNoExec}, ""},
		{"empty input", ``, nil, "decode taint list: EOF"},
		{"object", `{"key":"a"}`, nil, "taint list must be a JSON array of objects, got object"},
		{"element not object", `["a"]`, nil, `taint [0] must be a JSON object, got string "a"`},
		{"unknown field", `[{"key":"a","effect":"NoExecute","operator":"Exists"}]`, nil, `taint [0] has unknown field "operator" (allowed: key, value, effect)`},
		{"duplicate field", `[{"key":"a","key":"b","effect":"NoExecute"}]`, nil, `taint [0] has duplicate field "key"`},
		{"non-string", `[{"key":"a","effect":1}]`, nil, `taint [0] field "effect" must be a string: got number 1`},
		{"missing key", `[{"effect":"NoExecute"}]`, nil, `taint [0]: field "key" is required`},
		{"empty key", `[{"key":"","effect":"NoExecute"}]`, nil, `taint [0]: key "": must be non-empty`},
		{"bad key", `[{"key":"a b","effect":"NoExecute"}]`, nil, `taint [0]: key "a b": must be a qualified name`},
		{"bad prefix", `[{"key":"Bad_/x","effect":"NoExecute"}]`, nil, `taint [0]: key "Bad_/x": must be a qualified name`},
		{"bad value", `[{"key":"a","value":" x","effect":"NoExecute"}]`, nil, `taint [0] (key "a"): value " x": must be at most 63 characters`},
		{"missing effect", `[{"key":"a"}]`, nil, `taint [0] (key "a"): field "effect" is required (NoSchedule or NoExecute)`},
		{"bad effect", `[{"key":"a","effect":"PreferNoSchedule"}]`, nil, `taint [0] (key "a"): effect "PreferNoSchedule" must be NoSchedule or NoExecute`},
		{"duplicate key and effect", `[{"key":"a","effect":"NoExecute"},{"key":"a","value":"x","effect":"NoExecute"}]`, nil, `taint [1]: duplicate of taint [0]: key "a" and effect NoExecute must be unique`},
		{"trailing", `[] []`, nil, "unexpected trailing JSON after the taint list: got array"},
		{"truncated", `[{"key":"a"`, nil, `taint [0]: close object: unexpected EOF`},
		{"unclosed list", `[{"key":"a","effect":"NoExecute"}`, nil, `close taint list: unexpected EOF`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.ParseTaints(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseTolerations(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []weights.Toleration
		wantErr string
	}{
		{"null", `null`, []weights.Toleration{}, ""},
		{"empty", `[]`, []weights.Toleration{}, ""},
		{"every shape, order kept", `[{"key":"maintenance","operator":"Exists"},{"key":"maintenance","operator":"Equal","value":"planned","effect":"NoExecute"},{"key":"a","value":"b"},{"operator":"Exists","effect":"NoSchedule"}]`,
			[]weights.Toleration{
				{Key: "maintenance", Operator: weights.OperatorExists},
				{Key: "maintenance", Operator: weights.OperatorEqual, Value: "planned", Effect: weights.EffectNoExecute},
				{Key: "a", Value: "b"},
				{Operator: weights.OperatorExists, Effect: weights.EffectNoSchedule},
			}, ""},
		{"object", `{}`, nil, "toleration list must be a JSON array of objects, got object"},
		{"unknown field", `[{"key":"a","tolerationSeconds":"1"}]`, nil, `toleration [0] has unknown field "tolerationSeconds"`},
		{"duplicate field", `[{"key":"a","operator":"Exists","operator":"Exists"}]`, nil, `toleration [0] has duplicate field "operator"`},
		{"non-string", `[{"key":true}]`, nil, `toleration [0] field "key" must be a string: got boolean true`},
		{"bad operator", `[{"key":"a","operator":"In"}]`, nil, `toleration [0] (key "a"): operator "In" must be Exists or Equal`},
		{"empty key needs Exists", `[{"value":"x"}]`, nil, `toleration [0]: an empty key needs operator Exists`},
		{"Exists takes no value", `[{"key":"a","operator":"Exists","value":"x"}]`, nil, `toleration [0] (key "a"): value "x" must be empty with operator Exists`},
		{"bad effect", `[{"key":"a","operator":"Exists","effect":"Never"}]`, nil, `toleration [0] (key "a"): effect "Never" must be NoSchedule, NoExecute or empty`},
		{"bad key", `[{"key":"-a","operator":"Exists"}]`, nil, `toleration [0]: key "-a": must be a qualified name`},
		{"second element", `[{"key":"a","operator":"Exists"},{"key":"a","operator":"exists"}]`, nil, `toleration [1] (key "a"): operator "exists" must be Exists or Equal`},
		{"trailing", `[]x`, nil, "unexpected trailing JSON after the toleration list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.ParseTolerations(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
