package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/internal/lieplant"
)

// TestSmoke is the CI-sized chaos run (about two and a half minutes with the set-up, fixed
// seed): every fault kind once in turn (14, one every 5 s), on 12 maps, with the publisher
// built with the race detector. It keeps the harness from rotting; `make chaos` runs the
// long one.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	o := options{duration: 73 * time.Second, seed: 1, maps: 12, clusters: 3, dial: 4,
		faultEvery: 5 * time.Second, opEvery: 300 * time.Millisecond, converge: 3 * time.Minute,
		race: true, roundRobin: true, workDir: t.TempDir()}
	res, err := run(ctx, o, t.Logf)
	require.NoError(t, err)
	require.NotNil(t, res)
	t.Log("\n" + res.markdown(false))
	assert.Empty(t, res.checks.Lies, "Published said True while the route, the gateway or an xds client disagreed")
	assert.Empty(t, res.lost, "maps not correct at the end")
	assert.Empty(t, res.orphans, "objects left behind")
	assert.Empty(t, res.crashes, "publisher crashes, panics or data races")
	assert.Empty(t, res.checks.Unchecked)
	assert.Greater(t, res.checks.Judged.Judgements, 0, "the continuous judge judged the maps standing True")
	// Stuck maps (liveness) are a wall-clock bound: make chaos fails on them, the smoke run
	// reports them.
	t.Logf("stuck maps: %d %v", len(res.checks.Judged.Stuck), describe(res.checks.Judged.Stuck, res.judgedAt, 5))
	assert.Greater(t, res.checks.Checked, 12, "every map's first True and more were checked")
	kinds := map[string]bool{}
	for _, in := range res.faults {
		kinds[in.Kind] = true
	}
	assert.Len(t, kinds, len(faultKinds), "every fault kind was injected: %v", kinds)
	assert.Greater(t, res.refused, int64(0), "the client without a certificate was refused")
}

// TestSmokePlanted is TestSmoke, shorter, with a lie planted in the publisher
// (lieplant.KindFlavourWeight: the gRPC flavour serves one entry a weight one too high): the
// checker must catch it, with its xds rule (the proxyless gRPC probes hold other weights
// than the route and the Envoy probes).
func TestSmokePlanted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	o := options{duration: 20 * time.Second, seed: 1, maps: 8, clusters: 3, dial: 4,
		faultEvery: 7 * time.Second, opEvery: 300 * time.Millisecond, converge: 20 * time.Second, warmTimeout: 45 * time.Second,
		roundRobin: true, workDir: t.TempDir(), plant: string(lieplant.KindFlavourWeight)}
	res, err := run(ctx, o, t.Logf)
	require.NotNil(t, res, "the run got as far as the checker: %v", err)
	if err != nil {
		t.Logf("run error (the lie may keep maps from being correct): %v", err)
	}
	rules := map[string]int{}
	for _, l := range res.checks.Lies {
		rules[l.Rule]++
	}
	t.Logf("%d lies caught: %v", len(res.checks.Lies), rules)
	assert.NotEmpty(t, res.checks.Lies, "the planted lie was not caught")
	assert.Positive(t, rules["xds"], "no lie of the xds rule")
}
