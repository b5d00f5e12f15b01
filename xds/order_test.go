package xds

import (
	"context"
	"slices"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/trafficmap/publisher/weights"
)

// set is one per-type snapshot SetResources set, with the names it served.
type set struct {
	typ   string
	names []string
}

func grpcResources(t *testing.T, clusters ...string) Resources {
	t.Helper()
	var entries []weights.Entry
	for _, c := range clusters {
		entries = append(entries, weights.Entry{Cluster: c, Endpoint: "https://chat." + c + ".example.com", Weight: 1})
	}
	res, err := weights.Compute(weights.Input{Entries: entries})
	require.NoError(t, err)
	r, err := TranslateGRPC([]Service{{Namespace: "prod", Name: "chat", Service: "chat", Result: res}})
	require.NoError(t, err)
	return r
}

// Make before break: clusters a snapshot adds are set before the routes that use them;
// clusters it removes are removed only after the routes stop using them; a snapshot that
// does both first serves the union of the old and new clusters, then the routes, then the
// new clusters alone.
func TestSetResourcesMakeBeforeBreak(t *testing.T) {
	srv := NewServer(ServerConfig{Log: zaptest.NewLogger(t)})
	var sets []set
	srv.onSet = func(_ Flavour, typ, _ string, res []types.Resource) {
		var names []string
		for _, r := range res {
			names = append(names, cachev3.GetResourceName(r))
		}
		slices.Sort(names)
		sets = append(sets, set{typ, names})
	}
	apply := func(clusters ...string) []set {
		sets = nil
		_, err := srv.SetResources(context.Background(), FlavourGRPC, grpcResources(t, clusters...))
		require.NoError(t, err)
		return sets
	}
	cds, rds := resource.ClusterType, resource.RouteType
	typesOf := func(sets []set) []string {
		var out []string
		for _, s := range sets {
			out = append(out, s.typ)
		}
		return out
	}

	first := apply("worker-a", "worker-b")
	assert.Equal(t, []string{cds, resource.ListenerType, rds}, typesOf(first), "first snapshot: clusters before the listener and route using them")

	added := apply("worker-a", "worker-b", "worker-c")
	assert.Equal(t, []set{
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-b", "prod/chat/worker-c"}},
		{rds, []string{"prod/chat"}},
	}, added, "a cluster is added before the route uses it")

	removed := apply("worker-a", "worker-c")
	assert.Equal(t, []set{
		{rds, []string{"prod/chat"}},
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-c"}},
	}, removed, "a cluster is removed after the route stops using it")

	both := apply("worker-c", "worker-d")
	assert.Equal(t, []set{
		{cds, []string{"prod/chat/worker-a", "prod/chat/worker-c", "prod/chat/worker-d"}},
		{rds, []string{"prod/chat"}},
		{cds, []string{"prod/chat/worker-c", "prod/chat/worker-d"}},
	}, both, "added and removed: the union first, the new clusters after the route")

	assert.Empty(t, apply("worker-c", "worker-d"), "the same content sets nothing")
}
