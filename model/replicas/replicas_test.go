package replicas

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeDecode(t *testing.T) {
	r := Report{Identity: "pub-b", Clients: 3, Arrived: slices.Sorted(slices.Values([]string{ClientTag("", "envoy-1"), ClientTag("edge", "envoy-2")})), Maps: []Map{
		{Key: "prod/chat", Digest: "d1", Relevant: 2, Acked: 1, Waiting: []string{"grpc-1/sotw-3"}},
		{Key: "prod/other", Digest: "d2", Relevant: 1, Nack: &Nack{Client: "envoy-1/delta-2", Version: "v2", Type: "Cluster", Message: "bad"}},
	}}
	v, err := Encode(r)
	require.NoError(t, err)
	back, err := Decode(v)
	require.NoError(t, err)
	assert.Equal(t, r, back)
	again, err := Encode(back)
	require.NoError(t, err)
	assert.Equal(t, v, again, "deterministic")

	for _, bad := range []string{"", "not base64!", "aGVsbG8="} {
		_, err := Decode(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// Report.Arrived names clients by ClientTag: the same on every replica, distinct per
// identity and node id, never the node id itself. What a report lists there is bounded as
// everything else: only tags, deduplicated, sorted, at most MaxArrived. It is left out of a
// report that does not fit (the departed streams then hold until their grace ends).
func TestArrivedTags(t *testing.T) {
	a := ClientTag("", "envoy-1")
	assert.Len(t, a, 24)
	assert.Equal(t, a, ClientTag("", "envoy-1"))
	assert.NotEqual(t, a, ClientTag("edge", "envoy-1"))
	assert.NotEqual(t, ClientTag("a", "b\x00c"), ClientTag("a\x00b", "c"), "a node id cannot move the boundary")
	assert.NotContains(t, a, "envoy")

	var many []string
	for i := range 2 * MaxArrived {
		many = append(many, ClientTag("", strconv.Itoa(i)))
	}
	hostile := append([]string{"not a tag", strings.Repeat("A", 24), strings.Repeat("x", 1<<20), a, a}, many...)
	v, err := Encode(Report{Identity: "pub-b", Arrived: hostile})
	require.NoError(t, err)
	back, err := Decode(v)
	require.NoError(t, err)
	assert.Len(t, back.Arrived, MaxArrived)
	assert.Contains(t, back.Arrived, a, "the first are kept")
	assert.True(t, slices.IsSorted(back.Arrived))
	assert.NotContains(t, back.Arrived, "not a tag")

	big := Report{Identity: "pub-b", Arrived: many[:MaxArrived]}
	for i := range 20000 {
		big.Maps = append(big.Maps, Map{Key: fmt.Sprintf("ns-%d/m-%d", i%50, i), Digest: hex.EncodeToString([]byte(strconv.Itoa(i * 7919))), Relevant: 3})
	}
	v, err = Encode(big)
	require.NoError(t, err)
	back, err = Decode(v)
	require.NoError(t, err)
	assert.NotEmpty(t, back.Truncated, "the report did not fit")
	assert.Empty(t, back.Arrived, "so it names no arrival")
}

// A cold start of many maps stays small enough for an annotation, with no map left out.
func TestEncodeColdStartFitsAnAnnotation(t *testing.T) {
	r := Report{Identity: "pub-b", Clients: 100}
	for i := range 2000 {
		r.Maps = append(r.Maps, Map{Key: fmt.Sprintf("namespace-%s/map-%05d", strings.Repeat("x", 20), i),
			Digest: "0123456789abcdef", Relevant: 100, Acked: 90, Waiting: []string{"grpc-client-0001/sotw-17", "grpc-client-0002/sotw-18"}})
	}
	v, err := Encode(r)
	require.NoError(t, err)
	assert.Less(t, len(v), 200<<10, "encoded size %d", len(v))
	back, err := Decode(v)
	require.NoError(t, err)
	assert.Equal(t, r.Maps, back.Maps)
	assert.Empty(t, back.Truncated)
}

// hexString is n random hex characters (deterministic per rng).
func hexString(rng *rand.Rand, n int) string {
	b := make([]byte, (n+1)/2)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return hex.EncodeToString(b)[:n]
}

// Issue 25, item 2: client-chosen node ids and NACK text are copied into a report, so it
// grew past the 256 KiB annotation limit (and the leader's 8 MiB decode cap), and the
// leader lost the whole replica. Encoded, it stays within the limit; every map it was about
// is still held (listed and waiting, or left out and so held), none released; a map of
// another namespace whose clients all ACKed is still released.
func TestEncodeBoundsClientChosenStrings(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 2))
	r := Report{Identity: "pub-b", Clients: 9}
	for i := range 100 {
		m := Map{Key: fmt.Sprintf("aaa/map-%03d", i), Digest: "d-" + strconv.Itoa(i), Relevant: 9, Acked: 1,
			Nack: &Nack{Client: hexString(rng, 4<<10), Version: hexString(rng, 1<<10), Type: "Cluster", Message: hexString(rng, 64<<10)}}
		for range 8 {
			m.Waiting = append(m.Waiting, hexString(rng, 4<<10)+"/sotw-1")
		}
		for range 12 {
			m.Departed = append(m.Departed, "departed "+hexString(rng, 4<<10))
		}
		r.Maps = append(r.Maps, m)
	}
	r.Maps = append(r.Maps, Map{Key: "bbb/chat", Digest: "ok", Relevant: 2, Acked: 2})
	v, err := Encode(r)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(v), 256<<10, "the encoded report fits an annotation")
	back, err := Decode(v)
	require.NoError(t, err)
	assert.Equal(t, "pub-b", back.Identity)
	for i := range 100 {
		key := fmt.Sprintf("aaa/map-%03d", i)
		verdict := Judge([]Report{back}, key, "d-"+strconv.Itoa(i), false)
		assert.False(t, verdict.Done, "%s is held: %s", key, verdict.Message)
	}
	verdict := Judge([]Report{back}, "bbb/chat", "ok", false)
	assert.True(t, verdict.Done, verdict.Message)
	for _, m := range back.Maps {
		for _, w := range m.Waiting {
			assert.LessOrEqual(t, len(w), 128)
		}
		assert.LessOrEqual(t, len(m.Departed), MaxWaiting)
		for _, d := range m.Departed {
			assert.LessOrEqual(t, len(d), 128)
		}
		if m.Nack != nil {
			assert.LessOrEqual(t, len(m.Nack.Message), 512)
			assert.LessOrEqual(t, len(m.Nack.Client), 128)
		}
	}
}

// One namespace's count never leaves another's maps out: 1,200 NACKed maps with long
// names and messages in aaa (far more than fit) leave out maps of aaa alone; ccc's map,
// waiting, is listed with its detail; bbb's, ACKed everywhere, is released; every map of
// aaa is held, those listed as rejected.
func TestEncodeSharesSpaceByNamespace(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 4))
	r := Report{Identity: "pub-b", Clients: 3}
	var keys []string
	for range 1200 {
		key := "aaa/" + hexString(rng, 300)
		keys = append(keys, key)
		r.Maps = append(r.Maps, Map{Key: key, Digest: "d", Relevant: 1, Waiting: []string{"envoy-1/sotw-1"},
			Nack: &Nack{Client: "envoy-1/sotw-1", Version: "v1", Type: "Cluster", Message: hexString(rng, 40)}})
	}
	r.Maps = append(r.Maps, Map{Key: "bbb/chat", Digest: "ok", Relevant: 3, Acked: 3},
		Map{Key: "ccc/chat", Digest: "c", Relevant: 3, Acked: 2, Waiting: []string{"grpc-1/sotw-2"}})
	v, err := Encode(r)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(v), MaxEncoded)
	back, err := Decode(v)
	require.NoError(t, err)
	assert.Equal(t, []string{"aaa"}, back.Truncated)
	assert.False(t, back.Overflow)
	assert.True(t, Judge([]Report{back}, "bbb/chat", "ok", false).Done)
	ccc := Judge([]Report{back}, "ccc/chat", "c", false)
	assert.False(t, ccc.Done)
	assert.Equal(t, "replica pub-b: 2/3 relevant clients ACKed, waiting for grpc-1/sotw-2", ccc.Message)
	listed := 0
	for _, key := range keys {
		verdict := Judge([]Report{back}, key, "d", false)
		require.False(t, verdict.Done)
		if verdict.Nack != nil {
			listed++
		} else {
			assert.Contains(t, verdict.Message, "left maps of namespace aaa out of its report")
		}
	}
	assert.Positive(t, listed)
	assert.Less(t, listed, len(keys))

	again, err := Encode(r)
	require.NoError(t, err)
	assert.Equal(t, v, again, "deterministic")
}

// cut keeps a string within n bytes, valid UTF-8, marked when cut.
func TestEncodeCutsStrings(t *testing.T) {
	assert.Equal(t, "abc", cut("abc", 10))
	got := cut(strings.Repeat("é", 100), 11)
	assert.LessOrEqual(t, len(got), 11)
	assert.True(t, strings.HasSuffix(got, "…"))
	assert.True(t, utf8.ValidString(got))
}

func TestLeaseName(t *testing.T) {
	a, b := LeaseName("trafficmap-publisher", "pod-a"), LeaseName("trafficmap-publisher", "pod-b")
	assert.NotEqual(t, a, b)
	assert.True(t, strings.HasPrefix(a, "trafficmap-publisher-xds-"))
	long := LeaseName(strings.Repeat("l", 250), "pod-a")
	assert.LessOrEqual(t, len(long), 63)
	assert.Equal(t, a, LeaseName("trafficmap-publisher", "pod-a"), "stable")
}

// silent marks r as a report that expired at 12:00:00 with 3 clients and counts until 12:00:30.
func silent(r Report) Report {
	since := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r.Clients, r.Silent = 3, &Silent{Since: since, Until: since.Add(30 * time.Second)}
	return r
}

const silentSuffix = " (its report expired at 2026-12-04T12:00:00Z, not renewed: frozen or cut off; its 3 clients may still hold what it served, so it counts until 2026-12-04T12:00:30Z, --xds-peer-grace)"

// A silent report (expired, still counted for its clients: see Silent) is judged as a live one.
func TestJudge(t *testing.T) {
	const key, digest = "prod/chat", "d1"
	b := func(maps ...Map) Report { return Report{Identity: "pub-b", Maps: maps} }
	c := func(maps ...Map) Report { return Report{Identity: "pub-c", Maps: maps} }
	tests := []struct {
		name      string
		peers     []Report
		published bool
		done      bool
		acked     int
		total     int
		message   string
	}{
		{"no other replica", nil, false, true, 0, 0, ""},
		{"every peer's clients ACKed", []Report{b(Map{Key: key, Digest: digest, Relevant: 2, Acked: 2}), c(Map{Key: key, Digest: digest})}, false, true, 2, 2,
			"2 other replicas: 2/2 relevant clients ACKed"},
		{"a client of one peer has not ACKed", []Report{b(Map{Key: key, Digest: digest, Relevant: 2, Acked: 1, Waiting: []string{"grpc-1/sotw-3"}}),
			c(Map{Key: key, Digest: digest, Relevant: 1, Acked: 1})}, false, false, 2, 3,
			"replica pub-b: 1/2 relevant clients ACKed, waiting for grpc-1/sotw-3"},
		{"a peer serves other content", []Report{b(Map{Key: key, Digest: "old", Relevant: 1, Acked: 1})}, false, false, 0, 0,
			"replica pub-b does not serve this content yet"},
		{"a peer has not reported on an unconfirmed map", []Report{b(Map{Key: "prod/other", Digest: "x"})}, false, false, 0, 0,
			"replica pub-b has not reported on it yet"},
		{"a published map is absent from reports", []Report{b(Map{Key: "prod/other", Digest: "x"})}, true, true, 0, 0,
			"1 other replicas: 0/0 relevant clients ACKed"},
		{"an overflowing report", []Report{{Identity: "pub-b", Overflow: true}}, false, false, 0, 0,
			"replica pub-b left maps of namespace prod out of its report to keep it within 196608 bytes (held until listed)"},
		{"a report that left out maps of the namespace", []Report{{Identity: "pub-b", Truncated: []string{"prod"}}}, false, false, 0, 0,
			"replica pub-b left maps of namespace prod out of its report to keep it within 196608 bytes (held until listed)"},
		{"a report that left out maps of another namespace", []Report{{Identity: "pub-b", Truncated: []string{"other"}}}, false, false, 0, 0,
			"replica pub-b has not reported on it yet"},
		{"a silent peer has not reported on a new map", []Report{silent(b(Map{Key: "prod/other", Digest: "x"}))}, false, false, 0, 0,
			"replica pub-b has not reported on it yet" + silentSuffix},
		{"a silent peer serves older content", []Report{silent(b(Map{Key: key, Digest: "old", Relevant: 2, Acked: 2}))}, false, false, 0, 0,
			"replica pub-b does not serve this content yet" + silentSuffix},
		{"a silent peer's clients ACKed this content", []Report{silent(b(Map{Key: key, Digest: digest, Relevant: 2, Acked: 2}))}, false, true, 2, 2,
			"1 other replicas: 2/2 relevant clients ACKed"},
		{"a published map is absent from a silent report", []Report{silent(b())}, true, true, 0, 0,
			"1 other replicas: 0/0 relevant clients ACKed"},
		// Issue 44: a follower's departed client past the grace is named in the leader's True.
		{"a peer names a departed client past its grace", []Report{b(Map{Key: key, Digest: digest, Relevant: 1, Acked: 1,
			Departed: []string{`departed node "envoy-9" stream sotw-4 (departed 2026-12-06T07:00:00Z)`}})}, false, true, 1, 1,
			`1 other replicas: 1/1 relevant clients ACKed; not counted, past --xds-departed-grace: departed xds client stream(s) of other replicas that left without confirming these weights and may still route by older ones: replica pub-b: departed node "envoy-9" stream sotw-4 (departed 2026-12-06T07:00:00Z)`},
		{"a departed client of a peer serving older content is not named", []Report{b(Map{Key: key, Digest: "old", Relevant: 1, Acked: 1,
			Departed: []string{"departed x"}})}, false, false, 0, 0,
			"replica pub-b does not serve this content yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Judge(tt.peers, key, digest, tt.published)
			assert.Equal(t, tt.done, v.Done)
			assert.Equal(t, tt.acked, v.Acked)
			assert.Equal(t, tt.total, v.Total)
			assert.Equal(t, tt.message, v.Message)
			assert.Nil(t, v.Nack)
		})
	}

	nack := &Nack{Client: "envoy-1/delta-2", Version: "v2", Type: "Cluster", Message: "bad cluster"}
	v := Judge([]Report{c(Map{Key: key, Digest: digest, Relevant: 1, Nack: nack})}, key, digest, false)
	assert.False(t, v.Done)
	assert.Equal(t, nack, v.Nack)
	assert.Equal(t, "xds client envoy-1/delta-2 of replica pub-c rejected version v2 (Cluster): bad cluster", v.Message)
}
