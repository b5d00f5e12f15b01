package weights_test

import (
	"fmt"

	"github.com/trafficmap/publisher/weights"
)

func Example() {
	annotations := map[string]string{
		weights.DrainAnnotation: `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`,
	}
	drains, err := weights.ParseDrains(annotations[weights.DrainAnnotation])
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := weights.Compute(weights.Input{
		Entries: []weights.Entry{
			{Cluster: "worker-b", Endpoint: "https://worker-b.example.com", Weight: 3},
			{Cluster: "worker-a", Endpoint: "https://worker-a.example.com:8443", Weight: 7},
		},
		Drains: drains,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range res.Entries {
		fmt.Println(e.Cluster, e.Endpoint.Host, e.Endpoint.Port, e.Weight, e.Effective, e.HeldBy)
	}
	fmt.Println("total", res.TotalEffective(), "drained", res.Drained())
	// Output:
	// worker-a worker-a.example.com 8443 7 0 [maintenance-a]
	// worker-b worker-b.example.com 443 3 3 []
	// total 3 drained [worker-a]
}

func ExampleCompute_invalid() {
	_, err := weights.Compute(weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: "https://worker-a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "ftp://x", Weight: 2_000_000},
	}})
	fmt.Println(err)
	// Output:
	// spec.entries[1] (cluster "worker-b"): weight 2000000: must be between 0 and 1000000
	// spec.entries[1] (cluster "worker-b"): endpoint "ftp://x": must be an absolute http or https URL: scheme "ftp" is not http or https
}
