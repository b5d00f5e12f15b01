package main

import (
	"os"
	"path/filepath"
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
