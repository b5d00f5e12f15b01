package integration

import (
	"context"
	"encoding/json"
	"path"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/report"
	"github.com/trafficmap/publisher/xds"
)

// envoyClient runs a state-of-the-world ADS client for node that asks for clusters,
// listeners and the route configuration and ACKs every response, or NACKs the first
// response of type nackType with nackMessage. It stops with the test.
func envoyClient(t *testing.T, r *runningPublisher, node, nackType, nackMessage string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := adsClient(t, r).StreamAggregatedResources(ctx)
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	n := &corev3.Node{Id: node, UserAgentName: "envoy"}
	go func() {
		defer close(done)
		for _, req := range []*discoveryv3.DiscoveryRequest{
			{Node: n, TypeUrl: resource.ClusterType},
			{Node: n, TypeUrl: resource.ListenerType},
			{Node: n, TypeUrl: resource.RouteType, ResourceNames: []string{xds.DefaultEnvoyOptions.RouteConfigName}},
		} {
			if stream.Send(req) != nil {
				return
			}
		}
		nacked := false
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			next := &discoveryv3.DiscoveryRequest{Node: n, TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
			if resp.GetTypeUrl() == resource.RouteType {
				next.ResourceNames = []string{xds.DefaultEnvoyOptions.RouteConfigName}
			}
			if resp.GetTypeUrl() == nackType && !nacked {
				nacked = true
				next.VersionInfo, next.ErrorDetail = "", &rpcstatus.Status{Message: nackMessage}
			}
			if stream.Send(next) != nil {
				return
			}
		}
	}()
}

// status --publisher-url reads the publisher's /debug/xds: every connected client with its
// flavour, ACKed versions and NACKs, and whether it ACKed the versions served now, as the
// publisher itself reports them; without the flag the xDS state is not available.
func TestOpsStatusShowsXDSClients(t *testing.T) {
	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(bothSinks)
	f.waitPublishedWith("no xds client is connected")
	op := admin(t)
	url := "http://" + pub.pub.HTTPAddr().String()

	envoyClient(t, pub, "envoy-acks", "", "")
	// A True message keeps the counts of its publication; the live ones are in /debug/xds.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := debugXDS(t, pub)
		require.Len(c, d.Maps, 1)
		assert.Len(c, d.Maps[0].Acked, 1)
	}, waitTimeout, tick)
	f.waitPublished()
	st := statusWith(t, op, f.ns, "--publisher-url", url)
	x := st.Sinks.XDS
	assert.True(t, x.Reported)
	assert.Equal(t, url+"/debug/xds", x.Source)
	require.Len(t, x.Clients, 1)
	c := x.Clients[0]
	assert.Equal(t, "envoy-acks", c.NodeID)
	assert.Equal(t, xds.FlavourEnvoy, c.Flavour)
	assert.Equal(t, byLabel(pub.pub.XDSClients()[0].Acked), c.Acked, "the publisher's own record of the client's ACKs")
	assert.Equal(t, x.Served[xds.FlavourEnvoy], c.Acked)
	assert.Len(t, c.Acked, 3)
	assert.True(t, c.Current)
	assert.Empty(t, c.Nacked)

	envoyClient(t, pub, "envoy-nacks", resource.ClusterType, "cluster rejected by test")
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonXDSRejected), `xds client node "envoy-nacks" rejected version`)
	st = statusWith(t, op, f.ns, "--publisher-url", url)
	assert.Equal(t, "XDSRejected", st.Published.Reason)
	assert.NotNil(t, st.Published.LastTransitionTime)
	require.Len(t, st.Sinks.XDS.Clients, 2)
	bad := st.Sinks.XDS.Clients[1]
	assert.Equal(t, "envoy-nacks", bad.NodeID)
	served := st.Sinks.XDS.Served[xds.FlavourEnvoy]
	assert.Equal(t, map[string]report.XDSNack{"Cluster": {Version: served["Cluster"], Message: "cluster rejected by test"}}, bad.Nacked)
	assert.False(t, bad.Current)
	assert.True(t, st.Sinks.XDS.Clients[0].Current)

	table := op.run(t, "status", "chat", "-n", f.ns, "--publisher-url", url)
	require.Equal(t, 0, table.code, table.stderr)
	for _, want := range []string{
		"1/2 connected clients ACKed the versions served; this map: 1/2 relevant clients ACKed its content, waiting for envoy-nacks/sotw-",
		"XDS CLIENT    FLAVOUR   STATE     ACKED",
		"envoy-acks    envoy     Current   Cluster=" + served["Cluster"],
		"envoy-nacks   envoy     Behind",
		`Cluster=` + served["Cluster"] + ` "cluster rejected by test"`,
	} {
		assert.Contains(t, table.stdout, want)
	}

	// A publisher without the xDS sink serves no /debug/xds.
	pub.stop(t)
	routeOnly := f.startPublisher(func(c *publish.Config) { c.HTTPAddress = "127.0.0.1:0" })
	got := op.run(t, "status", "chat", "-n", f.ns, "--publisher-url", "http://"+routeOnly.pub.HTTPAddr().String())
	assert.Equal(t, 1, got.code)
	assert.Contains(t, got.stderr, "404 Not Found: the publisher serves /debug/xds only with its xds sink on, at its --debug-address when set, else its --http-address\n")
}

func statusWith(t *testing.T, u opsUser, ns string, args ...string) report.Status {
	t.Helper()
	got := u.run(t, append([]string{"status", "chat", "-n", ns, "-o", "json"}, args...)...)
	require.Equal(t, 0, got.code, got.stderr)
	var st report.Status
	require.NoError(t, json.Unmarshal([]byte(got.stdout), &st))
	return st
}

// byLabel keys versions by resource type name, as /debug/xds does.
func byLabel(versions map[string]string) map[string]string {
	out := map[string]string{}
	for typeURL, v := range versions {
		out[path.Ext(typeURL)[1:]] = v
	}
	return out
}
