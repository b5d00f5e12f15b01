package model

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/weights"
)

func TestContentDigest(t *testing.T) {
	entries := []weights.EffectiveEntry{{Cluster: "worker-a", Effective: 0}, {Cluster: "worker-b", Effective: 10}}
	entries[0].Endpoint.URL, entries[1].Endpoint.URL = "https://a.example.com", "https://b.example.com"
	p := &Plan{Service: "chat", Hostnames: []string{"chat.example.com"}, Conflicts: []Conflict{{Hostname: "b.example.com"}},
		Result: weights.Result{Entries: entries}}
	// The digests main recorded in record ConfigMaps (RecordKeyContent): unchanged, so a
	// record written before still proves its content after an upgrade.
	assert.Equal(t, "ef63b86278ca52bceb113c46", p.Digest())
	assert.Equal(t, "09de141c55c46c2634289a5c", (&Plan{Service: "chat"}).Digest())
	assert.Equal(t, p.Digest(), ContentDigest("chat", []string{"chat.example.com"}, []string{"b.example.com"}, entries))

	for _, tc := range []struct {
		name                string
		service             string
		hostnames, withheld []string
		same                bool
	}{
		{"names in any order", "chat", []string{"chat.example.com"}, []string{"b.example.com"}, true},
		{"a served name is not a withheld one", "chat", []string{"b.example.com"}, []string{"chat.example.com"}, false},
		{"no field runs into the next", "chat", []string{"chat.example.com", "b.example.com"}, nil, false},
		{"another service", "chat2", []string{"chat.example.com"}, []string{"b.example.com"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ContentDigest(tc.service, tc.hostnames, tc.withheld, entries)
			assert.Equal(t, tc.same, got == p.Digest(), got)
		})
	}
	moved := append([]weights.EffectiveEntry(nil), entries...)
	moved[1].Effective = 9
	assert.NotEqual(t, p.Digest(), ContentDigest("chat", []string{"chat.example.com"}, []string{"b.example.com"}, moved), "a weight is content")
}
