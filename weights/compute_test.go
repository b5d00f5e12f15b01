package weights_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

// endpointFor is the endpoint URL the helpers give cluster c.
func endpointFor(c string) string { return "https://" + c + ".example.com" }

// entry builds a valid input entry for cluster c.
func entry(c string, w int64, refs ...string) weights.Entry {
	return weights.Entry{Cluster: c, Endpoint: endpointFor(c), Weight: w, DrainRefs: refs}
}

// eff builds the expected output for an entry made by entry.
func eff(c string, w, effective int32, heldBy ...string) weights.EffectiveEntry {
	return weights.EffectiveEntry{
		Cluster:   c,
		Endpoint:  weights.Endpoint{URL: endpointFor(c), Scheme: "https", Host: c + ".example.com", Port: 443},
		Weight:    w,
		Effective: effective,
		HeldBy:    heldBy,
	}
}

func drain(id, cluster string) weights.Drain {
	return weights.Drain{ID: id, Cluster: cluster, Reason: "reason for " + id}
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name        string
		in          weights.Input
		want        weights.Result
		wantTotal   int64
		wantAllZero bool
		wantDrained []string
	}{
		{
			name:      "no drains",
			in:        weights.Input{Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1)}},
			want:      weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 1, 1), eff("worker-b", 1, 1)}},
			wantTotal: 2,
		},
		{
			name: "one drain",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1)},
				Drains:  []weights.Drain{seedDrain},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 1, 0, "maintenance-a"), eff("worker-b", 1, 1)}},
			wantTotal:   1,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "remaining weights are kept verbatim, not re-normalized",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 7), entry("worker-b", 3)},
				Drains:  []weights.Drain{drain("d1", "worker-a")},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 7, 0, "d1"), eff("worker-b", 3, 3)}},
			wantTotal:   3,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "two drains hold one cluster",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 5), entry("worker-b", 5)},
				Drains:  []weights.Drain{drain("upgrade", "worker-a"), drain("maintenance-a", "worker-a")},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 5, 0, "maintenance-a", "upgrade"), eff("worker-b", 5, 5)}},
			wantTotal:   5,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "one of two drains removed still holds",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 5), entry("worker-b", 5)},
				Drains:  []weights.Drain{drain("upgrade", "worker-a")},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 5, 0, "upgrade"), eff("worker-b", 5, 5)}},
			wantTotal:   5,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "held only by its drain refs",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1, "old-drain"), entry("worker-b", 1)},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 1, 0, "old-drain"), eff("worker-b", 1, 1)}},
			wantTotal:   1,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "annotation and drain refs with the same id are deduplicated and merged",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1, "zeta", "maintenance-a", "zeta"), entry("worker-b", 1)},
				Drains:  []weights.Drain{seedDrain},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 1, 0, "maintenance-a", "zeta"), eff("worker-b", 1, 1)}},
			wantTotal:   1,
			wantDrained: []string{"worker-a"},
		},
		{
			name: "pending drain names a cluster with no entry",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1)},
				Drains:  []weights.Drain{drain("z-future", "worker-c"), drain("a-future", "worker-d")},
			},
			want: weights.Result{
				Entries: []weights.EffectiveEntry{eff("worker-a", 1, 1), eff("worker-b", 1, 1)},
				Pending: []weights.Drain{drain("a-future", "worker-d"), drain("z-future", "worker-c")},
			},
			wantTotal: 2,
		},
		{
			name: "pending drain holds its cluster the moment the entry appears",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1), entry("worker-c", 4)},
				Drains:  []weights.Drain{drain("z-future", "worker-c"), drain("a-future", "worker-d")},
			},
			want: weights.Result{
				Entries: []weights.EffectiveEntry{eff("worker-a", 1, 1), eff("worker-b", 1, 1), eff("worker-c", 4, 0, "z-future")},
				Pending: []weights.Drain{drain("a-future", "worker-d")},
			},
			wantTotal:   2,
			wantDrained: []string{"worker-c"},
		},
		{
			name: "all drained",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-b", 1), entry("worker-a", 1, "ref")},
				Drains:  []weights.Drain{drain("d", "worker-b")},
			},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 1, 0, "ref"), eff("worker-b", 1, 0, "d")}},
			wantAllZero: true,
			wantDrained: []string{"worker-a", "worker-b"},
		},
		{
			name:        "all weights zero without drains",
			in:          weights.Input{Entries: []weights.Entry{entry("worker-a", 0), entry("worker-b", 0)}},
			want:        weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 0, 0), eff("worker-b", 0, 0)}},
			wantAllZero: true,
		},
		{
			name:        "empty entries",
			in:          weights.Input{},
			want:        weights.Result{},
			wantAllZero: true,
		},
		{
			name:        "empty entries with drains: all pending",
			in:          weights.Input{Drains: []weights.Drain{drain("b", "worker-a"), drain("a", "worker-a")}},
			want:        weights.Result{Pending: []weights.Drain{drain("a", "worker-a"), drain("b", "worker-a")}},
			wantAllZero: true,
		},
		{
			name:      "weight bounds are valid",
			in:        weights.Input{Entries: []weights.Entry{entry("worker-a", 0), entry("worker-b", weights.MaxWeight)}},
			want:      weights.Result{Entries: []weights.EffectiveEntry{eff("worker-a", 0, 0), eff("worker-b", weights.MaxWeight, weights.MaxWeight)}},
			wantTotal: weights.MaxWeight,
		},
		{
			name: "sorted by cluster",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-c", 3), entry("worker-a", 1), entry("a.b", 2)},
			},
			want:      weights.Result{Entries: []weights.EffectiveEntry{eff("a.b", 2, 2), eff("worker-a", 1, 1), eff("worker-c", 3, 3)}},
			wantTotal: 6,
		},
		{
			name: "drain clusters match exactly",
			in: weights.Input{
				Entries: []weights.Entry{entry("worker-a", 1)},
				Drains:  []weights.Drain{drain("d", "Worker-A")},
			},
			want: weights.Result{
				Entries: []weights.EffectiveEntry{eff("worker-a", 1, 1)},
				Pending: []weights.Drain{drain("d", "Worker-A")},
			},
			wantTotal: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.Compute(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantTotal, got.TotalEffective())
			assert.Equal(t, tc.wantAllZero, got.AllZero())
			assert.Equal(t, tc.wantDrained, got.Drained())
			for _, e := range got.Entries {
				assert.Equal(t, len(e.HeldBy) > 0, e.Drained(), e.Cluster)
			}
		})
	}
}

func TestComputeValidation(t *testing.T) {
	tests := []struct {
		name  string
		entry weights.Entry
		field string
		want  error
		msg   string // exact message of the single error
	}{
		{
			name:  "empty cluster",
			entry: weights.Entry{Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
			msg: `spec.entries[0] (cluster ""): cluster "": must be a lowercase DNS-1123 subdomain: is empty`,
		},
		{
			name:  "uppercase cluster",
			entry: weights.Entry{Cluster: "Worker-A", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
			msg: `spec.entries[0] (cluster "Worker-A"): cluster "Worker-A": must be a lowercase DNS-1123 subdomain: character 'W' at offset 0 is not a-z, 0-9, '-' or '.'`,
		},
		{
			name:  "underscore in cluster",
			entry: weights.Entry{Cluster: "worker_a", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
		},
		{
			name:  "cluster label starts with dash",
			entry: weights.Entry{Cluster: "a.-b", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
			msg: `spec.entries[0] (cluster "a.-b"): cluster "a.-b": must be a lowercase DNS-1123 subdomain: label "-b" must start and end with a-z or 0-9`,
		},
		{
			name:  "cluster ends with dash",
			entry: weights.Entry{Cluster: "worker-", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
		},
		{
			name:  "cluster with empty label",
			entry: weights.Entry{Cluster: "worker..a", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
		},
		{
			name:  "cluster ends with dot",
			entry: weights.Entry{Cluster: "worker.", Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
		},
		{
			name:  "cluster too long",
			entry: weights.Entry{Cluster: longName(254), Endpoint: "http://x", Weight: 1},
			field: "cluster", want: weights.ErrClusterInvalid,
		},
		{
			name:  "negative weight",
			entry: weights.Entry{Cluster: "worker-a", Endpoint: "http://x", Weight: -1},
			field: "weight", want: weights.ErrWeightRange,
			msg: `spec.entries[0] (cluster "worker-a"): weight -1: must be between 0 and 1000000`,
		},
		{
			name:  "weight above max",
			entry: weights.Entry{Cluster: "worker-a", Endpoint: "http://x", Weight: weights.MaxWeight + 1},
			field: "weight", want: weights.ErrWeightRange,
			msg: `spec.entries[0] (cluster "worker-a"): weight 1000001: must be between 0 and 1000000`,
		},
		{
			name:  "weight beyond int32",
			entry: weights.Entry{Cluster: "worker-a", Endpoint: "http://x", Weight: 1 << 40},
			field: "weight", want: weights.ErrWeightRange,
		},
		{
			name:  "ftp endpoint",
			entry: weights.Entry{Cluster: "worker-a", Endpoint: "ftp://x", Weight: 1},
			field: "endpoint", want: weights.ErrEndpointInvalid,
			msg: `spec.entries[0] (cluster "worker-a"): endpoint "ftp://x": must be an absolute http or https URL: scheme "ftp" is not http or https`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.Compute(weights.Input{Entries: []weights.Entry{tc.entry}, Drains: []weights.Drain{seedDrain}})
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, weights.Result{}, got, "invalid input returns a zero Result")

			var ee *weights.EntryError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 0, ee.Index)
			assert.Equal(t, tc.entry.Cluster, ee.Cluster)
			assert.Equal(t, tc.field, ee.Field)
			assert.ErrorIs(t, ee, tc.want)
			assert.Len(t, joined(t, err), 1)
			if tc.msg != "" {
				assert.EqualError(t, err, tc.msg)
			}
		})
	}
}

func TestComputeDuplicateCluster(t *testing.T) {
	in := weights.Input{Entries: []weights.Entry{entry("worker-a", 1), entry("worker-b", 1), entry("worker-a", 2)}}
	got, err := weights.Compute(in)
	require.ErrorIs(t, err, weights.ErrDuplicateCluster)
	assert.Equal(t, weights.Result{}, got)
	assert.EqualError(t, err, `spec.entries[2] (cluster "worker-a"): cluster "worker-a": must be unique across entries: already used by spec.entries[0]`)

	var ee *weights.EntryError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.Index)
	assert.Equal(t, "cluster", ee.Field)
}

func TestComputeMultipleErrors(t *testing.T) {
	in := weights.Input{Entries: []weights.Entry{
		{Cluster: "Bad", Endpoint: "ftp://x", Weight: -1},
		entry("worker-a", 1),
		{Cluster: "worker-a", Endpoint: "http://user:secret@worker-a", Weight: 1},
		{Cluster: "worker-c", Endpoint: "https://worker-c/v1", Weight: weights.MaxWeight + 1},
	}}
	got, err := weights.Compute(in)
	require.Error(t, err)
	assert.Equal(t, weights.Result{}, got)
	require.ErrorIs(t, err, weights.ErrClusterInvalid)
	require.ErrorIs(t, err, weights.ErrWeightRange)
	require.ErrorIs(t, err, weights.ErrEndpointInvalid)
	require.ErrorIs(t, err, weights.ErrDuplicateCluster)

	type pos struct {
		Index int
		Field string
		Err   error
	}
	var gotPos []pos
	for _, e := range joined(t, err) {
		var ee *weights.EntryError
		require.ErrorAs(t, e, &ee)
		var sentinel error
		for _, s := range []error{weights.ErrClusterInvalid, weights.ErrDuplicateCluster, weights.ErrWeightRange, weights.ErrEndpointInvalid} {
			if errors.Is(ee, s) {
				sentinel = s
			}
		}
		gotPos = append(gotPos, pos{ee.Index, ee.Field, sentinel})
	}
	assert.Equal(t, []pos{
		{0, "cluster", weights.ErrClusterInvalid},
		{0, "weight", weights.ErrWeightRange},
		{0, "endpoint", weights.ErrEndpointInvalid},
		{2, "cluster", weights.ErrDuplicateCluster},
		{2, "endpoint", weights.ErrEndpointInvalid},
		{3, "weight", weights.ErrWeightRange},
		{3, "endpoint", weights.ErrEndpointInvalid},
	}, gotPos)
	assert.NotContains(t, err.Error(), "secret", "credentials must not leak into messages")
}

func TestComputeOrderIndependent(t *testing.T) {
	in := weights.Input{
		Entries: []weights.Entry{
			entry("worker-a", 7, "ref-2", "ref-1"),
			entry("worker-b", 3),
			entry("worker-c", 0),
			entry("worker-d", 100, "maintenance-a"),
			entry("edge.worker-e", 9),
		},
		Drains: []weights.Drain{
			seedDrain,
			drain("upgrade", "worker-d"),
			drain("maintenance-a", "worker-d"),
			drain("pending-2", "worker-z"),
			drain("pending-1", "worker-y"),
		},
	}
	want, err := weights.Compute(in)
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		shuffled := weights.Input{Entries: slices.Clone(in.Entries), Drains: slices.Clone(in.Drains)}
		rng.Shuffle(len(shuffled.Entries), func(i, j int) {
			shuffled.Entries[i], shuffled.Entries[j] = shuffled.Entries[j], shuffled.Entries[i]
		})
		rng.Shuffle(len(shuffled.Drains), func(i, j int) {
			shuffled.Drains[i], shuffled.Drains[j] = shuffled.Drains[j], shuffled.Drains[i]
		})
		got, err := weights.Compute(shuffled)
		require.NoError(t, err)
		require.Equal(t, want, got, "shuffle %d", i)
	}
	assert.Equal(t, []string{"maintenance-a", "upgrade"}, want.Entries[4].HeldBy)
	assert.Equal(t, []string{"maintenance-a", "ref-1", "ref-2"}, want.Entries[1].HeldBy)
}

func TestComputeDoesNotMutateInput(t *testing.T) {
	in := weights.Input{
		Entries: []weights.Entry{
			entry("worker-b", 1, "z", "a", "z"),
			entry("worker-a", 1),
		},
		Drains: []weights.Drain{drain("zz", "worker-q"), drain("b", "worker-b"), drain("aa", "worker-p")},
	}
	before := cloneInput(in)
	got, err := weights.Compute(in)
	require.NoError(t, err)
	assert.Equal(t, before, in)

	// The result must not alias the input: editing it leaves the input alone.
	got.Entries[1].HeldBy[0] = "changed"
	got.Pending[0].ID = "changed"
	assert.Equal(t, before, in)
}

func cloneInput(in weights.Input) weights.Input {
	out := weights.Input{Entries: slices.Clone(in.Entries), Drains: slices.Clone(in.Drains)}
	for i := range out.Entries {
		out.Entries[i].DrainRefs = slices.Clone(out.Entries[i].DrainRefs)
	}
	return out
}

// joined returns the errors inside an errors.Join result.
func joined(t *testing.T, err error) []error {
	t.Helper()
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "error %T is not a joined error", err)
	return j.Unwrap()
}

func longName(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}

func TestResultHelpers(t *testing.T) {
	var empty weights.Result
	assert.True(t, empty.AllZero())
	assert.Zero(t, empty.TotalEffective())
	assert.Nil(t, empty.Drained())

	r := weights.Result{Entries: []weights.EffectiveEntry{
		eff("worker-a", weights.MaxWeight, weights.MaxWeight),
		eff("worker-b", weights.MaxWeight, weights.MaxWeight),
		eff("worker-c", 5, 0, "d"),
	}}
	assert.Equal(t, int64(2*weights.MaxWeight), r.TotalEffective())
	assert.False(t, r.AllZero())
	assert.Equal(t, []string{"worker-c"}, r.Drained())
	assert.True(t, r.Entries[2].Drained())
	assert.False(t, r.Entries[0].Drained())
}

func TestEntryErrorNil(t *testing.T) {
	var e *weights.EntryError
	assert.Equal(t, "<nil>", e.Error())
	assert.NoError(t, e.Unwrap())

	e = &weights.EntryError{Index: 3, Cluster: "worker-a", Field: "weight", Err: weights.ErrWeightRange}
	assert.EqualError(t, e, `spec.entries[3] (cluster "worker-a"): weight: must be between 0 and 1000000`)
	assert.ErrorIs(t, e, weights.ErrWeightRange)
}

func TestClusterMaxLength(t *testing.T) {
	_, err := weights.Compute(weights.Input{Entries: []weights.Entry{{Cluster: longName(253), Endpoint: "http://x"}}})
	require.NoError(t, err)
}
