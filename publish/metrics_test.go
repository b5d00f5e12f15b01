package publish

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// trafficmap_publisher_maps counts the TrafficMaps in every scope's cache, as they come and go.
func TestMapsGaugeCountsCachedMaps(t *testing.T) {
	scopes := []cache.SharedIndexInformer{
		cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1beta1.TrafficMap{}, 0, cache.Indexers{}),
		cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1beta1.TrafficMap{}, 0, cache.Indexers{}),
	}
	reg := prometheus.NewRegistry()
	watchGauges(reg, func() bool { return true }, func() int { return mapCount(scopes) }, func() (int, time.Duration) { return 0, 0 }, func() int { return 0 },
		func() map[model.FallbackReason]int { return nil })
	check := func(n string) {
		t.Helper()
		assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP trafficmap_publisher_maps TrafficMaps in this replica's cache (the namespaces it watches): with the xDS server's resources, encoded bytes and streams, what its memory grows with.
# TYPE trafficmap_publisher_maps gauge
trafficmap_publisher_maps `+n+"\n"), "trafficmap_publisher_maps"))
	}
	check("0")
	named := func(ns, name string) *v1beta1.TrafficMap {
		m := fleetMap()
		m.Namespace, m.Name = ns, name
		return m
	}
	require.NoError(t, scopes[0].GetStore().Add(named("a", "chat")))
	require.NoError(t, scopes[0].GetStore().Add(named("a", "embed")))
	require.NoError(t, scopes[1].GetStore().Add(named("b", "chat")))
	check("3")
	require.NoError(t, scopes[0].GetStore().Delete(named("a", "chat")))
	check("2")
}
