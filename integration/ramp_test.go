package integration

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/weights"
)

// A gradual drain and undrain with the built binary (`drain --ramp`, `undrain --ramp`),
// published by a publisher running with the chart's RBAC to the stand-in gateway and a real
// grpc-go xDS client: every step is on the HTTPRoute and in the client's RPC shares before
// the next, the weights fall strictly and stay positive until the drain's 0, Published is
// False/Ramping throughout and True only at the end, a publisher restart mid-ramp continues
// from the stored step, and the undrain ramps back up.
func TestOpsRampedDrainAndUndrain(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 1},
	})
	release := "ramp-" + f.ns
	apply(t, chartRBAC(t, release, f.ns, "publisher.sinks={httproute,xds}"))
	asChart := asServiceAccount(f.ns, release+"-trafficmap-publisher")
	config := func(addr string) publish.Config {
		return f.publisherConfig(bothSinks, func(c *publish.Config) {
			c.XDSMinClients = 1
			c.ClaimNamespace = f.ns // the release namespace, where the chart grants the claim records (the chart sets $POD_NAMESPACE)
			if addr != "" {
				c.XDSAddress = addr
			}
		})
	}
	pub := startPublisherWith(t, config(""), asChart, zaptest.NewLogger(t).Named("publish"))
	client := xdsClient(t, pub.xdsAddr, "grpc-ramp", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	f.waitPublishedWith("weights worker-a=1, worker-b=1")
	op := admin(t)
	w := f.watchPublished()

	// Three steps over 18 s: worker-a's weight 3, 2, 1 against worker-b's 3 (scaled so the
	// shares are exact), then the drain's 0 against 1.
	wait := op.start(t, "drain", "chat", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "m-1", "--reason", "gradual",
		"--ramp", "18s", "--ramp-steps", "3", "--yes", "--wait")
	const rpcs = 1500
	for k := range 3 {
		f.waitCondition(metav1.ConditionFalse, string(model.ReasonRamping), fmt.Sprintf("ramping worker-a down: step %d of 3 in place", k))
		want := int32(3 - k)
		assert.Equal(t, map[string]int32{"worker-a": want, "worker-b": 3}, f.routeWeights("worker-a", "worker-b"), "step %d on the HTTPRoute", k)
		// The client's RPC shares follow the step: a chi-square test at alpha 1e-6 (critical
		// value 23.93) tells each step's share from the next (0.5, 0.4, 0.25 at n=1500).
		share := float64(want) / float64(want+3)
		got := spread(t, client, rpcs)
		chi2 := 0.0
		for cluster, p := range map[string]float64{"worker-a": share, "worker-b": 1 - share} {
			d := float64(got[cluster]) - p*rpcs
			chi2 += d * d / (p * rpcs)
		}
		assert.Less(t, chi2, 23.93, "step %d: want worker-a share %.2f, observed %v", k, share, got)

		if k == 1 {
			st := op.status(t, f.ns)
			require.Len(t, st.Ramps, 1, "status shows the ramp's progress")
			assert.Equal(t, report.Ramp{Cluster: "worker-a", Direction: "down", Step: 1, Steps: 3, Percent: 66, Next: st.Ramps[0].Next, End: st.Ramps[0].End}, st.Ramps[0])
			assert.Equal(t, 6*time.Second, st.Ramps[0].End.Sub(st.Ramps[0].Next), "step 2 is due 6 s before the end")
			table := op.run(t, "status", "chat", "-n", f.ns)
			assert.Contains(t, table.stdout, "Ramps (gradual drains and undrains under way):")

			// A restart mid-ramp continues from the step stored on the InferenceService.
			stored, err := weights.ParseRamps(f.isvc(service).GetAnnotations()[weights.RampAnnotation])
			require.NoError(t, err)
			require.Len(t, stored, 1)
			require.GreaterOrEqual(t, stored[0].Step, 1)
			addr := pub.xdsAddr.String()
			pub.stop(t)
			pub = startPublisherWith(t, config(addr), asChart, zaptest.NewLogger(t).Named("restarted"))
		}
	}
	got := wait()
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, "worker-a 100% -> 0% of its weight in 3 steps over 18s")
	assert.Contains(t, got.stderr, "  worker-a   1        1        0\n", "the preview's after is where the ramp ends")
	tm := f.waitPublishedWith("weights worker-a=0 (drained by m-1), worker-b=1")
	assert.Equal(t, map[string]int32{"worker-a": 0, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
	assert.Equal(t, map[string]int{"worker-b": 200}, spread(t, client, 200))
	assert.NotContains(t, f.isvc(service).GetAnnotations(), weights.RampAnnotation, "the finished ramp is removed")

	steps := rampSteps(t, w.transitions(), tm.Generation, "worker-a")
	assert.Equal(t, []int{3, 2, 1}, steps, "each step once, strictly falling, none repeated after the restart")

	reasons := map[string]bool{}
	for _, e := range f.events() {
		reasons[e.Reason] = true
	}
	assert.True(t, reasons[string(model.ReasonRampStarted)], "a RampStarted Event")
	assert.True(t, reasons[string(model.ReasonRampFinished)], "a RampFinished Event")

	// undrain --ramp: 0, 1, 2 against 3, then 1 against 1.
	w = f.watchPublished()
	got = op.run(t, "undrain", "chat", "-n", f.ns, "--id", "m-1", "--ramp", "6s", "--ramp-steps", "3", "--yes", "--wait")
	require.Equal(t, 0, got.code, got.stderr)
	tm = f.waitPublishedWith("weights worker-a=1, worker-b=1")
	assert.Equal(t, []int{0, 1, 2}, rampSteps(t, w.transitions(), tm.Generation, "worker-a"), "the undrain ramps up")
	assert.Equal(t, map[string]int32{"worker-a": 1, "worker-b": 1}, f.routeWeights("worker-a", "worker-b"))
}

// rampSteps checks the Published transitions of a ramp, from its first Ramping one to its
// end, True at gen: every one before the last is False (Publishing or Ramping), the last
// True; it returns cluster's weight at each step said to be in place, in order.
func rampSteps(t *testing.T, seen []transition, gen int64, cluster string) []int {
	t.Helper()
	stepRE := regexp.MustCompile(`step (\d+) of (\d+) in place.*weights .*\b` + regexp.QuoteMeta(cluster) + `=(\d+)`)
	require.NotEmpty(t, seen)
	first := slices.IndexFunc(seen, func(tr transition) bool { return tr.Reason == string(model.ReasonRamping) })
	require.GreaterOrEqual(t, first, 0, "no Ramping transition: %v", seen)
	seen = seen[first:]
	last := seen[len(seen)-1]
	require.Equal(t, metav1.ConditionTrue, last.Status, "%v", seen)
	require.Equal(t, gen, last.Generation)
	var out []int
	for _, tr := range seen[:len(seen)-1] {
		require.Equal(t, metav1.ConditionFalse, tr.Status, "Published is never True mid-ramp: %v", seen)
		require.Contains(t, []string{string(model.ReasonPublishing), string(model.ReasonRamping)}, tr.Reason, "%v", tr)
		if m := stepRE.FindStringSubmatch(tr.Message); m != nil {
			w, _ := strconv.Atoi(m[3])
			if len(out) == 0 || out[len(out)-1] != w {
				out = append(out, w)
			}
		}
	}
	return out
}

// A taint and an untaint with --ramp: every moved service gets a ramp annotation before the
// taint is written, and its weights step down (then up) with Published False/Ramping until
// the end; --wait returns once the final weights are Published.
func TestOpsRampedTaintAndUntaint(t *testing.T) {
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap(fl.entries())
	setInferenceClusterTaints(t, fl.a, `[]`)
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	w := f.watchPublished()
	got := op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--ramp", "3s", "--ramp-steps", "3", "--yes", "--wait")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stderr, fmt.Sprintf("Ramp of InferenceService %s/chat: %s 100%% -> 0%% of its weight in 3 steps over 3s", f.ns, fl.a))
	tm := f.waitPublishedWith(fmt.Sprintf("weights %s=0 (taint maintenance=planned:NoExecute), %s=1", fl.a, fl.b))
	assert.Equal(t, []int{3, 2, 1}, rampSteps(t, w.transitions(), tm.Generation, fl.a))
	assert.NotContains(t, f.isvc(service).GetAnnotations(), weights.RampAnnotation, "the finished ramp is removed")

	w = f.watchPublished()
	got = op.run(t, "untaint", fl.a, "maintenance:NoExecute", "--ramp", "3s", "--ramp-steps", "3", "--yes", "--wait")
	require.Equal(t, 0, got.code, got.stderr)
	tm = f.waitPublishedWith(fmt.Sprintf("weights %s=1, %s=1", fl.a, fl.b))
	assert.Equal(t, []int{0, 1, 2}, rampSteps(t, w.transitions(), tm.Generation, fl.a))
	assert.Equal(t, map[string]int32{fl.a: 1, fl.b: 1}, fl.weights(f))
}

// A ramp survives a leader change: replica a leads and takes the first step; when it stops,
// b takes the Lease and continues from the step stored on the InferenceService (never from
// the start), and only b writes from then on.
func TestRampSurvivesLeaderChange(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	replica := func(id string) func(*publish.Config) {
		return func(c *publish.Config) {
			c.LeaderElection = publish.LeaderElection{Enabled: true, Namespace: f.ns, Name: "publisher", Identity: id,
				LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
		}
	}
	a := startPublisherWith(t, f.publisherConfig(replica("a")), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished() // a holds the Lease: it was alone
	startPublisherWith(t, f.publisherConfig(replica("b")), restCfg, zaptest.NewLogger(t).Named("b"))

	w := f.watchPublished()
	ramp := weights.Ramp{Cluster: "worker-a", Direction: weights.RampDown, Start: time.Now(), Duration: 9 * time.Second, Steps: 3,
		From: 1, Holds: []string{"maintenance-a"}}
	// As `drain --ramp` does: the drain and the ramp in one write.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"ome.io/traffic-drain":%q,%q:%q}}}`, seedDrain, weights.RampAnnotation, weights.EncodeRamps([]weights.Ramp{ramp}))
	_, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Patch(ctxFor(t), service, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonRamping), "ramping worker-a down: step 1 of 3 in place")
	a.stop(t) // releases the Lease; b takes it

	tm := f.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.Equal(t, []int{3, 2, 1}, rampSteps(t, w.transitions(), tm.Generation, "worker-a"), "b continued from step 1")
	assert.NotContains(t, f.isvc(service).GetAnnotations(), weights.RampAnnotation)
}
