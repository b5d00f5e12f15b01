package main

import (
	"fmt"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

// envoyRoutes is the Envoy flavour's route configuration for n maps of the bench's shape,
// with map drained's cluster worker-0 at weight 0.
func envoyRoutes(tb testing.TB, n, drained int) *anypb.Any {
	tb.Helper()
	services := make([]xds.Service, n)
	for i := range services {
		var res weights.Result
		for j := range clustersPerMap {
			w := int32(10)
			if i == drained && j == 0 {
				w = 0
			}
			res.Entries = append(res.Entries, weights.EffectiveEntry{Cluster: clusterName(j), Weight: 10, Effective: w,
				Endpoint: weights.Endpoint{URL: fmt.Sprintf("http://%s.example:80", clusterName(j)), Scheme: "http", Host: clusterName(j) + ".example", Port: 80}})
		}
		services[i] = xds.Service{Namespace: namespace, Name: mapName(i), Service: mapName(i), Hostnames: []string{mapName(i) + ".example.com"}, Result: res}
	}
	r, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, services)
	require.NoError(tb, err)
	require.Len(tb, r.Routes, 1)
	a, err := anypb.New(r.Routes[0])
	require.NoError(tb, err)
	return a
}

// The cost of one Envoy client taking one drain's route configuration at N = 1,000.
func BenchmarkEnvoyClientApplyRoutes(b *testing.B) {
	before, after := envoyRoutes(b, 1000, -1), envoyRoutes(b, 1000, 7)
	c := newEnvoyClient("b", true)
	_, err := c.applyRoutes(resource.RouteType, []*anypb.Any{before}, nil, false)
	require.NoError(b, err)
	b.SetBytes(int64(proto.Size(after)))
	b.ResetTimer()
	for i := range b.N {
		a := after
		if i%2 == 1 {
			a = before
		}
		changed, err := c.applyRoutes(resource.RouteType, []*anypb.Any{a}, nil, false)
		if err != nil || len(changed) != 1 {
			b.Fatalf("changed %v, err %v", changed, err)
		}
	}
}

// The client's view after each response is what decoding the whole route configuration
// gives, and only the virtual host that changed is reported.
func TestEnvoyClientApplyRoutes(t *testing.T) {
	before, after := envoyRoutes(t, 50, -1), envoyRoutes(t, 50, 7)
	c := newEnvoyClient("t", true)
	for i, step := range []struct {
		a    *anypb.Any
		want []string
	}{{before, nil}, {after, []string{"bench/svc-00007"}}, {after, nil}, {before, []string{"bench/svc-00007"}}} {
		changed, err := c.applyRoutes(resource.RouteType, []*anypb.Any{step.a}, nil, false)
		require.NoError(t, err)
		if i > 0 {
			assert.Equal(t, step.want, changed, "step %d", i)
		}
		rc := &routev3.RouteConfiguration{}
		require.NoError(t, step.a.UnmarshalTo(rc))
		want := map[string]string{}
		for _, vh := range rc.GetVirtualHosts() {
			want[vh.GetName()] = canonicalVirtualHost(vh)
		}
		assert.Equal(t, want, c.routes, "step %d", i)
		if step.a == after {
			assert.Equal(t, "worker-1=10,worker-2=10,worker-3=10,worker-4=10,worker-5=10,worker-6=10,worker-7=10", c.routes["bench/svc-00007"], "the drained map")
		}
	}
}

func TestRequestCounts(t *testing.T) {
	raw := []byte(`# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",resource="services",subresource="",verb="APPLY",version="v1"} 5
apiserver_request_total{code="409",component="apiserver",resource="services",subresource="",verb="APPLY",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",resource="httproutes",subresource="status",verb="PUT",version="v1"} 3
# TYPE other_total counter
other_total 9
`)
	got, err := requestCounts(raw)
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"APPLY services": 7, "PUT httproutes/status": 3}, got)
}

func TestPublisherWrites(t *testing.T) {
	before := map[string]float64{"APPLY services": 10, "GET httproutes": 4}
	after := map[string]float64{"APPLY services": 90, "GET httproutes": 40, "APPLY trafficmaps": 10, "APPLY trafficmaps/status": 20,
		"PUT httproutes/status": 10, "PUT leases": 3, "POST events": 9, "DELETE services": 1}
	writes, events := publisherWrites(before, after)
	assert.Equal(t, 80+10+20+1, writes, "reads, the gateway's route status and leases are not the publisher's writes")
	assert.Equal(t, 9, events)
}
