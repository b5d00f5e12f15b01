package xds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/xds"
)

// The metrics account for what the server holds, so memory can be sized from them: the
// resources served per flavour and type, the bytes of the encodings kept (made when a
// client is first sent a resource), and the open streams per flavour and protocol.
func TestMetricsAccountForServedResources(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, ads := startServerWith(t, reg)
	_, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)

	gauges := func() string {
		var b strings.Builder
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			switch mf.GetName() {
			case "trafficmap_publisher_xds_resources", "trafficmap_publisher_xds_encoded_bytes", "trafficmap_publisher_xds_streams":
				for _, m := range mf.GetMetric() {
					var labels []string
					for _, l := range m.GetLabel() {
						labels = append(labels, l.GetValue())
					}
					fmt.Fprintf(&b, "%s%v=%g\n", strings.TrimPrefix(mf.GetName(), "trafficmap_publisher_xds_"), labels, m.GetGauge().GetValue())
				}
			}
		}
		return b.String()
	}
	before := gauges()
	assert.Contains(t, before, "resources[envoy Cluster]=2\n")
	assert.Contains(t, before, "resources[envoy Listener]=1\n")
	assert.Contains(t, before, "resources[grpc Cluster]=0\n", "no gRPC resources set")
	assert.Contains(t, before, "encoded_bytes[envoy Cluster]=0\n", "nothing encoded before a client asks")
	assert.Contains(t, before, "streams[envoy sotw]=0\n")

	stream, err := ads.StreamAggregatedResources(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	sent := 0
	for _, r := range resp.GetResources() {
		sent += len(r.GetValue())
	}
	require.Positive(t, sent)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		after := gauges()
		assert.Contains(c, after, fmt.Sprintf("encoded_bytes[envoy Cluster]=%d\n", sent), "the encodings sent, kept once")
		assert.Contains(c, after, "encoded_bytes[envoy Listener]=0\n")
		assert.Contains(c, after, "streams[envoy sotw]=1\n")
		assert.Contains(c, after, "streams[envoy delta]=0\n")
	}, 10*time.Second, 10*time.Millisecond)
	n, err := testutil.GatherAndCount(reg, "trafficmap_publisher_xds_streams")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "both flavours, both protocols")
}
