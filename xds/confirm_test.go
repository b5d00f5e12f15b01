package xds_test

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"

	"github.com/trafficmap/publisher/xds"
)

func TestConfirm(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	other := service(t, "prod", "embed", nil, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{old, other})
	h.Record(xds.FlavourGRPC, all("v2"), []xds.Service{drained, other})
	h.Record(xds.FlavourGRPC, all("v3"), []xds.Service{drained}) // embed removed; chat unchanged
	want := map[xds.Flavour]string{xds.FlavourGRPC: drained.Digest()}

	acked := func(id, v string) xds.ClientState {
		return xds.ClientState{NodeID: id, Flavour: xds.FlavourGRPC, Acked: map[string]string{
			resource.ListenerType: v, resource.RouteType: v, resource.ClusterType: v}, Nacked: map[string]xds.Nack{}}
	}
	tests := []struct {
		name    string
		clients []xds.ClientState
		min     int
		done    bool
		msg     string
	}{
		{"nobody connected", nil, 0, true, "no xds client is connected"},
		{"min clients not met", nil, 1, false, "waiting for xds clients: 0 connected, --xds-min-clients is 1"},
		{"one on the old version", []xds.ClientState{acked("a", "v2"), acked("b", "v1")}, 0, false, "1/2 ACKed"},
		{"a later version with the same content counts", []xds.ClientState{acked("a", "v2"), acked("b", "v3")}, 0, true, "xds version v2,v3 ACKed by 2/2 clients"},
		{"an evicted or unknown version does not", []xds.ClientState{acked("a", "v0")}, 0, false, "0/1"},
		{"other flavours do not count", []xds.ClientState{{NodeID: "e", Flavour: xds.FlavourEnvoy}}, 0, true, "no xds client is connected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := xds.Confirm(tc.clients, h, drained.Key(), want, tc.min)
			assert.Equal(t, tc.done, got.Done, got.Message)
			assert.Contains(t, got.Message, tc.msg)
		})
	}

	nacking := acked("n", "v1")
	nacking.Nacked[resource.RouteType] = xds.Nack{Version: "v2", Message: "has no valid cluster"}
	got := xds.Confirm([]xds.ClientState{nacking}, h, drained.Key(), want, 0)
	assert.False(t, got.Done)
	assert.Equal(t, "xds client n rejected version v2 (RouteConfiguration): has no valid cluster", got.Message)
}

func all(v string) xds.Versions {
	return xds.Versions{resource.ListenerType: v, resource.RouteType: v, resource.ClusterType: v}
}

// A drain changes only route configurations: the listener and cluster versions stay, and a
// client's ACKs of them count for the drained content, while its old route version does not.
func TestConfirmCountsUnchangedTypes(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{old})
	h.Record(xds.FlavourGRPC, xds.Versions{resource.ListenerType: "v1", resource.RouteType: "r2", resource.ClusterType: "v1"}, []xds.Service{drained})
	want := map[xds.Flavour]string{xds.FlavourGRPC: drained.Digest()}
	client := func(route string) xds.ClientState {
		return xds.ClientState{NodeID: "a", Flavour: xds.FlavourGRPC, Acked: map[string]string{
			resource.ListenerType: "v1", resource.RouteType: route, resource.ClusterType: "v1"}}
	}
	assert.True(t, xds.Confirm([]xds.ClientState{client("r2")}, h, drained.Key(), want, 0).Done, "new routes, unchanged listeners and clusters")
	assert.False(t, xds.Confirm([]xds.ClientState{client("v1")}, h, drained.Key(), want, 0).Done, "old routes")
	assert.True(t, h.Carries(xds.FlavourGRPC, resource.ClusterType, "v1", old.Key(), old.Digest()), "the version still carries the old content too")
}

func TestDigestIgnoresOrderButNotWeights(t *testing.T) {
	a := service(t, "prod", "chat", nil, seedEntries()...)
	b := service(t, "prod", "chat", nil, seedEntries()[1], seedEntries()[0])
	assert.Equal(t, a.Digest(), b.Digest())
	assert.NotEqual(t, a.Digest(), service(t, "prod", "chat", drainA, seedEntries()...).Digest())
}
