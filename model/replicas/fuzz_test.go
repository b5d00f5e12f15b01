package replicas

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds Decode annotation values: arbitrary ones (a report Lease anyone with
// write access to the publisher's namespace could edit) and ones Encode wrote from
// arbitrary reports. Decode never panics; what it returns is within the bounds Encode
// keeps, sorted, and judged without panicking; a report Encode wrote decodes to the
// sanitized report, maps left out only to fit MaxEncoded.
func FuzzDecode(f *testing.F) {
	seed := Report{Identity: "pub-0", Seq: 3, Clients: 2, Maps: []Map{
		{Key: "prod/chat", Digest: "d1", Relevant: 2, Acked: 1, Waiting: []string{"envoy-1"}},
		{Key: "prod/embed", Digest: "d2", Relevant: 1, Nack: &Nack{Client: "grpc-7", Version: "v3", Type: "Cluster", Message: "bad\ncluster"}},
	}, Truncated: []string{"staging"}}
	v, err := Encode(seed)
	require.NoError(f, err)
	f.Add(v, "prod/chat", "", 0, 0)
	f.Add("", "a/b", "x", 1, 1)
	f.Add("H4sIAAAAAAAA/6pWyk0tLk5MT1WyUlBKSS1OVtJRUEosLcnMzytRsjLQUUrOz0ktLUkFAAAA//8=", "a/b", "\n\"", -1, 2)
	neg, err := encode(Report{Identity: "x", Clients: -1, Maps: []Map{{Key: "a/b", Relevant: -5, Acked: 0}}})
	require.NoError(f, err)
	f.Add(neg, "a/b", "d", 0, 0)
	long, err := encode(Report{Identity: "x", Maps: []Map{{Key: strings.Repeat("k", 2*MaxKey), Digest: strings.Repeat("d", 4*MaxField),
		Waiting: []string{strings.Repeat("w", 4*MaxField), "a", "b", "c", "d", "e", "f", "g", "h", "i"},
		Nack:    &Nack{Message: strings.Repeat("m\n", MaxMessage)}}}, Truncated: []string{strings.Repeat("n", 300)}})
	require.NoError(f, err)
	f.Add(long, "k/k", "d", 3, 1)

	f.Fuzz(func(t *testing.T, value, key, text string, relevant, acked int) {
		checkDecoded(t, value)
		// A report written by Encode from fuzzed fields round-trips to its sanitized form.
		r := Report{Identity: "fuzz", Clients: max(relevant, 0), Maps: []Map{
			{Key: key, Digest: text, Relevant: max(relevant, 0), Acked: max(acked, 0), Waiting: []string{text, key}, Nack: &Nack{Client: text, Message: text}},
			{Key: "zz/" + text, Digest: "d", Relevant: 1},
		}, Truncated: []string{text}}
		enc, err := Encode(r)
		require.NoError(t, err)
		require.LessOrEqual(t, len(enc), MaxEncoded)
		back := checkDecoded(t, enc)
		require.Equal(t, "fuzz", back.Identity)
		want := sanitize(r)
		if len(back.Maps) == len(want.Maps) && !back.Overflow && len(back.Truncated) == len(want.Truncated) {
			require.Equal(t, want.Maps, back.Maps)
		}
	})
}

// checkDecoded decodes value and checks the bounds of what Decode returns.
func checkDecoded(t *testing.T, value string) Report {
	t.Helper()
	r, err := Decode(value)
	if err != nil {
		require.Equal(t, Report{}, r, "a failed decode returns no report")
		return r
	}
	require.GreaterOrEqual(t, r.Clients, 0)
	require.LessOrEqual(t, len(r.Truncated), MaxTruncated)
	for i, m := range r.Maps {
		require.LessOrEqual(t, len(m.Key), MaxKey)
		require.LessOrEqual(t, len(m.Digest), MaxField)
		require.LessOrEqual(t, len(m.Waiting), MaxWaiting)
		require.GreaterOrEqual(t, m.Relevant, 0)
		require.GreaterOrEqual(t, m.Acked, 0)
		for _, w := range m.Waiting {
			require.LessOrEqual(t, len(w), MaxField)
		}
		if m.Nack != nil {
			require.LessOrEqual(t, len(m.Nack.Client), MaxField)
			require.LessOrEqual(t, len(m.Nack.Version), MaxField)
			require.LessOrEqual(t, len(m.Nack.Type), MaxField)
			require.LessOrEqual(t, len(m.Nack.Message), MaxMessage)
		}
		if i > 0 {
			require.LessOrEqual(t, r.Maps[i-1].Key, m.Key, "maps sorted by key")
		}
		v := Judge([]Report{r}, m.Key, m.Digest, false)
		require.LessOrEqual(t, len(v.Message), maxMessage+len("…"))
	}
	r.Silent = &Silent{Since: time.Unix(0, 0), Until: time.Unix(1, 0)}
	Judge([]Report{r}, "a/b", "", true)
	return r
}
