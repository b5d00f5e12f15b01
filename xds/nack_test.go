package xds_test

import (
	"context"
	"encoding/json"
	"google.golang.org/protobuf/types/known/durationpb"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

func startServer(t *testing.T) (*xds.Server, discoveryv3.AggregatedDiscoveryServiceClient) {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith serves a server with a logger and reg (nil: none) on a loopback port, and
// returns it and an ADS client connected to it; both stop with the test.
func startServerWith(t *testing.T, reg prometheus.Registerer) (*xds.Server, discoveryv3.AggregatedDiscoveryServiceClient) {
	t.Helper()
	srv := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), Registerer: reg})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(); cancel(); <-done })
	return srv, discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

func envoyResources(t *testing.T, weight int64) xds.Resources {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: weight},
		{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1},
	}})
	require.NoError(t, err)
	r, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, []xds.Service{{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Result: res}})
	require.NoError(t, err)
	return r
}

var envoyNode = &corev3.Node{Id: "envoy-1", UserAgentName: "envoy"}

// recv returns the next response, or nil when none arrives within wait.
func recv[T any](t *testing.T, ch <-chan T, wait time.Duration) *T {
	t.Helper()
	if r, ok := xdstest.Next(ch, wait); ok {
		return &r
	}
	return nil
}

// A state-of-the-world client NACKs a version: the tracker reports its error text, and the
// server sends it nothing more until the content changes, then exactly the new version.
func TestSotWNackIsReportedAndNotResent(t *testing.T) {
	srv, ads := startServer(t)
	v1s, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	v1 := v1s[resource.ClusterType]

	stream, err := ads.StreamAggregatedResources(context.Background())
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
	first := recv(t, responses, 10*time.Second)
	require.NotNil(t, first)
	assert.Equal(t, v1, (*first).GetVersionInfo())

	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		ResponseNonce: (*first).GetNonce(), ErrorDetail: &status.Status{Message: "cluster prod/chat/worker-a: unsupported"}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 1)
		assert.Equal(c, xds.Nack{Version: v1, Message: "cluster prod/chat/worker-a: unsupported"}, clients[0].Nacked[resource.ClusterType])
	}, 10*time.Second, 10*time.Millisecond)

	// No resend storm: nothing arrives while the content is unchanged (a bounded look; an
	// unguarded cache resends within milliseconds).
	assert.Nil(t, recv(t, responses, 500*time.Millisecond), "the rejected version is not sent again")

	changedCluster := envoyResources(t, 2)
	changedCluster.Clusters[0].ConnectTimeout = &durationpb.Duration{Seconds: 9} // a new message: the translator shares the default one
	v2s, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, changedCluster)
	require.NoError(t, err)
	v2 := v2s[resource.ClusterType]
	second := recv(t, responses, 10*time.Second)
	require.NotNil(t, second, "a content change is sent")
	assert.Equal(t, v2, (*second).GetVersionInfo())

	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		VersionInfo: v2, ResponseNonce: (*second).GetNonce()}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 1)
		assert.Equal(c, v2, clients[0].Acked[resource.ClusterType])
		assert.Empty(c, clients[0].Nacked, "an ACK clears the NACK")
	}, 10*time.Second, 10*time.Millisecond)
}

// A delta client NACKs: the tracker reports it, and the server does not resend.
func TestDeltaNackIsReported(t *testing.T) {
	srv, ads := startServer(t)
	v1s, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	v1 := v1s[resource.ClusterType]

	stream, err := ads.DeltaAggregatedResources(context.Background())
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
	first := recv(t, responses, 10*time.Second)
	require.NotNil(t, first)
	assert.Len(t, (*first).GetResources(), 2)

	require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		ResponseNonce: (*first).GetNonce(), ErrorDetail: &status.Status{Message: "rejected by test"}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 1)
		assert.Equal(c, xds.Nack{Version: v1, Message: "rejected by test"}, clients[0].Nacked[resource.ClusterType])
	}, 10*time.Second, 10*time.Millisecond)
	assert.Nil(t, recv(t, responses, 500*time.Millisecond), "the rejected version is not sent again")

	// Delta sends only what changed: a weight change alters the route configuration, not a
	// cluster, so this cluster stream gets nothing.
	v2s, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 2))
	require.NoError(t, err)
	assert.Equal(t, v1, v2s[resource.ClusterType], "a weight change keeps the cluster version")
	assert.Nil(t, recv(t, responses, 500*time.Millisecond), "unchanged clusters are not resent")

	// A changed cluster is sent alone.
	res := envoyResources(t, 2)
	res.Clusters[0].ConnectTimeout = &durationpb.Duration{Seconds: 9}
	_, err = srv.SetResources(context.Background(), xds.FlavourEnvoy, res)
	require.NoError(t, err)
	changed := recv(t, responses, 10*time.Second)
	require.NotNil(t, changed)
	require.Len(t, (*changed).GetResources(), 1)
	assert.Equal(t, "prod/chat/worker-a", (*changed).GetResources()[0].GetName())
}

// The debug endpoint and the metrics show the NACKing client.
func TestDebugAndMetricsShowClients(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, ads := startServerWith(t, reg)
	v1s, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	v1 := v1s[resource.ClusterType]

	stream, err := ads.StreamAggregatedResources(context.Background())
	require.NoError(t, err)
	responses := xdstest.Stream(stream.Recv)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
	first := recv(t, responses, 10*time.Second)
	require.NotNil(t, first)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType,
		ResponseNonce: (*first).GetNonce(), ErrorDetail: &status.Status{Message: "no such filter"}}))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rec := httptest.NewRecorder()
		srv.DebugHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/xds", nil))
		var state struct {
			Snapshots map[string]map[string]string
			Clients   []struct {
				NodeID, Flavour string
				Nacked          map[string]xds.Nack
			}
		}
		require.NoError(c, json.Unmarshal(rec.Body.Bytes(), &state))
		assert.Equal(c, v1, state.Snapshots["envoy"]["Cluster"])
		require.Len(c, state.Clients, 1)
		assert.Equal(c, "envoy-1", state.Clients[0].NodeID)
		assert.Equal(c, "envoy", state.Clients[0].Flavour)
		assert.Equal(c, xds.Nack{Version: v1, Message: "no such filter"}, state.Clients[0].Nacked["Cluster"])
	}, 10*time.Second, 10*time.Millisecond)

	n, err := testutil.GatherAndCount(reg, "trafficmap_publisher_xds_nacks_total")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP trafficmap_publisher_xds_clients Connected xDS clients that identified themselves, by flavour.
# TYPE trafficmap_publisher_xds_clients gauge
trafficmap_publisher_xds_clients{flavour="envoy"} 1
trafficmap_publisher_xds_clients{flavour="grpc"} 0
# HELP trafficmap_publisher_xds_nacks_total xDS responses clients NACKed, by resource type.
# TYPE trafficmap_publisher_xds_nacks_total counter
trafficmap_publisher_xds_nacks_total{type="Cluster"} 1
`), "trafficmap_publisher_xds_clients", "trafficmap_publisher_xds_nacks_total"))
}
