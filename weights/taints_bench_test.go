package weights_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/trafficmap/publisher/weights"
)

// taintedInput is benchInput(n) with every cluster carrying three taints (one NoSchedule,
// two NoExecute) and the service tolerating one of them, so half the NoExecute taints hold.
func taintedInput(n int) weights.Input {
	in := benchInput(n)
	in.Taints = make(map[string][]weights.Taint, n)
	for _, e := range in.Entries {
		in.Taints[e.Cluster] = []weights.Taint{
			{Key: "maintenance", Value: "planned", Effect: weights.EffectNoExecute},
			{Key: "maintenance", Value: "planned", Effect: weights.EffectNoSchedule},
			{Key: "modelplane.ai/gpu-" + e.Cluster, Effect: weights.EffectNoExecute},
		}
	}
	in.Tolerations = []weights.Toleration{
		{Key: "maintenance", Operator: weights.OperatorExists},
		{Key: "zone", Value: "a", Effect: weights.EffectNoSchedule},
	}
	return in
}

func BenchmarkComputeWithTaints(b *testing.B) {
	for _, n := range []int{2, 16} {
		in := taintedInput(n)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := weights.Compute(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUntolerated(b *testing.B) {
	in := taintedInput(1)
	taints := in.Taints[in.Entries[0].Cluster]
	b.ReportAllocs()
	for b.Loop() {
		_ = weights.Untolerated(taints, in.Tolerations)
	}
}

func BenchmarkParseTaints(b *testing.B) {
	for _, n := range []int{1, 16} {
		list := make([]map[string]string, n)
		for i := range list {
			list[i] = map[string]string{"key": fmt.Sprintf("modelplane.ai/key-%02d", i), "value": "planned", "effect": "NoExecute"}
		}
		raw, err := json.Marshal(list)
		if err != nil {
			b.Fatal(err)
		}
		value := string(raw)
		b.Run(fmt.Sprintf("taints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(value)))
			for b.Loop() {
				if _, err := weights.ParseTaints(value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseTolerations(b *testing.B) {
	value := `[{"key":"maintenance","operator":"Exists"},{"key":"zone","operator":"Equal","value":"a","effect":"NoSchedule"},{"operator":"Exists","effect":"NoSchedule"}]`
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := weights.ParseTolerations(value); err != nil {
			b.Fatal(err)
		}
	}
}
