package xds_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/model/untrusted"
	"github.com/trafficmap/publisher/xds"
)

// wildcard subscribes to every listener, route configuration and cluster.
var wildcard = map[string]xds.Subscription{
	resource.ListenerType: {Wildcard: true}, resource.RouteType: {Wildcard: true}, resource.ClusterType: {Wildcard: true}}

// names subscribes by name, as a proxyless gRPC client does.
func names(typeNames map[string][]string) map[string]xds.Subscription {
	out := map[string]xds.Subscription{}
	for typ, ns := range typeNames {
		set := map[string]struct{}{}
		for _, n := range ns {
			set[n] = struct{}{}
		}
		out[typ] = xds.Subscription{Names: set}
	}
	return out
}

// client is a gRPC-flavour ADS stream that ACKed version v of every type.
func client(id, stream, v string, subs map[string]xds.Subscription) xds.ClientState {
	return xds.ClientState{NodeID: id, Stream: stream, Flavour: xds.FlavourGRPC, Acked: map[string]string{
		resource.ListenerType: v, resource.RouteType: v, resource.ClusterType: v}, Nacked: map[string]xds.Nack{}, Subscribed: subs}
}

func TestConfirm(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	other := service(t, "prod", "embed", nil, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{old, other}, nil)
	h.Record(xds.FlavourGRPC, all("v2"), []xds.Service{drained, other}, nil)
	h.Record(xds.FlavourGRPC, all("v3"), nil, []string{other.Key()}) // embed removed; chat unchanged
	want := map[xds.Flavour]xds.Served{xds.FlavourGRPC: xds.ServedBy(xds.DefaultEnvoyOptions, drained)[xds.FlavourGRPC]}

	acked := func(id, v string) xds.ClientState { return client(id, "sotw-1", v, wildcard) }
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
		{"other flavours do not count", []xds.ClientState{{NodeID: "e", Flavour: xds.FlavourEnvoy, Subscribed: wildcard}}, 0, true, "no xds client is connected"},
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
	assert.Equal(t, `xds client node "n" rejected version v2 (RouteConfiguration): "has no valid cluster"`, got.Message)

	// D11: what the client chose (its node id, its NACK text) reaches the map's condition
	// (and so its Event and logs) escaped and shortened; a client with a certificate
	// identity is named by it, its node id second.
	hostile := client(strings.Repeat("evil\n\"Published: True\"\n", 2048), "sotw-2", "v1", wildcard)
	hostile.Nacked[resource.RouteType] = xds.Nack{Version: "v2", Message: "bad\nStatus: True\n" + strings.Repeat("x", 900)}
	got = xds.Confirm([]xds.ClientState{hostile}, h, drained.Key(), want, 0)
	assert.NotContains(t, got.Message, "\n", "no raw newline")
	assert.NotContains(t, got.Message, `"Published: True"`, "no raw quote")
	assert.True(t, strings.HasPrefix(got.Message, `xds client node "evil\n\"Published: True\"\nevil`), got.Message)
	assert.Contains(t, got.Message, `: "bad\nStatus: True\nxxx`)
	assert.LessOrEqual(t, len(got.Message), len(`xds client node  rejected version v2 (RouteConfiguration): `)+untrusted.MaxID+untrusted.MaxMessage)

	hostile.Access = xds.Access{Identity: "spiffe://cluster.local/ns/team-a/sa/gateway"}
	got = xds.Confirm([]xds.ClientState{hostile}, h, drained.Key(), want, 0)
	assert.True(t, strings.HasPrefix(got.Message, `xds client "spiffe://cluster.local/ns/team-a/sa/gateway" (node "evil\n`), got.Message)
	assert.NotContains(t, got.Message, "\n")
}

// A map's confirmation counts exactly the streams whose subscriptions include its
// resources, and every stream on its own, whatever node id it shares.
func TestConfirmRelevanceAndIdentity(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{old}, nil)
	h.Record(xds.FlavourGRPC, all("v2"), []xds.Service{drained}, nil)
	h.Record(xds.FlavourEnvoy, all("e2"), []xds.Service{drained}, nil)
	want := xds.ServedBy(xds.DefaultEnvoyOptions, drained)

	dialed := names(map[string][]string{ // a gRPC client that dialed chat.prod and followed it
		resource.ListenerType: {"chat.prod"},
		resource.RouteType:    {"prod/chat"},
		resource.ClusterType:  {"prod/chat/worker-a", "prod/chat/worker-b"},
	})
	listenerOnly := names(map[string][]string{resource.ListenerType: {"chat.example.com"}})
	missing := names(map[string][]string{resource.ListenerType: {"chta.prod"}})
	otherMap := names(map[string][]string{
		resource.ListenerType: {"embed.prod"}, resource.RouteType: {"prod/embed"}, resource.ClusterType: {"prod/embed/worker-a"}})
	envoy := func(v string) xds.ClientState {
		return xds.ClientState{NodeID: "envoy", Stream: "delta-1", Flavour: xds.FlavourEnvoy, Acked: map[string]string{
			resource.ListenerType: v, resource.RouteType: v, resource.ClusterType: v},
			Subscribed: map[string]xds.Subscription{resource.ListenerType: {Wildcard: true}, resource.ClusterType: {Wildcard: true},
				resource.RouteType: names(map[string][]string{resource.RouteType: {"trafficmap-routes"}})[resource.RouteType]}}
	}
	perType := func(typ, v string) xds.ClientState {
		c := client("per-type", "sotw-"+typ, "", names(map[string][]string{typ: want[xds.FlavourGRPC].Names[typ]}))
		c.TypeURL = typ
		c.Acked = map[string]string{typ: v}
		return c
	}

	tests := []struct {
		name           string
		clients        []xds.ClientState
		done           bool
		acked, total   int
		msg            string
		relevant, acks []string
	}{
		{"a client dialing a missing target neither blocks nor counts",
			[]xds.ClientState{client("typo", "sotw-1", "", missing)}, true, 0, 0,
			"none of the 1 connected xds clients subscribes to its resources", []string{}, []string{}},
		{"nor does one subscribed to another map only",
			[]xds.ClientState{client("a", "sotw-1", "v2", dialed), client("b", "sotw-2", "v1", otherMap)}, true, 1, 1,
			"xds version v2 ACKed by 1/1 clients", []string{"a/sotw-1"}, []string{"a/sotw-1"}},
		{"a client that dialed the map must ACK its routes and clusters too",
			[]xds.ClientState{client("a", "sotw-1", "v1", listenerOnly)}, false, 0, 1,
			"0/1 ACKed", []string{"a/sotw-1"}, []string{}},
		{"two streams sharing a node id are two clients",
			[]xds.ClientState{client("shared", "sotw-1", "v2", dialed), client("shared", "sotw-2", "v1", dialed)}, false, 1, 2,
			"1/2 ACKed", []string{"shared/sotw-1", "shared/sotw-2"}, []string{"shared/sotw-1"}},
		{"and count as two once both ACKed",
			[]xds.ClientState{client("shared", "sotw-1", "v2", dialed), client("shared", "delta-1", "v2", dialed)}, true, 2, 2,
			"xds version v2 ACKed by 2/2 clients", []string{"shared/delta-1", "shared/sotw-1"}, []string{"shared/delta-1", "shared/sotw-1"}},
		{"an Envoy is relevant through the shared route configuration",
			[]xds.ClientState{envoy("e1")}, false, 0, 1, "0/1 ACKed", []string{"envoy/delta-1"}, []string{}},
		{"and confirms it once it ACKed",
			[]xds.ClientState{envoy("e2")}, true, 1, 1, "ACKed by 1/1", []string{"envoy/delta-1"}, []string{"envoy/delta-1"}},
		{"a per-type listener stream confirms listeners alone",
			[]xds.ClientState{perType(resource.ListenerType, "v2")}, true, 1, 1,
			"xds content ACKed by 1/1 clients", []string{"per-type/sotw-" + resource.ListenerType}, []string{"per-type/sotw-" + resource.ListenerType}},
		{"a per-type stream confirms its own type",
			[]xds.ClientState{perType(resource.ListenerType, "v2"), perType(resource.RouteType, "v1")}, false, 1, 2,
			"1/2 ACKed", []string{"per-type/sotw-" + resource.ListenerType, "per-type/sotw-" + resource.RouteType}, []string{"per-type/sotw-" + resource.ListenerType}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := xds.Confirm(tc.clients, h, drained.Key(), want, 1)
			assert.Equal(t, tc.done, got.Done, got.Message)
			assert.Equal(t, tc.acked, got.Acked)
			assert.Equal(t, tc.total, got.Total)
			assert.Equal(t, len(tc.clients), got.Connected)
			assert.Contains(t, got.Message, tc.msg)
			m := xds.DebugMapOf(tc.clients, h, drained.Key(), want)
			assert.Equal(t, xds.DebugMap{Key: "prod/chat", Relevant: tc.relevant, Acked: tc.acks}, m)
		})
	}

	// A NACK counts only from a relevant client.
	stray := client("stray", "sotw-1", "v1", otherMap)
	stray.Nacked[resource.RouteType] = xds.Nack{Version: "v2", Message: "bad"}
	got := xds.Confirm([]xds.ClientState{stray}, h, drained.Key(), want, 0)
	assert.Nil(t, got.Nack)
	assert.True(t, got.Done)
}

func TestServedBy(t *testing.T) {
	s := service(t, "prod", "chat", nil, seedEntries()...)
	got := xds.ServedBy(xds.DefaultEnvoyOptions, s)
	clusters := []string{"prod/chat/worker-a", "prod/chat/worker-b"}
	assert.Equal(t, map[xds.Flavour]xds.Served{
		xds.FlavourGRPC: {Digest: s.Digest(), Names: map[string][]string{
			resource.ListenerType: {"chat.example.com", "chat.prod"}, resource.RouteType: {"prod/chat"}, resource.ClusterType: clusters}},
		xds.FlavourEnvoy: {Digest: s.Digest(), Names: map[string][]string{
			resource.ListenerType: {"trafficmap-http"}, resource.RouteType: {"trafficmap-routes"}, resource.ClusterType: clusters}},
	}, got)

	s.Hostnames = nil
	got = xds.ServedBy(xds.DefaultEnvoyOptions, s)
	require.NotContains(t, got, xds.FlavourEnvoy, "Envoy gets only services with hostnames")
	assert.Equal(t, []string{"chat.prod"}, got[xds.FlavourGRPC].Names[resource.ListenerType])
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
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{old}, nil)
	h.Record(xds.FlavourGRPC, xds.Versions{resource.ListenerType: "v1", resource.RouteType: "r2", resource.ClusterType: "v1"}, []xds.Service{drained}, nil)
	want := xds.ServedBy(xds.DefaultEnvoyOptions, drained)
	client := func(route string) xds.ClientState {
		return xds.ClientState{NodeID: "a", Flavour: xds.FlavourGRPC, Subscribed: wildcard, Acked: map[string]string{
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
	renamed := a
	renamed.Service = "chat-v2" // its gRPC listener is "chat-v2.prod" now
	assert.NotEqual(t, a.Digest(), renamed.Digest(), "spec.service is served content")
	assert.NotEqual(t, a.Sealed().Digest(), renamed.Sealed().Digest())
}

// The history answers for the time each version was served: a version carries the digests
// a service had while it was served, whether the service changed in that type or another,
// and a version served again after a change carries what it carried then.
func TestHistoryTimelines(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	other := service(t, "prod", "embed", nil, seedEntries()...)
	h := xds.NewHistory(8)
	versions := func(route string) xds.Versions {
		return xds.Versions{resource.ListenerType: "l1", resource.RouteType: route, resource.ClusterType: "c1"}
	}
	carries := func(typ, version string, s xds.Service) bool {
		return h.Carries(xds.FlavourGRPC, typ, version, s.Key(), s.Digest())
	}
	h.Record(xds.FlavourGRPC, versions("r1"), []xds.Service{old, other}, nil)
	h.Record(xds.FlavourGRPC, versions("r2"), []xds.Service{drained}, nil) // a drain: routes only
	assert.True(t, carries(resource.RouteType, "r2", drained))
	assert.False(t, carries(resource.RouteType, "r2", old), "the new version never carried the old content")
	assert.False(t, carries(resource.RouteType, "r1", drained), "the old version never carried the new content")
	assert.True(t, carries(resource.RouteType, "r1", old))
	assert.True(t, carries(resource.ListenerType, "l1", drained), "unchanged listeners carry the new content")
	assert.True(t, carries(resource.ListenerType, "l1", old))
	assert.True(t, carries(resource.RouteType, "r2", other), "a service not named keeps its digest")

	h.Record(xds.FlavourGRPC, versions("r1"), []xds.Service{old}, nil) // undrained: r1 again
	assert.True(t, carries(resource.RouteType, "r1", old))
	assert.False(t, carries(resource.RouteType, "r2", old))
	assert.True(t, carries(resource.RouteType, "r1", other))

	h.Record(xds.FlavourGRPC, versions("r3"), nil, []string{other.Key()})
	assert.False(t, carries(resource.RouteType, "r3", other), "a removed service is carried by no version")
	assert.False(t, h.Carries(xds.FlavourEnvoy, resource.RouteType, "r1", old.Key(), old.Digest()), "nothing recorded for Envoy")

	for i := range 8 { // older versions are forgotten
		h.Record(xds.FlavourGRPC, versions(fmt.Sprintf("s%d", i)), nil, nil)
	}
	assert.False(t, carries(resource.RouteType, "r1", old))
	assert.True(t, carries(resource.RouteType, "s7", old))
}

// CarriesSince answers for a client that holds a resource as in one version or any later
// one: every one of them, and every version forgotten in between, must carry the content.
func TestHistoryCarriesSince(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	other := service(t, "prod", "embed", nil, seedEntries()...)
	h := xds.NewHistory(2)
	versions := func(route string) xds.Versions {
		return xds.Versions{resource.ListenerType: "l1", resource.RouteType: route, resource.ClusterType: "c1"}
	}
	since := func(typ, version string, s xds.Service) bool {
		return h.CarriesSince(xds.FlavourGRPC, typ, version, s.Key(), s.Digest())
	}
	h.Record(xds.FlavourGRPC, versions("r1"), []xds.Service{old, other}, nil)
	h.Record(xds.FlavourGRPC, versions("r2"), []xds.Service{drained}, nil)
	assert.True(t, since(resource.RouteType, "r2", drained))
	assert.False(t, since(resource.RouteType, "r1", drained), "r1 carried the content before the drain")
	assert.False(t, since(resource.RouteType, "r1", old), "r2 does not carry it")
	assert.True(t, since(resource.RouteType, "r1", other), "unchanged in r1 and r2")
	assert.True(t, since(resource.ClusterType, "c1", drained), "c1 is served on, unchanged by the drain")
	assert.False(t, since(resource.RouteType, "r0", other), "unknown version")

	h.Record(xds.FlavourGRPC, versions("r3"), []xds.Service{old}, nil)
	h.Record(xds.FlavourGRPC, versions("r4"), nil, nil)
	assert.False(t, since(resource.RouteType, "r1", other), "r1 is forgotten (nobody holds it)")
	assert.True(t, since(resource.RouteType, "r3", other))
	assert.True(t, since(resource.RouteType, "r3", old))
}

// A withdrawn map's removal is confirmed by each client that held its resources once it
// ACKed, for every type of them it still subscribes to, a version served after the
// removal; a client that dropped them, or never held them, neither blocks nor counts.
func TestConfirmRemoval(t *testing.T) {
	chat := service(t, "prod", "chat", nil, seedEntries()...)
	other := service(t, "prod", "embed", nil, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{chat, other}, nil)
	held := xds.ServedBy(xds.DefaultEnvoyOptions, chat)
	assert.False(t, h.RemovedBy(xds.FlavourGRPC, resource.ListenerType, "v1", chat.Key()), "no removal recorded yet")
	h.Record(xds.FlavourGRPC, all("v2"), nil, []string{chat.Key()})
	assert.True(t, h.RemovedBy(xds.FlavourGRPC, resource.ListenerType, "v2", chat.Key()))
	assert.False(t, h.RemovedBy(xds.FlavourGRPC, resource.ListenerType, "v1", chat.Key()), "v1 carried it")

	byName := names(held[xds.FlavourGRPC].Names)
	otherOnly := names(xds.ServedBy(xds.DefaultEnvoyOptions, other)[xds.FlavourGRPC].Names)
	tests := []struct {
		name         string
		clients      []xds.ClientState
		acked, total int
	}{
		{"nobody", nil, 0, 0},
		{"held it, not ACKed the removal", []xds.ClientState{client("a", "sotw-1", "v1", byName)}, 0, 1},
		{"ACKed the removal", []xds.ClientState{client("a", "sotw-1", "v2", byName), client("b", "sotw-2", "v1", byName)}, 1, 2},
		{"a wildcard client counts too", []xds.ClientState{client("w", "sotw-3", "v2", wildcard)}, 1, 1},
		{"another map's client neither blocks nor counts", []xds.ClientState{client("o", "sotw-4", "v1", otherOnly)}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acked, total := xds.ConfirmRemoval(tc.clients, h, chat.Key(), held)
			assert.Equal(t, tc.acked, acked)
			assert.Equal(t, tc.total, total)
		})
	}

	h.Record(xds.FlavourGRPC, all("v3"), []xds.Service{chat}, nil)
	assert.False(t, h.RemovedBy(xds.FlavourGRPC, resource.ListenerType, "v3", chat.Key()), "served again: no removal")
	h.Record(xds.FlavourGRPC, all("v4"), nil, []string{chat.Key()})
	h.ForgetRemoval(chat.Key())
	assert.False(t, h.RemovedBy(xds.FlavourGRPC, resource.ListenerType, "v4", chat.Key()), "forgotten")
}
