package weights_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

func FuzzParseDrains(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := weights.ParseDrains(value)
		if err != nil {
			require.Nil(t, got)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotNil(t, got)
		for i, d := range got {
			if i > 0 {
				require.Less(t, got[i-1].ID, d.ID, "sorted by ID with unique IDs")
			}
			for _, s := range []string{d.ID, d.Cluster, d.Reason} {
				require.NotEmpty(t, s)
				require.Equal(t, strings.TrimSpace(s), s)
			}
		}

		// Re-encoding the result and parsing it again is the identity.
		type member struct {
			Cluster string `json:"cluster"`
			Reason  string `json:"reason"`
		}
		obj := make(map[string]member, len(got))
		for _, d := range got {
			obj[d.ID] = member{Cluster: d.Cluster, Reason: d.Reason}
		}
		encoded, err := json.Marshal(obj)
		require.NoError(t, err)
		again, err := weights.ParseDrains(string(encoded))
		require.NoError(t, err, "re-parse %s", encoded)
		require.Equal(t, got, again)
	})
}

// fuzzReader hands out bytes from fuzz data, then zeros.
type fuzzReader struct{ data []byte }

func (r *fuzzReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *fuzzReader) pick(options []string) string { return options[int(r.byte())%len(options)] }

func FuzzCompute(f *testing.F) {
	f.Add([]byte{}, "worker-x", "http://worker-x:8080", int64(0))
	f.Add([]byte{2, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0}, "worker-a", "https://worker-a", int64(1))
	f.Add([]byte{3, 0, 0, 2, 1, 1, 1, 3, 0, 2, 2, 4, 0, 2, 4, 0, 5, 3}, "", "ftp://x", int64(-1))
	f.Add([]byte{4, 6, 6, 7, 0, 1, 6, 7, 2, 9, 2, 2, 1, 6, 6, 6, 7, 7, 7}, "Bad_Cluster", "http://u@x", int64(weights.MaxWeight+1))
	f.Add([]byte{8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, "a.b", "HTTPS://[::1]:1/", int64(7))

	clusters := []string{"worker-a", "worker-b", "worker-c", "worker-d", "edge.worker-e", "", "Worker-A", ""}
	endpoints := []string{"https://worker.example.com", "http://10.0.0.1:8080/", "HTTP://Host:1", "https://[::1]", "ftp://x", "/rel", ""}
	ids := []string{"maintenance-a", "upgrade", "zz", "a", "", "maintenance-a"}
	f.Fuzz(func(t *testing.T, data []byte, extraCluster, extraEndpoint string, extraWeight int64) {
		r := &fuzzReader{data: data}
		clusterPool := append(slices.Clone(clusters), extraCluster)
		endpointPool := append(slices.Clone(endpoints), extraEndpoint)
		weightPool := []int64{0, 1, 3, 7, weights.MaxWeight, -1, weights.MaxWeight + 1, extraWeight}

		var in weights.Input
		for range int(r.byte()) % 9 {
			e := weights.Entry{
				Cluster:  r.pick(clusterPool),
				Endpoint: r.pick(endpointPool),
				Weight:   weightPool[int(r.byte())%len(weightPool)],
			}
			for range int(r.byte()) % 3 {
				e.DrainRefs = append(e.DrainRefs, r.pick(ids))
			}
			in.Entries = append(in.Entries, e)
		}
		for range int(r.byte()) % 5 {
			in.Drains = append(in.Drains, weights.Drain{ID: r.pick(ids), Cluster: r.pick(clusterPool), Reason: "r"})
		}
		before := cloneInput(in)

		got, err := weights.Compute(in)
		require.Equal(t, before, in, "input not mutated")

		reversed := cloneInput(in)
		slices.Reverse(reversed.Entries)
		slices.Reverse(reversed.Drains)
		gotReversed, errReversed := weights.Compute(reversed)

		if err != nil {
			require.Equal(t, weights.Result{}, got)
			var ee *weights.EntryError
			require.ErrorAs(t, err, &ee)
			require.True(t, errors.Is(err, weights.ErrClusterInvalid) || errors.Is(err, weights.ErrDuplicateCluster) ||
				errors.Is(err, weights.ErrWeightRange) || errors.Is(err, weights.ErrEndpointInvalid))
			require.Error(t, errReversed, "validity does not depend on order")
			return
		}
		require.NoError(t, errReversed, "validity does not depend on order")
		require.Equal(t, got, gotReversed, "independent of input order")
		again, err := weights.Compute(in)
		require.NoError(t, err)
		require.Equal(t, got, again, "deterministic")

		require.Len(t, got.Entries, len(in.Entries))
		entryClusters := make(map[string]bool)
		for i, e := range got.Entries {
			if i > 0 {
				require.Less(t, got.Entries[i-1].Cluster, e.Cluster, "sorted by unique cluster")
			}
			entryClusters[e.Cluster] = true
			require.GreaterOrEqual(t, e.Weight, int32(0))
			require.LessOrEqual(t, e.Weight, int32(weights.MaxWeight))
			if e.Drained() {
				require.Zero(t, e.Effective, "held entry has effective 0")
			} else {
				require.Nil(t, e.HeldBy)
				require.Equal(t, e.Weight, e.Effective, "unheld entry keeps its weight")
			}
			require.True(t, slices.IsSorted(e.HeldBy))
			require.Len(t, slices.Compact(slices.Clone(e.HeldBy)), len(e.HeldBy), "HeldBy deduplicated")
		}
		for _, e := range in.Entries {
			var want []string
			for _, d := range in.Drains {
				if d.Cluster == e.Cluster {
					want = append(want, d.ID)
				}
			}
			want = append(want, e.DrainRefs...)
			slices.Sort(want)
			want = slices.Compact(want)
			i := slices.IndexFunc(got.Entries, func(g weights.EffectiveEntry) bool { return g.Cluster == e.Cluster })
			require.GreaterOrEqual(t, i, 0)
			require.Equal(t, want, got.Entries[i].HeldBy)
		}

		// Pending is exactly the drains whose cluster has no entry.
		var wantPending []weights.Drain
		for _, d := range in.Drains {
			if !entryClusters[d.Cluster] {
				wantPending = append(wantPending, d)
			}
		}
		require.ElementsMatch(t, wantPending, got.Pending)
		require.True(t, slices.IsSortedFunc(got.Pending, func(a, b weights.Drain) int { return strings.Compare(a.ID, b.ID) }))
		if len(wantPending) == 0 {
			require.Nil(t, got.Pending)
		}
	})
}
