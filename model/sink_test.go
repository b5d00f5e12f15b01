package model

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/weights"
)

func TestPlanDigest(t *testing.T) {
	base := func() *Plan {
		return &Plan{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"b.example.com", "a.example.com"},
			Result: weights.Result{Entries: []weights.EffectiveEntry{
				{Cluster: "worker-a", Endpoint: weights.Endpoint{URL: "http://a:80"}, Effective: 0},
				{Cluster: "worker-b", Endpoint: weights.Endpoint{URL: "http://b:80"}, Effective: 1},
			}},
			Drains: []weights.Drain{{ID: "m-a", Cluster: "worker-a", Reason: "r"}}}
	}
	want := base().Digest()
	assert.Len(t, want, 24)
	tests := []struct {
		name   string
		change func(*Plan)
		same   bool
	}{
		{"hostnames in another order", func(p *Plan) { p.Hostnames = []string{"a.example.com", "b.example.com"} }, true},
		{"other inputs, same weights", func(p *Plan) { p.Drains = []weights.Drain{{ID: "m-b", Cluster: "worker-a"}}; p.Generation = 9 }, true},
		{"another service", func(p *Plan) { p.Service = "chat2" }, false},
		{"a hostname less", func(p *Plan) { p.Hostnames = p.Hostnames[:1] }, false},
		{"a withheld name", func(p *Plan) { p.Conflicts = []Conflict{{Hostname: "a.example.com"}} }, false},
		{"another weight", func(p *Plan) { p.Result.Entries[0].Effective = 1 }, false},
		{"another endpoint", func(p *Plan) { p.Result.Entries[1].Endpoint.URL = "http://c:80" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.change(p)
			if tt.same {
				assert.Equal(t, want, p.Digest())
			} else {
				assert.NotEqual(t, want, p.Digest())
			}
		})
	}
}
