//go:build e2e

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/weights"
)

// The publisher through Traefik, controller and proxy: a map of three clusters whose
// endpoints are the backends' IP URLs, published with backend kind auto (endpointslice for
// Traefik's controllerName). Real requests through Traefik's entry point:
//   - the shares match the weights 1:1:2 within the binomial bound (requireShares);
//   - a drain of worker-a under continuous load: no request reaches worker-a once the map
//     says Published True, and the figures drain write -> traffic moved (the last request
//     worker-a served) and drain write -> Published True are reported side by side;
//   - the undrain restores the shares;
//   - a ramped drain's steps show in the traffic, worker-a's share falling step by step;
//   - all clusters drained: Published True says no traffic is routed, and no request
//     reaches a backend (each gets an HTTP error);
//   - the undrain of everything restores the shares.
func TestE2ETraefikPublisher(t *testing.T) {
	f := newE2EFixture(t)
	clusters := []string{"worker-a", "worker-b", "worker-c"}
	full := map[string]int{"worker-a": 1, "worker-b": 1, "worker-c": 2}
	b := startBackends(t, clusters...)
	tr := traefikGateway(t, f.ns)
	client := proxyClient()

	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: b.URL("worker-a"), Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: b.URL("worker-b"), Weight: 1, Healthy: true},
		{Cluster: "worker-c", Endpoint: b.URL("worker-c"), Weight: 2, Healthy: true},
	})
	w := f.watchMap()
	before := startLoad(client, tr.Addr, f.host(), 2)
	f.startPublisher(withBackendKind(httproute.BackendAuto))
	firstTrue, tm := w.waitPublishedAt(t, "worker-a=1, worker-b=1, worker-c=2")
	t.Logf("published: %s", published(tm).Message)
	requireMovedBeforeTrue(t, "first publish", before, firstTrue, full)

	const n = 600
	got := spreadHTTP(t, client, tr.Addr, f.host(), n)
	e2eReport(t, fmt.Sprintf("- Traefik %s, weights worker-a=1, worker-b=1, worker-c=2, %d requests: %v", traefikVersion, n, got))
	requireShares(t, got, full, n)

	// Drain under continuous load, measured.
	measureDrain(t, f, client, tr.Addr, clusters)
	requireShares(t, spreadHTTP(t, client, tr.Addr, f.host(), n), map[string]int{"worker-b": 1, "worker-c": 2}, n)

	// Undrain restores the shares.
	w = f.watchMap()
	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	at, _ := w.waitPublishedAt(t, "worker-a=1, worker-b=1, worker-c=2")
	afterThrottle(t, at)
	got = spreadHTTP(t, client, tr.Addr, f.host(), n)
	t.Logf("after the undrain, %d requests: %v", n, got)
	requireShares(t, got, full, n)

	rampedDrain(t, f, client, tr.Addr, clusters)

	// Everything drained: the documented answer is no traffic routed.
	f.drain(`{"all-a":{"cluster":"worker-a","reason":"e2e"},"all-b":{"cluster":"worker-b","reason":"e2e"},"all-c":{"cluster":"worker-c","reason":"e2e"}}`)
	f.waitPublishedWith("every effective weight is 0, so no traffic is routed")
	afterThrottle(t, time.Now())
	got = spreadHTTP(t, client, tr.Addr, f.host(), 100)
	e2eReport(t, fmt.Sprintf("- Traefik %s, every weight 0 (all drained), 100 requests: %v (Gateway API: all backendRefs at weight 0 -> HTTP 500)", traefikVersion, got))
	for who := range got {
		assert.NotContains(t, clusters, who, "a drained cluster answered while every weight is 0: %v", got)
	}

	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	f.waitPublishedWith("worker-a=1, worker-b=1, worker-c=2")
	afterThrottle(t, time.Now())
	requireShares(t, spreadHTTP(t, client, tr.Addr, f.host(), n), full, n)
}

// withBackendKind sets the publisher's backend kind (--backend-kind).
func withBackendKind(kind httproute.BackendKind) func(*publish.Config) {
	return func(c *publish.Config) { c.BackendKind = kind }
}

// requireMovedBeforeTrue stops the load l that ran across a change Published confirmed at
// trueAt and asserts that every request sent after trueAt got the new shares: nothing
// answered that is not in want (an HTTP error or an old cluster).
func requireMovedBeforeTrue(t *testing.T, what string, l *load, trueAt time.Time, want map[string]int) {
	t.Helper()
	afterThrottle(t, trueAt)
	answers := l.finish(t)
	var after []served
	var lastOld time.Time
	for _, a := range answers {
		if !a.sent.Before(trueAt) {
			after = append(after, a)
			if _, ok := want[a.Who]; !ok {
				lastOld = a.sent
			}
		}
	}
	require.NotEmpty(t, after, "%s: no request was sent after Published True", what)
	got := tally(after)
	lag := "none"
	if !lastOld.IsZero() {
		lag = lastOld.Sub(trueAt).Round(time.Millisecond).String()
	}
	e2eReport(t, fmt.Sprintf("- Traefik %s, %s: %d requests sent in the %s after Published True: %v; the last one that did not get the new route was sent %s after True",
		traefikVersion, what, len(after), traefikThrottle+500*time.Millisecond, got, lag))
	for who := range got {
		_, ok := want[who]
		assert.True(t, ok, "%s: after Published True a request got %q (all: %v): Published said True while traffic still went elsewhere", what, who, got)
	}
}

// measureDrain drains worker-a under continuous load (4 workers) and reports drain write ->
// traffic moved (when worker-a served its last request) against drain write -> Published
// True (when a watch on the map delivered it), asserting that True never came first: no
// request reached worker-a after True.
func measureDrain(t *testing.T, f *fixture, c *http.Client, addr string, clusters []string) {
	t.Helper()
	w := f.watchMap()
	l := startLoad(c, addr, f.host(), 4)
	require.Eventually(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.answers) >= 100 }, waitTimeout, tick)
	write := time.Now()
	f.drain(`{"m-1":{"cluster":"worker-a","reason":"e2e"}}`)
	written := time.Now()
	trueAt, _ := w.waitPublishedAt(t, "worker-a=0 (drained by m-1)")
	afterThrottle(t, trueAt)
	answers := l.finish(t)

	var last time.Time
	afterTrue := map[string]int{}
	for _, a := range answers {
		if a.Who == "worker-a" && a.ServedAt.After(last) {
			last = a.ServedAt
		}
		if !a.sent.Before(trueAt) {
			afterTrue[a.Who]++
		}
	}
	require.False(t, last.IsZero(), "worker-a served nothing during the run")
	moved, pub := last.Sub(write), trueAt.Sub(write)
	e2eReport(t,
		fmt.Sprintf("- Traefik %s, drain of worker-a (1 of weights 1:1:2) under 4 concurrent request loops, %d requests: drain write (patch took %s) -> traffic moved (last request worker-a served) %s; drain write -> Published True (watch delivery) %s; gap %s",
			traefikVersion, len(answers), written.Sub(write).Round(time.Millisecond), moved.Round(time.Millisecond), pub.Round(time.Millisecond), (pub-moved).Round(time.Millisecond)),
		fmt.Sprintf("  requests sent after Published True: %v", afterTrue))
	assert.True(t, last.Before(trueAt), "worker-a served a request at %s, after Published True at %s: True came before the move", last.Format(time.RFC3339Nano), trueAt.Format(time.RFC3339Nano))
	assert.Zero(t, afterTrue["worker-a"], "requests sent after Published True reached the drained cluster: %v", afterTrue)
	for who := range afterTrue {
		assert.Contains(t, clusters, who, "after Published True: %v", afterTrue)
	}
}

// rampedDrain drains worker-a in 3 steps over 30 s (10 s a step: room for the route settle,
// Traefik's throttle and the sampling within one step; the drain and ramp annotations in one
// patch, as `drain --ramp` writes them) and checks at each step in place that the traffic
// matches the route's weights at that step and that worker-a's share falls strictly and
// stays positive until the drain's 0.
func rampedDrain(t *testing.T, f *fixture, c *http.Client, addr string, clusters []string) {
	t.Helper()
	ramp := weights.EncodeRamps([]weights.Ramp{{
		Cluster: "worker-a", Direction: weights.RampDown, Start: time.Now(), Duration: 30 * time.Second,
		Steps: 3, From: 1, Holds: []string{"r-1"},
	}})
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"ome.io/traffic-drain": `{"r-1":{"cluster":"worker-a","reason":"e2e ramp"}}`,
		weights.RampAnnotation: ramp,
	}}})
	require.NoError(t, err)
	_, err = dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Patch(ctxFor(t), service, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)

	const n = 300
	prev := 1.0
	for k := range 3 {
		f.waitCondition(metav1.ConditionFalse, string(model.ReasonRamping), fmt.Sprintf("ramping worker-a down: step %d of 3 in place", k))
		afterThrottle(t, time.Now())
		route := f.routeWeights(clusters...)
		want := map[string]int{}
		for cl, w := range route {
			want[cl] = int(w)
		}
		got := spreadHTTP(t, c, addr, f.host(), n)
		share := float64(got["worker-a"]) / n
		e2eReport(t, fmt.Sprintf("- Traefik %s, ramped drain of worker-a, step %d of 3: route weights %v, %d requests: %v", traefikVersion, k, route, n, got))
		requireShares(t, got, want, n)
		assert.Less(t, share, prev, "step %d: worker-a's share falls", k)
		assert.Positive(t, got["worker-a"], "step %d: worker-a still serves until the drain's 0", k)
		prev = share
	}
	f.waitPublishedWith("worker-a=0 (drained by r-1)")
	afterThrottle(t, time.Now())
	got := spreadHTTP(t, c, addr, f.host(), n)
	assert.Zero(t, got["worker-a"], "ramp ended: %v", got)
	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	f.waitPublishedWith("worker-a=1, worker-b=1, worker-c=2")
}
