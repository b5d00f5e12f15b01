package weights_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

// FuzzTolerates checks the matching invariants on generated taints and tolerations.
func FuzzTolerates(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 1, 1, 1, 0, 2, 1, 0, 0, 2, 1})
	f.Add([]byte{4, 1, 2, 1, 0, 2, 0, 1, 2, 3, 3, 0, 0, 1, 2, 2, 1, 0})
	keys := []string{"maintenance", "modelplane.ai/gpu", "", "zone"}
	values := []string{"", "planned", "x"}
	effects := []weights.Effect{weights.EffectNoExecute, weights.EffectNoSchedule, ""}
	operators := []weights.Operator{weights.OperatorExists, weights.OperatorEqual, "", "In"}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		pick := func(n int) int { return int(r.byte()) % n }
		var taints []weights.Taint
		for range pick(5) {
			key := keys[pick(len(keys))]
			if key == "" {
				key = "k"
			}
			taints = append(taints, weights.Taint{Key: key, Value: values[pick(len(values))], Effect: effects[pick(2)]})
		}
		var tols []weights.Toleration
		for range pick(4) {
			tols = append(tols, weights.Toleration{
				Key: keys[pick(len(keys))], Operator: operators[pick(len(operators))],
				Value: values[pick(len(values))], Effect: effects[pick(len(effects))],
			})
		}
		before := slices.Clone(taints)
		got := weights.Untolerated(taints, tols)
		require.Equal(t, before, taints, "input not mutated")

		for i, u := range got {
			require.Equal(t, weights.EffectNoExecute, u.Effect, "only NoExecute taints hold traffic")
			require.Contains(t, taints, u)
			if i > 0 {
				require.NotEqual(t, got[i-1], u, "deduplicated")
			}
			for _, tol := range tols {
				require.False(t, tol.Tolerates(u), "%v tolerates %v, which is reported untolerated", tol, u)
			}
		}
		for _, taint := range taints {
			if taint.Effect == weights.EffectNoExecute && !slices.Contains(got, taint) {
				require.True(t, slices.ContainsFunc(tols, func(tol weights.Toleration) bool { return tol.Tolerates(taint) }),
					"%v left out but nothing tolerates it", taint)
			}
			// Rules hold for every taint.
			require.True(t, weights.Toleration{Operator: weights.OperatorExists}.Tolerates(taint), "empty key Exists tolerates everything")
			require.True(t, weights.Toleration{Key: taint.Key, Operator: weights.OperatorExists}.Tolerates(taint), "Exists ignores the value")
			require.True(t, weights.Toleration{Key: taint.Key, Value: taint.Value}.Tolerates(taint), "Equal with key and value")
			require.True(t, weights.Toleration{Key: taint.Key, Value: taint.Value, Effect: taint.Effect}.Tolerates(taint), "same effect")
			other := weights.EffectNoSchedule
			if taint.Effect == weights.EffectNoSchedule {
				other = weights.EffectNoExecute
			}
			require.False(t, weights.Toleration{Operator: weights.OperatorExists, Effect: other}.Tolerates(taint), "other effect")
			require.False(t, weights.Toleration{Key: taint.Key, Value: taint.Value + "-"}.Tolerates(taint), "Equal needs the value")
		}

		// Order of either list does not matter, and more tolerations never drain more.
		require.Equal(t, got, weights.Untolerated(reversed(taints), reversed(tols)))
		more := append(slices.Clone(tols), weights.Toleration{Key: keys[pick(len(keys))], Operator: weights.OperatorExists})
		for _, u := range weights.Untolerated(taints, more) {
			require.Contains(t, got, u, "adding a toleration added a hold")
		}

		// Compute agrees: an entry is drained exactly when it has untolerated NoExecute taints.
		res, err := weights.Compute(weights.Input{
			Entries:     []weights.Entry{entry("worker-a", 5), entry("worker-b", 3)},
			Taints:      map[string][]weights.Taint{"worker-a": taints},
			Tolerations: tols,
		})
		require.NoError(t, err)
		require.Equal(t, got, res.Entries[0].Taints)
		require.Equal(t, got != nil, res.Entries[0].Drained())
		if got != nil {
			require.Equal(t, int32(0), res.Entries[0].Effective)
		} else {
			require.Equal(t, int32(5), res.Entries[0].Effective)
		}
		require.Equal(t, int32(3), res.Entries[1].Effective)
	})
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// FuzzParseTaints checks that the parser never panics, that what it accepts is valid and
// sorted, and that re-encoding and parsing again is the identity.
func FuzzParseTaints(f *testing.F) {
	for _, s := range []string{`null`, `[]`, `[{"key":"maintenance","value":"planned","effect":"NoExecute"}]`,
		`[{"key":"a","effect":"NoSchedule"},{"key":"a","effect":"NoExecute"}]`, `[{"key":"a","key":"a"}]`, `[{"key":"a/b/c","effect":"NoExecute"}]`, `[1]`} {
		f.Add(s)
	}
	type taintJSON struct {
		Key    string `json:"key"`
		Value  string `json:"value,omitempty"`
		Effect string `json:"effect"`
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := weights.ParseTaints(value)
		if err != nil {
			require.Nil(t, got)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotNil(t, got)
		enc := make([]taintJSON, len(got))
		for i, tt := range got {
			require.NotEmpty(t, tt.Key)
			require.Contains(t, []weights.Effect{weights.EffectNoExecute, weights.EffectNoSchedule}, tt.Effect)
			if i > 0 {
				require.False(t, got[i-1].Key == tt.Key && got[i-1].Effect == tt.Effect, "unique key and effect")
			}
			enc[i] = taintJSON{Key: tt.Key, Value: tt.Value, Effect: string(tt.Effect)}
		}
		require.True(t, slices.IsSortedFunc(got, func(a, b weights.Taint) int {
			if a.Key != b.Key {
				return compareStrings(a.Key, b.Key)
			}
			return compareStrings(string(a.Effect), string(b.Effect))
		}))
		raw, err := json.Marshal(enc)
		require.NoError(t, err)
		again, err := weights.ParseTaints(string(raw))
		require.NoError(t, err, "re-parse %s", raw)
		require.Equal(t, got, again)
	})
}

// FuzzParseTolerations checks the toleration parser the same way.
func FuzzParseTolerations(f *testing.F) {
	for _, s := range []string{`null`, `[]`, `[{"operator":"Exists"}]`, `[{"key":"a","operator":"Equal","value":"b","effect":"NoExecute"}]`,
		`[{"key":"a","value":"b"}]`, `[{"value":"x"}]`, `[{"key":"a","operator":"Exists","value":"x"}]`} {
		f.Add(s)
	}
	type tolJSON struct {
		Key      string `json:"key,omitempty"`
		Operator string `json:"operator,omitempty"`
		Value    string `json:"value,omitempty"`
		Effect   string `json:"effect,omitempty"`
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := weights.ParseTolerations(value)
		if err != nil {
			require.Nil(t, got)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotNil(t, got)
		enc := make([]tolJSON, len(got))
		for i, tol := range got {
			require.Contains(t, []weights.Operator{weights.OperatorExists, weights.OperatorEqual, ""}, tol.Operator)
			if tol.Key == "" {
				require.Equal(t, weights.OperatorExists, tol.Operator, "empty key only with Exists")
			}
			if tol.Operator == weights.OperatorExists {
				require.Empty(t, tol.Value)
			}
			enc[i] = tolJSON{Key: tol.Key, Operator: string(tol.Operator), Value: tol.Value, Effect: string(tol.Effect)}
		}
		raw, err := json.Marshal(enc)
		require.NoError(t, err)
		again, err := weights.ParseTolerations(string(raw))
		require.NoError(t, err, "re-parse %s", raw)
		require.Equal(t, got, again)
	})
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
