package weights_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/trafficmap/publisher/weights"
)

// benchInput has n entries in reverse cluster order, a few drains (two on one
// cluster, one pending) and one entry held by its drain refs.
func benchInput(n int) weights.Input {
	in := weights.Input{Entries: make([]weights.Entry, 0, n)}
	for i := n - 1; i >= 0; i-- {
		in.Entries = append(in.Entries, entry(fmt.Sprintf("worker-%02d", i), int64(i+1)))
	}
	in.Entries[n-1].DrainRefs = []string{"old-drain"}
	in.Drains = []weights.Drain{
		drain("maintenance-a", "worker-00"),
		drain("upgrade", "worker-00"),
		drain("future", "worker-99"),
	}
	if n > 1 {
		in.Drains = append(in.Drains, drain("maintenance-b", "worker-01"))
	}
	return in
}

func BenchmarkCompute(b *testing.B) {
	for _, n := range []int{2, 8, 16} {
		in := benchInput(n)
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

func BenchmarkParseDrains(b *testing.B) {
	for _, n := range []int{1, 64} {
		obj := make(map[string]map[string]string, n)
		for i := range n {
			obj[fmt.Sprintf("drain-%03d", i)] = map[string]string{
				"cluster": fmt.Sprintf("worker-%02d", i%16),
				"reason":  "planned maintenance window",
			}
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			b.Fatal(err)
		}
		value := string(raw)
		b.Run(fmt.Sprintf("drains=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(value)))
			for b.Loop() {
				if _, err := weights.ParseDrains(value); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
