package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// bothSinks: both sinks, loopback xDS and HTTP servers, Published waiting for xDS ACKs.
func bothSinks(c *publish.Config) {
	c.Sinks = []string{publish.SinkHTTPRoute, publish.SinkXDS}
	c.XDSAddress, c.HTTPAddress, c.RequireXDSAck = "127.0.0.1:0", "127.0.0.1:0", true
}

func adsClient(t *testing.T, r *runningPublisher) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(r.xdsAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

// scrapeText is get for a condition polled from another goroutine: "" on any error.
func scrapeText(r *runningPublisher, path string) string {
	resp, err := http.Get("http://" + r.pub.HTTPAddr().String() + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	return string(b)
}

func get(t *testing.T, r *runningPublisher, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + r.pub.HTTPAddr().String() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// A state-of-the-world Envoy client NACKs: Published is False with its error text, the
// debug endpoint and the metrics show it, and the rejected version is not sent again; a
// content change is.
func TestXDSSotWNackSetsPublishedFalse(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(bothSinks)
	f.waitPublishedWith("no xds client is connected")
	assert.Equal(t, "ok\n", get(t, pub, "/readyz"))
	// The publisher records a written condition once its write returns, which may be a
	// moment after the watch has shown it here: wait for the True's latency sample.
	var metrics string
	require.Eventually(t, func() bool {
		metrics = scrapeText(pub, "/metrics")
		const count = "trafficmap_publisher_input_to_published_seconds_count "
		return strings.Contains(metrics, count) && !strings.Contains(metrics, count+"0\n")
	}, waitTimeout, tick, "the True is recorded in the metrics")
	assert.Contains(t, metrics, `trafficmap_publisher_reconciles_total{result="ok"}`)
	assert.Contains(t, metrics, `trafficmap_publisher_published_conditions_total{reason="Published",status="True"} 1`)
	assert.Contains(t, metrics, "trafficmap_publisher_input_to_published_seconds_count 1", "one map went from Publishing to Published")
	assert.Contains(t, metrics, "trafficmap_publisher_route_writes_total 3", "two Services and the route")
	assert.Contains(t, metrics, `trafficmap_publisher_input_to_sink_confirmed_seconds_count{sink="httproute"} 1`)
	assert.Contains(t, metrics, `trafficmap_publisher_input_to_sink_confirmed_seconds_count{sink="xds"} 1`)
	assert.Contains(t, get(t, pub, "/debug/pprof/"), "404 page not found", "pprof only behind its flag")

	stream, err := adsClient(t, pub).StreamAggregatedResources(context.Background())
	require.NoError(t, err)
	in := xdstest.Stream(stream.Recv)
	node := &corev3.Node{Id: "envoy-sotw", UserAgentName: "envoy"}
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
	first, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType,
		ResponseNonce: first.GetNonce(), ErrorDetail: &rpcstatus.Status{Message: "cluster " + f.ns + "/chat/worker-a: tls context unsupported"}}))

	f.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected),
		`xds client node "envoy-sotw" rejected version `+first.GetVersionInfo()+` (Cluster): "cluster `+f.ns+`/chat/worker-a: tls context unsupported"`)
	debug := get(t, pub, "/debug/xds")
	assert.Contains(t, debug, `"nodeID": "envoy-sotw"`)
	assert.Contains(t, debug, "tls context unsupported")
	assert.Contains(t, get(t, pub, "/metrics"), `trafficmap_publisher_xds_nacks_total{type="Cluster"} 1`)

	_, again := xdstest.Next(in, 500*time.Millisecond) // a bounded look; an unguarded cache resends at once
	assert.False(t, again, "the rejected version is not sent again")

	// A drain changes route configurations only: the rejected clusters are still what is
	// served, so nothing is sent on this cluster stream and the map stays rejected.
	f.drain(seedDrain)
	require.Eventually(t, func() bool { return f.routeWeights("worker-a", "worker-b")["worker-a"] == 0 }, waitTimeout, tick)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), "rejected version "+first.GetVersionInfo())
	_, again = xdstest.Next(in, 500*time.Millisecond)
	assert.False(t, again, "unchanged clusters are not sent")

	// A new endpoint changes a cluster: the new clusters are sent.
	f.updateMap(func(spec *v1beta1.TrafficMapSpec) { spec.Entries[1].Endpoint = "https://chat-2.worker-b.example.com" })
	second, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok, "the changed content is sent")
	assert.NotEqual(t, first.GetVersionInfo(), second.GetVersionInfo())
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType,
		VersionInfo: second.GetVersionInfo(), ResponseNonce: second.GetNonce()}))
	// Clusters ACKed, but this client never asked for listeners and routes: not all in place.
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0/1 ACKed")
}

// A delta client NACKs: Published is False with its error text.
func TestXDSDeltaNackSetsPublishedFalse(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(bothSinks, func(c *publish.Config) { c.EnablePprof = true })
	f.waitPublishedWith("no xds client is connected")
	assert.Contains(t, get(t, pub, "/debug/pprof/"), "goroutine", "pprof served when enabled")

	stream, err := adsClient(t, pub).DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	in := xdstest.Stream(stream.Recv)
	node := &corev3.Node{Id: "envoy-delta", UserAgentName: "envoy"}
	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.RouteType}))
	first, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok)
	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.RouteType,
		ResponseNonce: first.GetNonce(), ErrorDetail: &rpcstatus.Status{Message: "virtual host rejected"}}))
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), `xds client node "envoy-delta" rejected version`, `(RouteConfiguration): "virtual host rejected`)
	_, again := xdstest.Next(in, 500*time.Millisecond)
	assert.False(t, again, "the rejected version is not sent again")
}
