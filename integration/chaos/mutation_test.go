package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/internal/lieplant"
)

func TestWritePlantSection(t *testing.T) {
	const heading = "## Planted lies\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"new file", "", heading + "\nT1\n"},
		{"right after the chaos run", "# B\n\n## Chaos run\n\nc\n\n## Real gateways (make e2e)\n\ng\n\n## History\n\n- h\n",
			"# B\n\n## Chaos run\n\nc\n\n" + heading + "\nT1\n\n## Real gateways (make e2e)\n\ng\n\n## History\n\n- h\n"},
		{"no chaos run: before the history", "# B\n\n## Method\n\nm\n\n## History\n\n- h\n",
			"# B\n\n## Method\n\nm\n\n" + heading + "\nT1\n\n## History\n\n- h\n"},
		{"replaced", "# B\n\n## Chaos run\n\nc\n\n" + heading + "\nold\n\n## History\n\n- h\n",
			"# B\n\n## Chaos run\n\nc\n\n" + heading + "\nT1\n\n## History\n\n- h\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "B.md")
			if tc.old != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.old), 0o644))
			}
			require.NoError(t, writePlantSection(path, "T1\n"))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

func TestPlantTable(t *testing.T) {
	o := options{maps: 8, dial: 4, seed: 1, faultEvery: 7 * time.Second, opEvery: 300 * time.Millisecond, plantDuration: 45 * time.Second, roundRobin: true}
	runs := []planted{
		{Kind: lieplant.KindFlavourWeight, Lies: 3, Rules: map[string]int{"xds": 2, "stale True": 1}, Lost: 8, Wall: 150 * time.Second},
		{Kind: lieplant.KindDroppedCluster, Rules: map[string]int{}, Wall: 140 * time.Second},
	}
	table := plantTable(o, runs, "abc1234")
	assert.Contains(t, table, "| flavour-weight | 3 | stale True (1), xds (2) | 8 | 2m30s |\n")
	assert.Contains(t, table, "| dropped-cluster | 0 | - | 0 | 2m20s |\n")
	assert.Contains(t, table, "-round-robin")
	assert.Contains(t, table, "\nCaught 1 of 2.\n")
	assert.NotContains(t, table, "Scenes", "neither kind has a scene")

	runs = append(runs, planted{Kind: lieplant.KindUnackedClient, Lies: 4, Rules: map[string]int{"xds": 4}, Wall: time.Minute})
	table = plantTable(o, runs, "abc1234")
	assert.Contains(t, table, "| unacked-client | 4 | xds (4) | 0 | 1m0s |\n")
	assert.Contains(t, table, "\n- unacked-client: only the client lags")
	for _, line := range strings.Split(table, "\n") {
		assert.LessOrEqual(t, len(line), 100, "a line of the notes is wrapped: %q", line)
		assert.Equal(t, strings.TrimRight(line, " "), line, "no trailing blanks")
	}
}

// TestPlantScenes: the scenes keep a schedule of fault kinds (in the round-robin order)
// that meets their lie, and change nothing else of the flags.
func TestPlantScenes(t *testing.T) {
	o := options{taintEvery: 25 * time.Second, roundRobin: true, faultEvery: 7 * time.Second}
	assert.Equal(t, o, scenes[lieplant.KindFlavourWeight].apply(o), "a kind without a scene runs with the flags as given")

	unacked := scenes[lieplant.KindUnackedClient].apply(o)
	assert.ElementsMatch(t, []string{faultFreeze, faultXDSPartition}, unacked.faults)
	assert.Equal(t, []string{faultXDSPartition, faultFreeze}, scheduleKinds(roundRobinKinds, unacked.faults))
	assert.Equal(t, 25*time.Second, unacked.taintEvery)

	premature := scenes[lieplant.KindPrematureAccept].apply(o)
	assert.Equal(t, []string{faultGatewaySlow, faultGatewayReject}, scheduleKinds(roundRobinKinds, premature.faults))
	assert.Nil(t, premature.ops)

	ignored := scenes[lieplant.KindIgnoredInput].apply(o)
	assert.Equal(t, 25*time.Second, ignored.taintEvery)
	assert.NotEmpty(t, ignored.faults)
	for _, k := range ignored.faults {
		assert.False(t, mayChangeLeader(k), "%s may change the leader", k)
	}
	assert.Len(t, ignored.faults, len(faultKinds)-6, "every kind but the six that may change the leader")
	assert.Contains(t, ignored.ops, "bad-input")
	assert.Contains(t, ignored.ops, "drain")
	for _, op := range []string{"fix", "taint", "untaint"} {
		assert.NotContains(t, ignored.ops, op)
	}
	assert.Len(t, ignored.ops, len(operations)-3)
	assert.Nil(t, unacked.ops, "the unacked-client scene keeps the whole workload")

	for kind := range scenes {
		assert.Contains(t, lieplant.Kinds(), kind)
		assert.NotEmpty(t, scheduleKinds(roundRobinKinds, scenes[kind].apply(o).faults), "%s: a scene keeps a fault kind", kind)
	}
	assert.Equal(t, faultKinds, scheduleKinds(faultKinds, nil), "no scene: every kind")
}

func TestPlantBuild(t *testing.T) {
	tags, env, err := plantBuild("")
	require.NoError(t, err)
	assert.Empty(t, tags)
	assert.Empty(t, env)
	tags, env, err = plantBuild("flavour-weight")
	require.NoError(t, err)
	assert.Equal(t, []string{"lieplant"}, tags)
	assert.Equal(t, []string{"TRAFFICMAP_LIEPLANT=flavour-weight"}, env)
	_, _, err = plantBuild("white-lie")
	assert.ErrorContains(t, err, "premature-accept")
}
