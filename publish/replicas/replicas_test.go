package replicas

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeDecode(t *testing.T) {
	r := Report{Identity: "pub-b", Clients: 3, Maps: []Map{
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

// A cold start of many maps stays small enough for an annotation (256 KiB with the rest).
func TestEncodeMaxMapsFitsAnAnnotation(t *testing.T) {
	r := Report{Identity: "pub-b", Clients: 100}
	for i := range MaxMaps {
		r.Maps = append(r.Maps, Map{Key: "namespace-" + strings.Repeat("x", 20) + "/map-" + string(rune('a'+i%26)) + strings.Repeat("0", i%7),
			Digest: "0123456789abcdef", Relevant: 100, Acked: 90, Waiting: []string{"grpc-client-0001/sotw-17", "grpc-client-0002/sotw-18"}})
	}
	v, err := Encode(r)
	require.NoError(t, err)
	assert.Less(t, len(v), 200<<10, "encoded size %d", len(v))
}

func TestLeaseName(t *testing.T) {
	a, b := LeaseName("trafficmap-publisher", "pod-a"), LeaseName("trafficmap-publisher", "pod-b")
	assert.NotEqual(t, a, b)
	assert.True(t, strings.HasPrefix(a, "trafficmap-publisher-xds-"))
	long := LeaseName(strings.Repeat("l", 250), "pod-a")
	assert.LessOrEqual(t, len(long), 63)
	assert.Equal(t, a, LeaseName("trafficmap-publisher", "pod-a"), "stable")
}

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
			"replica pub-b lists more unconfirmed maps than its report holds"},
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
