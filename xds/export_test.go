package xds

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// Decoded is r with the route configuration and clusters a Translator holds encoded (its
// Envoy flavour) decoded into messages; r as it is otherwise.
func Decoded(t testing.TB, r Resources) Resources {
	t.Helper()
	if r.envoy == nil {
		return r
	}
	b, err := (&envoyRoute{shell: r.envoy.route, vhosts: r.envoy.vhosts}).encoding()
	require.NoError(t, err)
	rc := &routev3.RouteConfiguration{}
	require.NoError(t, proto.Unmarshal(b, rc))
	out := Resources{Listeners: r.Listeners, Routes: []*routev3.RouteConfiguration{rc}}
	for _, m := range r.envoy.clusters {
		c := &clusterv3.Cluster{}
		require.NoError(t, proto.Unmarshal(m.enc, c))
		out.Clusters = append(out.Clusters, c)
	}
	return out
}

// HeldVirtualHosts and HeldClusters are the encoded virtual hosts and clusters of a
// Translator's Envoy flavour, to compare by identity.
func HeldVirtualHosts(r Resources) []any { return heldAny(r.envoy.vhosts) }

// HeldClusters: see HeldVirtualHosts.
func HeldClusters(r Resources) []any { return heldAny(r.envoy.clusters) }

func heldAny(ms []*encodedMsg) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}
