package xds

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
)

// deltaTable is a cluster typeCache driven by whole tables (name -> version).
type deltaTable struct {
	c     *typeCache
	table map[string]string
	n     int
}

func newDeltaTable(table map[string]string) *deltaTable {
	d := &deltaTable{c: newTypeCache(resource.ClusterType), table: map[string]string{}}
	d.set(table)
	return d
}

// set serves table: the names it changes, adds or removes.
func (d *deltaTable) set(table map[string]string) {
	var changed []*entry
	var removed []string
	for name, v := range table {
		if d.table[name] != v {
			changed = append(changed, &entry{name: name, version: v, msg: &clusterv3.Cluster{Name: name}})
		}
	}
	for name := range d.table {
		if _, ok := table[name]; !ok {
			removed = append(removed, name)
		}
	}
	d.n++
	d.c.update(fmt.Sprint("v", d.n), changed, removed)
	d.table = maps.Clone(table)
}

// deltaClient is a delta stream's subscription and what it holds, as go-control-plane's
// server keeps them.
type deltaClient struct {
	sub   streamv3.Subscription
	holds map[string]string
}

func newDeltaClient(subscribe []string) *deltaClient {
	return &deltaClient{sub: streamv3.NewDeltaSubscription(subscribe, nil, nil, true), holds: map[string]string{}}
}

// answer asks c for what the stream lacks (a later request: it carries a nonce), applies
// it, and returns the names sent and "-name" for the ones removed.
func (cl *deltaClient) answer(t *testing.T, c *typeCache) []string {
	t.Helper()
	c.mu.Lock()
	resp := c.deltaAnswer(&cachev3.DeltaRequest{TypeUrl: resource.ClusterType, ResponseNonce: "1"}, cl.sub)
	c.mu.Unlock()
	if resp == nil {
		return nil
	}
	msg, err := resp.GetDeltaDiscoveryResponse()
	require.NoError(t, err)
	return cl.apply(msg, resp.GetNextVersionMap())
}

func (cl *deltaClient) apply(msg *discoveryv3.DeltaDiscoveryResponse, next map[string]string) []string {
	got := []string{}
	for _, r := range msg.GetResources() {
		cl.holds[r.GetName()] = r.GetVersion()
		got = append(got, r.GetName())
	}
	for _, name := range msg.GetRemovedResources() {
		delete(cl.holds, name)
		got = append(got, "-"+name)
	}
	cl.sub.SetReturnedResources(next)
	slices.Sort(got)
	return got
}

func TestDeltaWildcardReturnedMapIsSmall(t *testing.T) {
	table := map[string]string{}
	for i := range 1000 {
		table[fmt.Sprint("c", i)] = "1"
	}
	d := newDeltaTable(table)
	cl := newDeltaClient(nil)
	assert.Len(t, cl.answer(t, d.c), 1000)
	assert.Len(t, cl.sub.ReturnedResources(), 1, "first answer")
	table["c1"] = "2"
	d.set(table)
	assert.Equal(t, []string{"c1"}, cl.answer(t, d.c))
	assert.Len(t, cl.sub.ReturnedResources(), 1, "after an update")
	assert.Equal(t, d.table, cl.holds)
}

func TestDeltaWildcardSendsOnlyChangedSince(t *testing.T) {
	// steps applied in order; a stream behind by k misses the last k of them
	steps := []map[string]string{
		{"a": "1", "b": "1", "c": "1", "d": "1"},
		{"a": "2", "b": "1", "c": "1", "d": "1"},           // change a
		{"a": "2", "c": "1", "d": "1"},                     // remove b
		{"a": "2", "b": "3", "c": "1", "d": "1"},           // re-add b
		{"a": "2", "b": "3", "d": "2"},                     // remove c, change d
		{"a": "2", "b": "3", "c": "1", "d": "2"},           // re-add c as it was
		{"a": "1", "b": "3", "c": "1", "d": "2", "e": "1"}, // a back, add e
	}
	for _, tc := range []struct {
		behind int
		sent   []string
	}{
		{behind: 1, sent: []string{"a", "e"}},
		{behind: 3, sent: []string{"a", "d", "e"}}, // c removed and re-added as it was: unchanged
		{behind: 5, sent: []string{"a", "b", "d", "e"}},
	} {
		t.Run(fmt.Sprint(tc.behind, " behind"), func(t *testing.T) {
			d := newDeltaTable(steps[0])
			cl := newDeltaClient(nil)
			cl.answer(t, d.c)
			for _, s := range steps[1 : len(steps)-tc.behind] {
				d.set(s)
				cl.answer(t, d.c)
			}
			require.Equal(t, d.table, cl.holds)
			for _, s := range steps[len(steps)-tc.behind:] {
				d.set(s)
			}
			assert.Equal(t, tc.sent, cl.answer(t, d.c))
			assert.Equal(t, d.table, cl.holds)
			assert.Len(t, cl.sub.ReturnedResources(), 1)
			assert.Nil(t, cl.answer(t, d.c), "current: nothing to send")
		})
	}
}

func TestDeltaWildcardRemovalSinceIsSent(t *testing.T) {
	d := newDeltaTable(map[string]string{"a": "1", "b": "1"})
	cl := newDeltaClient(nil)
	cl.answer(t, d.c)
	d.set(map[string]string{"a": "1"})
	d.set(map[string]string{"a": "2"})
	assert.Equal(t, []string{"-b", "a"}, cl.answer(t, d.c))
	assert.Equal(t, d.table, cl.holds)
}

func TestDeltaWildcardOlderThanLogFallsBack(t *testing.T) {
	table := map[string]string{"gone": "1"}
	for i := range deltaLogNames {
		table[fmt.Sprint("c", i)] = "1"
	}
	d := newDeltaTable(table)
	cl := newDeltaClient(nil)
	cl.answer(t, d.c)
	delete(table, "gone")
	d.set(table)
	for v := 2; v < 5; v++ { // each update touches every name: the log keeps only the last
		for name := range table {
			table[name] = fmt.Sprint(v)
		}
		d.set(table)
	}
	_, logged := d.c.log.since(1, d.c.seq)
	require.False(t, logged, "the stream is older than the log")
	sent := cl.answer(t, d.c)
	assert.Len(t, sent, len(table)+1, "every served resource and the removal")
	assert.Contains(t, sent, "-gone")
	assert.Equal(t, d.table, cl.holds)
	assert.Len(t, cl.sub.ReturnedResources(), 1)
}

func TestDeltaWildcardUnsubscribeEdits(t *testing.T) {
	d := newDeltaTable(map[string]string{"a": "1", "b": "1", "x": "1", "y": "1"})
	cl := newDeltaClient([]string{"*", "x", "y"})
	require.True(t, cl.sub.IsWildcard())
	assert.Equal(t, []string{"a", "b", "x", "y"}, cl.answer(t, d.c))
	d.set(map[string]string{"a": "1", "b": "1", "x": "1"}) // y goes
	cl.sub.UpdateResourceSubscriptions(nil, []string{"x", "y", "b"})
	assert.Equal(t, map[string]string{seqMark: "1", "x": "", "y": ""}, cl.sub.ReturnedResources(), "b was not subscribed by name: deleted")
	assert.Equal(t, []string{"-y", "x"}, cl.answer(t, d.c), "x resent, y removed")
	assert.Equal(t, d.table, cl.holds)
	cl.sub.UpdateResourceSubscriptions([]string{"a"}, nil)
	cl.sub.UpdateResourceSubscriptions(nil, []string{"a"})
	assert.Equal(t, []string{"a"}, cl.answer(t, d.c), "current, but a is an exception: not nil")
	assert.Nil(t, cl.answer(t, d.c))
}

func TestDeltaFirstRequestDiffsInitialVersions(t *testing.T) {
	d := newDeltaTable(map[string]string{"a": "1", "b": "1"})
	cl := &deltaClient{sub: streamv3.NewDeltaSubscription(nil, nil, map[string]string{"a": "1", "old": "1"}, true),
		holds: map[string]string{"a": "1", "old": "1"}}
	assert.Equal(t, []string{"-old", "b"}, cl.answer(t, d.c))
	assert.Equal(t, d.table, cl.holds)
}

// BenchmarkDeltaWildcardStreams reports the bytes each delta wildcard stream retains (its
// returned-resources map) over a type of 80,000 names, after its first answer and one update.
func BenchmarkDeltaWildcardStreams(b *testing.B) {
	const streams, names = 20, 80000
	for b.Loop() {
		c := newTypeCache(resource.ClusterType)
		var changed []*entry
		for i := range names {
			name := fmt.Sprintf("prod/map-%05d", i)
			changed = append(changed, &entry{name: name, version: "1", res: &anypb.Any{}})
		}
		c.update("v1", changed, nil)
		subs := make([]streamv3.Subscription, streams)
		for i := range subs {
			subs[i] = streamv3.NewDeltaSubscription(nil, nil, nil, true)
			ch := make(chan cachev3.DeltaResponse, 1)
			c.createDeltaWatch(&cachev3.DeltaRequest{TypeUrl: resource.ClusterType}, subs[i], ch)
			subs[i].SetReturnedResources((<-ch).GetNextVersionMap())
		}
		chs := make([]chan cachev3.DeltaResponse, streams)
		for i := range subs {
			chs[i] = make(chan cachev3.DeltaResponse, 1)
			c.createDeltaWatch(&cachev3.DeltaRequest{TypeUrl: resource.ClusterType, ResponseNonce: "1"}, subs[i], chs[i])
		}
		var next []*entry
		for _, e := range changed[:100] {
			next = append(next, &entry{name: e.name, version: "2", res: &anypb.Any{}})
		}
		c.update("v2", next, nil)
		for i := range subs {
			subs[i].SetReturnedResources((<-chs[i]).GetNextVersionMap())
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		with := ms.HeapAlloc
		clear(subs) // what the streams alone retain goes
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(int64(with)-int64(ms.HeapAlloc))/streams, "retained-B/stream")
		runtime.KeepAlive(c)
	}
}

func TestDeltaLogBounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		updates   []map[string]string
		removed   [][]string
		bound     int
		seqs      []uint64
		gone      []string
		since     uint64
		sinceKept bool
	}{
		{name: "within the bound", updates: []map[string]string{{"a": ""}, {"b": ""}}, removed: [][]string{nil, nil}, bound: 2,
			seqs: []uint64{1, 2}, since: 0, sinceKept: true},
		{name: "oldest goes", updates: []map[string]string{{"a": ""}, {"b": "", "c": ""}}, removed: [][]string{nil, nil}, bound: 2,
			seqs: []uint64{2}, since: 0},
		{name: "newest stays over the bound", updates: []map[string]string{{"a": "", "b": "", "c": ""}}, removed: [][]string{nil}, bound: 2,
			seqs: []uint64{1}, since: 0, sinceKept: true},
		{name: "tombstones, re-add clears", updates: []map[string]string{{"a": "1", "b": "1"}, {"a": ""}}, removed: [][]string{{"a", "b"}, nil}, bound: 10,
			seqs: []uint64{1, 2}, gone: []string{"b"}, since: 1, sinceKept: true},
		{name: "tombstones past their bound keep the update's own", updates: []map[string]string{{"a": "1", "b": "1"}, {"c": "1"}}, removed: [][]string{{"a", "b"}, {"c"}}, bound: 0,
			seqs: []uint64{2}, gone: []string{"c"}, since: 1, sinceKept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l deltaLog
			for i, prev := range tc.updates {
				l.record(uint64(i+1), prev, tc.removed[i], tc.bound)
			}
			var seqs []uint64
			for _, e := range l.entries {
				seqs = append(seqs, e.seq)
			}
			assert.Equal(t, tc.seqs, seqs)
			assert.ElementsMatch(t, tc.gone, slices.Collect(maps.Keys(l.gone)))
			_, ok := l.since(tc.since, uint64(len(tc.updates)))
			assert.Equal(t, tc.sinceKept, ok)
		})
	}
}

// A stream complete for an update before the tombstones were last cleared cannot be told
// what it must drop: it is closed (errBehind), so its client reconnects and declares what
// it holds, rather than ACK a response that leaves a removed resource in place.
func TestDeltaWildcardBehindTheTombstonesIsClosed(t *testing.T) {
	table := map[string]string{}
	for i := range deltaLogNames {
		table[fmt.Sprint("c", i)] = "1"
	}
	d := newDeltaTable(table)
	behind := newDeltaClient(nil)
	behind.answer(t, d.c)
	for round := range deltaGoneFactor + 2 { // every name removed, then served anew, round after round
		fresh := map[string]string{}
		for i := range deltaLogNames {
			fresh[fmt.Sprint("r", round, "-", i)] = "1"
		}
		d.set(fresh)
	}
	require.Positive(t, d.c.log.goneFrom, "the tombstones were cleared")
	d.c.mu.Lock()
	resp := d.c.deltaAnswer(&cachev3.DeltaRequest{TypeUrl: resource.ClusterType, ResponseNonce: "1"}, behind.sub)
	d.c.mu.Unlock()
	require.NotNil(t, resp)
	_, err := resp.GetDeltaDiscoveryResponse()
	assert.ErrorIs(t, err, errBehind)

	current := newDeltaClient(nil)
	current.answer(t, d.c)
	assert.Equal(t, d.table, current.holds, "a new stream is answered")
}
