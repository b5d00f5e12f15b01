package publish

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
)

// The claim table: the lock of this process that makes granting a name and journaling it
// one step for its workers. The claim journal itself (status.publisher: the typed targets,
// JournalOf, LastPositive, JournaledNames) is pure and lives in package model
// (model/journal.go); only the journal of this publisher (Config.PublisherName) counts.

// claimTable is the claim table of this process: the names it granted to each map, from
// the grant until the map's journal drops them or the map is deleted. A reconcile's plan
// sees the journals in the informer cache, which may not yet show a grant another worker
// just made; reserve consults this table under its lock before a grant, so two workers
// never grant overlapping names to two maps. All its state is guarded by mu.
//
// When names are contested per namespace (scoped: a Gateway per namespace and no xDS sink,
// caches.scoped), the table is per namespace: a name granted in one namespace holds nothing
// in another.
type claimTable struct {
	scoped bool
	mu     sync.Mutex
	holder map[string]types.NamespacedName   // scope + granted name -> map key
	index  map[string][]string               // scope + hostIndexKeys of a granted name -> granted names
	byKey  map[types.NamespacedName][]string // map key -> its granted names
}

func newClaimTable() *claimTable {
	return &claimTable{holder: map[string]types.NamespacedName{}, index: map[string][]string{}, byKey: map[types.NamespacedName][]string{}}
}

// newScopedClaimTable is a claim table per namespace when scoped.
func newScopedClaimTable(scoped bool) *claimTable {
	t := newClaimTable()
	t.scoped = scoped
	return t
}

// scope is the part of the table key's grants live in: its namespace when scoped, else all.
func (t *claimTable) scope(key types.NamespacedName) string {
	if t.scoped {
		return key.Namespace + "\x00"
	}
	return ""
}

// tableHolder is the map that holds a name in the claim table.
type tableHolder struct {
	Key  types.NamespacedName
	Name string
}

// reserve grants key each of names that no other map holds in the table (no overlapping
// name), and returns the granted ones, those of them key did not hold before (added: what
// to release should the journal write fail) and, for the others, who holds them.
func (t *claimTable) reserve(key types.NamespacedName, names []string) (granted, added []string, held map[string]tableHolder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sc := t.scope(key)
	for _, n := range model.UniqueNames(names) {
		if h, ok := t.overlapping(key, n); ok {
			if held == nil {
				held = map[string]tableHolder{}
			}
			held[n] = h
			continue
		}
		granted = append(granted, n)
		if t.holder[sc+n] == key {
			continue
		}
		added = append(added, n)
		t.holder[sc+n] = key
		t.byKey[key] = append(t.byKey[key], n)
		for _, k := range model.HostIndexKeys(n) {
			t.index[sc+k] = append(t.index[sc+k], n)
		}
	}
	return granted, added, held
}

// overlapping returns a name another map than key holds that overlaps n.
func (t *claimTable) overlapping(key types.NamespacedName, n string) (tableHolder, bool) {
	sc := t.scope(key)
	for _, k := range model.HostLookupKeys(n) {
		for _, m := range t.index[sc+k] {
			if h := t.holder[sc+m]; h != key && model.HostnamesOverlap(n, m) {
				return tableHolder{Key: h, Name: m}, true
			}
		}
	}
	return tableHolder{}, false
}

// release drops key's grants of names (after its journal dropped them, or its journal
// write failed).
func (t *claimTable) release(key types.NamespacedName, names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sc := t.scope(key)
	for _, n := range model.UniqueNames(names) {
		if t.holder[sc+n] != key {
			continue
		}
		delete(t.holder, sc+n)
		for _, k := range model.HostIndexKeys(n) {
			t.index[sc+k] = slices.DeleteFunc(t.index[sc+k], func(m string) bool { return m == n })
			if len(t.index[sc+k]) == 0 {
				delete(t.index, sc+k)
			}
		}
		t.byKey[key] = slices.DeleteFunc(t.byKey[key], func(m string) bool { return m == n })
	}
	if len(t.byKey[key]) == 0 {
		delete(t.byKey, key)
	}
}

// forget drops every grant of a deleted map.
func (t *claimTable) forget(key types.NamespacedName) {
	t.mu.Lock()
	names := slices.Clone(t.byKey[key])
	t.mu.Unlock()
	t.release(key, names)
}
