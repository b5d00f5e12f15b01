package xds_test

import (
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
