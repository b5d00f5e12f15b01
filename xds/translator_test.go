package xds_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/trafficmap/publisher/xds"
)

// The Translator's output equals a fresh translation after every change, and it rebuilds
// only the changed service.
func TestTranslatorMatchesFreshTranslation(t *testing.T) {
	chat := service(t, "prod", "chat", nil, seedEntries()...)
	embed := service(t, "prod", "embed", nil, seedEntries()...)
	bad := service(t, "prod", "bad", nil, seedEntries()...)
	bad.Hostnames = []string{"bad\nhost"}
	tr := xds.NewTranslator(xds.DefaultEnvoyOptions)

	check := func(services []xds.Service) (xds.Resources, xds.Resources) {
		t.Helper()
		valid, invalid := tr.Partition(services)
		wantValid, wantInvalid := xds.Partition(xds.DefaultEnvoyOptions, services)
		assert.Equal(t, wantValid, valid)
		assert.Equal(t, len(wantInvalid), len(invalid))
		for _, s := range services {
			assert.Equal(t, wantInvalid[s.Key()] != nil, tr.Validate(s) != nil, "Validate(%s) agrees with Partition", s.Key())
		}
		envoy, err := tr.Envoy(valid)
		require.NoError(t, err)
		want, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, valid)
		require.NoError(t, err)
		assertSameResources(t, want, envoy)
		grpc, err := tr.GRPC(valid)
		require.NoError(t, err)
		wantGRPC, err := xds.TranslateGRPC(valid)
		require.NoError(t, err)
		assertSameResources(t, wantGRPC, grpc)
		tr.Prune()
		return envoy, grpc
	}

	_, before := check([]xds.Service{chat, embed, bad})
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	_, after := check([]xds.Service{drained, embed, bad})
	assert.Same(t, before.Clusters[len(before.Clusters)-1], after.Clusters[len(after.Clusters)-1], "embed's resources are reused")
	assert.NotSame(t, before.Routes[0], after.Routes[0], "chat's route is rebuilt") // sorted: prod/chat, prod/embed
	assert.Same(t, before.Routes[1], after.Routes[1], "embed's route is reused")
	renamed := drained
	renamed.Service = "chat-v2"
	check([]xds.Service{renamed, embed})
}

// A sealed service has the digest of its content, and a service with other content another.
func TestSealedServiceDigest(t *testing.T) {
	chat := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	assert.Equal(t, chat.Digest(), chat.Sealed().Digest())
	assert.Equal(t, drained.Digest(), drained.Sealed().Digest())
	assert.NotEqual(t, chat.Sealed().Digest(), drained.Sealed().Digest())
}

func assertSameResources(t *testing.T, want, got xds.Resources) {
	t.Helper()
	got = xds.Decoded(t, got) // the Translator holds the Envoy flavour's routes and clusters encoded
	require.Len(t, got.Listeners, len(want.Listeners))
	require.Len(t, got.Routes, len(want.Routes))
	require.Len(t, got.Clusters, len(want.Clusters))
	for i := range want.Listeners {
		assert.True(t, proto.Equal(want.Listeners[i], got.Listeners[i]), "listener %s", want.Listeners[i].GetName())
	}
	for i := range want.Routes {
		assert.True(t, proto.Equal(want.Routes[i], got.Routes[i]), "route %s", want.Routes[i].GetName())
	}
	for i := range want.Clusters {
		assert.True(t, proto.Equal(want.Clusters[i], got.Clusters[i]), "cluster %s", want.Clusters[i].GetName())
	}
}

// A Translator holding a fleet (Update, Resources) gives what a fresh translation of the
// fleet gives after every change; a drain patches the drained service's positions and
// keeps every other message as it was.
func TestTranslatorFleetMatchesFreshTranslation(t *testing.T) {
	tr := xds.NewTranslator(xds.DefaultEnvoyOptions)
	fleet := map[string]xds.Service{}
	check := func(changed []xds.Service, removed ...string) (xds.Resources, xds.Resources) {
		t.Helper()
		for _, s := range changed {
			fleet[s.Key()] = s
		}
		for _, key := range removed {
			delete(fleet, key)
		}
		tr.Update(changed, removed)
		var all, withHosts []xds.Service
		for _, s := range fleet {
			all = append(all, s)
			if len(s.Hostnames) > 0 {
				withHosts = append(withHosts, s)
			}
		}
		envoy, err := tr.Resources(xds.FlavourEnvoy)
		require.NoError(t, err)
		want, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, withHosts)
		require.NoError(t, err)
		assertSameResources(t, want, envoy)
		grpc, err := tr.Resources(xds.FlavourGRPC)
		require.NoError(t, err)
		wantGRPC, err := xds.TranslateGRPC(all)
		require.NoError(t, err)
		assertSameResources(t, wantGRPC, grpc)
		assert.ElementsMatch(t, slices.Collect(maps.Keys(fleet)), tr.Keys())
		assert.True(t, slices.IsSorted(tr.Keys()))
		return envoy, grpc
	}

	chat := service(t, "prod", "chat", nil, seedEntries()...).Sealed()
	embed := service(t, "prod", "embed", nil, seedEntries()...).Sealed()
	search := service(t, "prod", "search", nil, seedEntries()...)
	search.Hostnames = nil // gRPC only
	search = search.Sealed()
	envoy1, grpc1 := check([]xds.Service{chat, embed, search})
	assert.Nil(t, envoy1.Clusters, "the Envoy flavour's clusters are held encoded")
	assert.Nil(t, envoy1.Routes, "and its route configuration")

	chatVhost, chatRoute := xds.HeldVirtualHosts(envoy1)[0], grpc1.Routes[0]
	drainedSvc := service(t, "prod", "chat", drainA, seedEntries()...)
	envoy2, grpc2 := check([]xds.Service{drainedSvc.Sealed()})
	assert.Same(t, chatVhost, xds.HeldVirtualHosts(envoy1)[0], "the previous lists are not modified")
	assert.Same(t, chatRoute, grpc1.Routes[0], "the previous lists are not modified")
	assert.Same(t, grpc1.Clusters[0], grpc2.Clusters[0], "a drain keeps chat's clusters: the same messages")
	assert.Same(t, xds.HeldClusters(envoy1)[0], xds.HeldClusters(envoy2)[0], "a drain keeps chat's clusters: the same encodings")
	assert.Same(t, grpc1.Listeners[0], grpc2.Listeners[0], "and its listeners")
	assert.Same(t, envoy1.Listeners[0], envoy2.Listeners[0], "the Envoy listener is kept")
	assert.Same(t, xds.HeldVirtualHosts(envoy1)[1], xds.HeldVirtualHosts(envoy2)[1], "embed's virtual host is kept")
	assert.NotSame(t, xds.HeldVirtualHosts(envoy1)[0], xds.HeldVirtualHosts(envoy2)[0], "chat's virtual host is new")
	assert.Same(t, grpc1.Routes[1], grpc2.Routes[1], "embed's gRPC route is kept")
	assert.Same(t, grpc1.Clusters[len(grpc1.Clusters)-1], grpc2.Clusters[len(grpc2.Clusters)-1], "search's clusters are kept")
	assert.NotSame(t, grpc1.Routes[0], grpc2.Routes[0], "chat's gRPC route is new")

	// Names change: a new hostname, a service leaving the Envoy flavour, one removed, one added.
	renamed := drainedSvc // a sealed service is not changed: a new one is built
	renamed.Hostnames = []string{"chat.example.com", "chat.example.org"}
	check([]xds.Service{renamed.Sealed()})
	noHosts := service(t, "prod", "embed", nil, seedEntries()...)
	noHosts.Hostnames = nil
	check([]xds.Service{noHosts.Sealed()})
	check(nil, "prod/search")
	check([]xds.Service{service(t, "prod", "add", nil, seedEntries()...).Sealed()})
	check([]xds.Service{embed}) // back in the Envoy flavour
	check(nil)                  // nothing changed
	check(nil, "prod/add", "prod/chat", "prod/embed")
}

// Limited by Demand, the gRPC flavour's Resources equal a fresh translation of the
// services demanded, through adds, drops, a change of a demanded service (patched), a
// change of one not demanded (nothing to do) and a removal; the Envoy flavour keeps every
// service.
func TestTranslatorGRPCHoldsTheDemandedServices(t *testing.T) {
	svc := map[string]xds.Service{}
	for _, name := range []string{"chat", "embed", "rank"} {
		svc[name] = service(t, "prod", name, nil, seedEntries()...).Sealed()
	}
	tr := xds.NewTranslator(xds.DefaultEnvoyOptions)
	tr.Update(slices.Collect(maps.Values(svc)), nil)
	for _, step := range []struct {
		name         string
		do           func()
		demanded     []string
		envoyHolders []string
	}{
		{"none demanded", func() { tr.Demand(nil, nil) }, nil, []string{"chat", "embed", "rank"}},
		{"one added", func() { tr.Demand([]string{"prod/embed"}, nil) }, []string{"embed"}, []string{"chat", "embed", "rank"}},
		{"another added, one not held dropped", func() { tr.Demand([]string{"prod/chat"}, []string{"prod/rank"}) }, []string{"chat", "embed"}, []string{"chat", "embed", "rank"}},
		{"a demanded one drained", func() {
			svc["chat"] = service(t, "prod", "chat", drainA, seedEntries()...).Sealed()
			tr.Update([]xds.Service{svc["chat"]}, nil)
		}, []string{"chat", "embed"}, []string{"chat", "embed", "rank"}},
		{"one not demanded drained", func() {
			svc["rank"] = service(t, "prod", "rank", drainA, seedEntries()...).Sealed()
			tr.Update([]xds.Service{svc["rank"]}, nil)
		}, []string{"chat", "embed"}, []string{"chat", "embed", "rank"}},
		{"one dropped", func() { tr.Demand(nil, []string{"prod/embed"}) }, []string{"chat"}, []string{"chat", "embed", "rank"}},
		{"dropped one added again", func() { tr.Demand([]string{"prod/embed"}, nil) }, []string{"chat", "embed"}, []string{"chat", "embed", "rank"}},
		{"a demanded one removed", func() { delete(svc, "chat"); tr.Update(nil, []string{"prod/chat"}) }, []string{"embed"}, []string{"embed", "rank"}},
	} {
		step.do()
		pick := func(names []string) []xds.Service {
			var out []xds.Service
			for _, n := range names {
				out = append(out, svc[n])
			}
			return out
		}
		want, err := xds.TranslateGRPC(pick(step.demanded))
		require.NoError(t, err, step.name)
		got, err := tr.Resources(xds.FlavourGRPC)
		require.NoError(t, err, step.name)
		assertSameResources(t, want, got)
		wantEnvoy, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, withHostnames(pick(step.envoyHolders)))
		require.NoError(t, err, step.name)
		gotEnvoy, err := tr.Resources(xds.FlavourEnvoy)
		require.NoError(t, err, step.name)
		assertSameResources(t, wantEnvoy, gotEnvoy)
	}
}
