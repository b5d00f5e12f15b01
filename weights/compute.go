package weights

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// maxClusterLen is the DNS-1123 subdomain length limit.
const maxClusterLen = 253

// Entry is one TrafficMap entry as input to [Compute].
type Entry struct {
	Cluster   string   // workload cluster name, a lowercase DNS-1123 subdomain
	Endpoint  string   // URL string
	Weight    int64    // TrafficMap weight (int64 so out-of-range input can be represented and rejected)
	DrainRefs []string // drain IDs the routing controller already recorded on the entry, taken verbatim
}

// Input is everything [Compute] needs: the TrafficMap entries, the annotation
// drains, already parsed by [ParseDrains], and the fleet drains: the taints of each
// workload cluster and the service's tolerations.
type Input struct {
	Entries []Entry
	Drains  []Drain // annotation drains (already parsed)

	// Taints are the taints of each workload cluster, keyed by cluster name (already
	// parsed, e.g. by [ParseTaints]); clusters with no entry are ignored. Nil means no
	// taints anywhere.
	Taints map[string][]Taint
	// Tolerations are the service's tolerations (already parsed, e.g. by
	// [ParseTolerations]).
	Tolerations []Toleration
}

// EffectiveEntry is one validated entry with its effective weight and the holds on
// it.
type EffectiveEntry struct {
	Cluster   string
	Endpoint  Endpoint
	Weight    int32    // TrafficMap weight
	Effective int32    // 0 if drained, else Weight
	HeldBy    []string // sorted, deduplicated IDs holding the entry: annotation drain IDs naming this cluster ∪ the entry's DrainRefs; nil when none
	Taints    []Taint  // the cluster's NoExecute taints the service does not tolerate, sorted (see [Untolerated]); nil when none
}

// Drained reports whether anything holds the entry, i.e. whether HeldBy or Taints
// is non-empty; a drained entry has Effective 0.
func (e EffectiveEntry) Drained() bool { return len(e.HeldBy) > 0 || len(e.Taints) > 0 }

// Result is the outcome of [Compute].
type Result struct {
	Entries []EffectiveEntry // sorted by Cluster; nil when there are no entries
	Pending []Drain          // annotation drains naming a cluster with no entry, sorted by ID (then Cluster, Reason); nil when none
}

// TotalEffective returns the sum of the effective weights of all entries.
func (r Result) TotalEffective() int64 {
	var total int64
	for _, e := range r.Entries {
		total += int64(e.Effective)
	}
	return total
}

// AllZero reports whether no entry has a positive effective weight; it is true
// for an empty Entries.
func (r Result) AllZero() bool {
	for _, e := range r.Entries {
		if e.Effective > 0 {
			return false
		}
	}
	return true
}

// Drained returns the clusters of the drained entries, sorted; nil when none.
func (r Result) Drained() []string {
	var out []string
	for _, e := range r.Entries {
		if e.Drained() {
			out = append(out, e.Cluster) // Entries is sorted, so out is too
		}
	}
	return out
}

// Compute validates the input as a whole and returns effective weights. Invalid
// input returns a zero Result and every problem as an [*EntryError], in entry
// order, joined with errors.Join; nothing is half-applied. The input is not
// mutated.
func Compute(in Input) (Result, error) {
	var errs []error
	endpoints := make([]Endpoint, len(in.Entries))
	first := make(map[string]int, len(in.Entries)) // cluster -> first entry index
	for i, e := range in.Entries {
		entryErr := func(field, value string, err error) {
			errs = append(errs, &EntryError{Index: i, Cluster: e.Cluster, Field: field, Err: err, value: value})
		}
		if err := checkCluster(e.Cluster); err != nil {
			entryErr(fieldCluster, strconv.Quote(e.Cluster), err)
		} else if j, dup := first[e.Cluster]; dup {
			entryErr(fieldCluster, strconv.Quote(e.Cluster),
				fmt.Errorf("%w: already used by spec.entries[%d]", ErrDuplicateCluster, j))
		} else {
			first[e.Cluster] = i
		}
		if e.Weight < 0 || e.Weight > MaxWeight {
			entryErr(fieldWeight, strconv.FormatInt(e.Weight, 10), ErrWeightRange)
		}
		ep, shown, err := parseEndpoint(e.Endpoint)
		if err != nil {
			entryErr(fieldEndpoint, shown, err)
		}
		endpoints[i] = ep
	}
	if len(errs) > 0 {
		return Result{}, errors.Join(errs...)
	}

	// Annotation holds per cluster; drains naming no entry are pending.
	var held map[string][]string
	var pending []Drain
	for _, d := range in.Drains {
		if _, ok := first[d.Cluster]; !ok {
			pending = append(pending, d)
			continue
		}
		if held == nil {
			held = make(map[string][]string)
		}
		held[d.Cluster] = append(held[d.Cluster], d.ID)
	}
	slices.SortFunc(pending, func(a, b Drain) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Reason, b.Reason))
	})

	var entries []EffectiveEntry
	if len(in.Entries) > 0 {
		entries = make([]EffectiveEntry, len(in.Entries))
	}
	for i, e := range in.Entries {
		w := int32(e.Weight) // validated to 0..MaxWeight above
		out := EffectiveEntry{Cluster: e.Cluster, Endpoint: endpoints[i], Weight: w, Effective: w}
		ids := held[e.Cluster]
		if n := len(ids) + len(e.DrainRefs); n > 0 {
			holders := make([]string, 0, n) // fresh slice: never alias the input
			holders = append(holders, ids...)
			holders = append(holders, e.DrainRefs...)
			slices.Sort(holders)
			out.HeldBy = slices.Clip(slices.Compact(holders))
			out.Effective = 0
		}
		if out.Taints = Untolerated(in.Taints[e.Cluster], in.Tolerations); out.Taints != nil {
			out.Effective = 0
		}
		entries[i] = out
	}
	slices.SortFunc(entries, func(a, b EffectiveEntry) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return Result{Entries: entries, Pending: pending}, nil
}

// checkCluster reports whether name is a lowercase DNS-1123 subdomain, wrapping
// ErrClusterInvalid with the first rule it breaks.
func checkCluster(name string) error {
	if name == "" {
		return fmt.Errorf("%w: is empty", ErrClusterInvalid)
	}
	if len(name) > maxClusterLen {
		return fmt.Errorf("%w: is %d characters long, more than %d", ErrClusterInvalid, len(name), maxClusterLen)
	}
	for i, r := range name {
		if !isAlnum(r) && r != '-' && r != '.' {
			return fmt.Errorf("%w: character %q at offset %d is not a-z, 0-9, '-' or '.'", ErrClusterInvalid, r, i)
		}
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '.' {
			continue
		}
		label := name[start:i]
		if label == "" {
			return fmt.Errorf("%w: has an empty label", ErrClusterInvalid)
		}
		if !isAlnum(rune(label[0])) || !isAlnum(rune(label[len(label)-1])) {
			return fmt.Errorf("%w: label %q must start and end with a-z or 0-9", ErrClusterInvalid, label)
		}
		start = i + 1
	}
	return nil
}

func isAlnum(r rune) bool { return ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') }
