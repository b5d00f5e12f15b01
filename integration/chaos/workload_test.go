package main

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	omefake "github.com/trafficmap/publisher/api/client/clientset/versioned/fake"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// fakeWorkload is a workload over fake clients; the ramps run /bin/true (no publisher).
func fakeWorkload(seed uint64) (*workload, workloadConfig) {
	cfg := workloadConfig{
		Kube: kubefake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1beta1.InferenceServicesResource: "InferenceServiceList"}), OME: omefake.NewSimpleClientset(),
		Namespace: "chaos", Rival: "rival", Maps: 6, Clusters: 3, RNG: rand.New(rand.NewPCG(seed, 1)),
		Bin: "/bin/true", Kubeconfig: "/dev/null",
	}
	return newWorkload(cfg), cfg
}

// observe reads what the checker would see of one map.
func observe(t *testing.T, cfg workloadConfig, m mapRef) observed {
	ctx := context.Background()
	tm, err := cfg.OME.OmeV1beta1().TrafficMaps(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	require.NoError(t, err)
	isvc, err := cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(m.Namespace).Get(ctx, m.Service, metav1.GetOptions{})
	require.NoError(t, err)
	o := observed{Map: tm, ISVC: isvc.GetAnnotations(), Taints: map[string]string{}, HostTemplate: "{{.Service}}.{{.Namespace}}.example.com"}
	if o.ISVC == nil {
		o.ISVC = map[string]string{}
	}
	for _, c := range m.Clusters {
		wc, err := cfg.Dynamic.Resource(workloadClusters).Get(ctx, c, metav1.GetOptions{})
		require.NoError(t, err)
		if v, ok := wc.GetAnnotations()[annTaints]; ok {
			o.Taints[c] = v
		}
	}
	return o
}

// A run over fake clients does every kind of operation, is the same for the same seed, and
// settles into inputs the oracle allows True for, with no rival map left.
func TestWorkloadStepsAndSettles(t *testing.T) {
	ctx := context.Background()
	run := func(seed uint64) ([]string, *workload, workloadConfig) {
		w, cfg := fakeWorkload(seed)
		require.NoError(t, w.Setup(ctx))
		var kinds []string
		for range 600 {
			op, err := w.Step(ctx)
			require.NoError(t, err, op)
			kinds = append(kinds, op)
		}
		return kinds, w, cfg
	}
	kinds, w, cfg := run(7)
	again, _, _ := run(7)
	assert.Equal(t, kinds, again, "the same seed gives the same operations")
	for _, op := range operations {
		assert.Positive(t, w.Ops()[op.kind], "operation %s was done", op.kind)
	}

	// A write whose answer a fault lost: the workload does not know about it, Settle
	// repairs it anyway.
	m0 := w.Maps()[0]
	require.NoError(t, w.updateAnnotations(ctx, m0.Namespace, m0.Service, func(ann map[string]string) bool {
		ann[annTolerations], ann[annRamp] = `[{"key":""}]`, `{"worker-0":{}}`
		return true
	}))
	require.NoError(t, w.createService(ctx, "rival", "lost-rival", "x.example.com"))

	require.NoError(t, w.Settle(ctx))
	require.Len(t, w.Maps(), 6)
	for _, m := range w.Maps() {
		o := observe(t, cfg, m)
		v := expect(o)
		assert.True(t, v.TrueAllowed, "%s settles publishable: %s", m.Key(), v.Why)
		assert.NotContains(t, o.ISVC, annRamp)
		for _, e := range o.Map.Spec.Entries {
			assert.Equal(t, e.Weight == 0, len(e.DrainRefs) > 0, "%s %s: the routing controller caught up", m.Key(), e.Cluster)
		}
	}
	rivals, err := cfg.OME.OmeV1beta1().TrafficMaps("rival").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, rivals.Items, "the rival maps are deleted")
	services, err := cfg.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace("rival").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, services.Items, "the rival services are deleted")
}

// The fleet-wide kinds (taint, untaint) come at least FleetEvery steps apart, and about
// that often; the other kinds keep their mix. FleetEvery 0 leaves them in the mix.
func TestWorkloadFleetEvery(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		every         int
		least, most   int // fleet-wide operations in 400 steps
		minGapAtLeast int
	}{
		{"no limit: about one in eight", 0, 25, 80, 1},
		{"every 40 steps", 40, 7, 10, 40},
		{"every 100 steps", 100, 3, 4, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := fakeWorkload(3)
			w.cfg.FleetEvery = tc.every
			require.NoError(t, w.Setup(ctx))
			var at []int
			others := 0
			for i := range 400 {
				op, err := w.Step(ctx)
				require.NoError(t, err, op)
				if op == "taint" || op == "untaint" {
					at = append(at, i)
				} else {
					others++
				}
			}
			assert.GreaterOrEqual(t, len(at), tc.least)
			assert.LessOrEqual(t, len(at), tc.most)
			for k := 1; k < len(at); k++ {
				assert.GreaterOrEqual(t, at[k]-at[k-1], tc.minGapAtLeast, "fleet-wide operations at steps %v", at)
			}
			assert.Positive(t, others)
		})
	}
}

func TestStepsOf(t *testing.T) {
	for _, tc := range []struct {
		d, every time.Duration
		want     int
	}{
		{25 * time.Second, 250 * time.Millisecond, 100},
		{time.Second, 300 * time.Millisecond, 4},
		{0, 250 * time.Millisecond, 0},
		{time.Second, 0, 0},
	} {
		assert.Equal(t, tc.want, stepsOf(tc.d, tc.every), "%s every %s", tc.d, tc.every)
	}
}
