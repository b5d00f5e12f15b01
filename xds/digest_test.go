package xds

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// A service's digest is the plan's: one content digest (model.ContentDigest).
func TestServiceDigestIsThePlans(t *testing.T) {
	res := weights.Result{Entries: []weights.EffectiveEntry{{Cluster: "worker-a", Effective: 3}}}
	res.Entries[0].Endpoint.URL = "https://a.example.com"
	p := &model.Plan{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"},
		Conflicts: []model.Conflict{{Hostname: "x.example.com"}}, Result: res}
	s := Service{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Withheld: []string{"x.example.com"}, Result: res}
	assert.Equal(t, p.Digest(), s.Digest())
	assert.Equal(t, p.Digest(), s.Sealed().Digest())
}
