package publish

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// The byService and byRouteName indexes hold only the maps that cannot be found by key;
// mapsIndexed finds every map exactly once either way, in its namespace or in all.
func TestMapsIndexedFindsKeyedAndIndexedMaps(t *testing.T) {
	long := "m-" + strings.Repeat("x", 60) // RouteName bounds it
	maps := []*v1beta1.TrafficMap{
		{Spec: v1beta1.TrafficMapSpec{Service: "chat"}},       // keyed for both
		{Spec: v1beta1.TrafficMapSpec{Service: "embed-isvc"}}, // another service: indexed
		{Spec: v1beta1.TrafficMapSpec{Service: long}},         // a bounded route name: indexed
		{Spec: v1beta1.TrafficMapSpec{Service: "a.b"}},        // a sanitized route name: indexed
	}
	for i, name := range []string{"chat", "embed", long, "a.b"} {
		maps[i].Name, maps[i].Namespace = name, "prod"
	}
	cs := benchCaches()
	store := cs.maps[0].GetIndexer()
	for _, tm := range maps {
		require.NoError(t, store.Add(tm))
	}
	services, err := store.IndexKeys(indexByService, "prod/embed-isvc")
	require.NoError(t, err)
	assert.Equal(t, []string{"prod/embed"}, services)
	assert.Equal(t, []string{"prod/embed-isvc"}, store.ListIndexFuncValues(indexByService), "only the exception is indexed")
	assert.ElementsMatch(t, []string{model.Key("prod", httproute.RouteName(long)).String(), model.Key("prod", httproute.RouteName("a.b")).String()},
		store.ListIndexFuncValues(indexByRouteName))

	for _, ns := range []string{"prod", ""} {
		for _, tm := range maps {
			byService := cs.mapsIndexed(indexByService, ns, "prod/"+tm.Spec.Service)
			assert.Equal(t, []*v1beta1.TrafficMap{tm}, byService, "service %s in %q", tm.Spec.Service, ns)
			byRoute := cs.mapsIndexed(indexByRouteName, ns, "prod/"+httproute.RouteName(tm.Name))
			assert.Equal(t, []*v1beta1.TrafficMap{tm}, byRoute, "route of %s in %q", tm.Name, ns)
		}
	}
	assert.Empty(t, cs.mapsIndexed(indexByService, "prod", "prod/embed"), "embed names another service")
	assert.Empty(t, cs.mapsIndexed(indexByRouteName, "prod", "prod/"+long+"-global"), "not the bounded route name")
	assert.Empty(t, cs.mapsIndexed(indexByRouteName, "prod", "prod/chat"))
	assert.Empty(t, cs.mapsIndexed(indexByService, "other", "other/chat"))
}
