package xds_test

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/xds"
)

// A version a client declares is judged older content only once the current content is
// served: right after a restart (nothing served yet) the declared version, content-derived,
// may be the current content itself and holds nothing; once the current content is out, a
// version that does not carry it is older content.
func TestHoldsOldOnlyOnceCurrentContentIsServed(t *testing.T) {
	chat := service(t, "prod", "chat", drainA, seedEntries()...)
	served := map[xds.Flavour]xds.Served{xds.FlavourGRPC: xds.ServedBy(xds.DefaultEnvoyOptions, chat)[xds.FlavourGRPC]}
	declared := client("a", "sotw-1", "v-before-restart", wildcard)

	h := xds.NewHistory(8)
	assert.False(t, h.ServesCurrent(xds.FlavourGRPC, resource.ListenerType, chat.Key(), chat.Digest()))
	assert.False(t, xds.HoldsOld(declared, h, chat.Key(), served), "nothing served yet: not judged as older content")

	h.Record(xds.FlavourGRPC, all("v-now"), []xds.Service{chat}, nil)
	assert.True(t, h.ServesCurrent(xds.FlavourGRPC, resource.ListenerType, chat.Key(), chat.Digest()))
	assert.True(t, xds.HoldsOld(declared, h, chat.Key(), served), "the current content is out: the other version is older content")
	assert.False(t, xds.HoldsOld(client("b", "sotw-2", "v-now", wildcard), h, chat.Key(), served), "the current version holds nothing older")
}
