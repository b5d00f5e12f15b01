package integration

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// Issue 25 item 5: a taint source whose CRD is installed after the publisher started.

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// workloadClusterCRD is the stand-in WorkloadCluster CRD's install options.
func workloadClusterCRD() envtest.CRDInstallOptions {
	return envtest.CRDInstallOptions{Paths: []string{filepath.Join(repoRoot(), "integration", "testdata", "crds", "ome.io_workloadclusters.yaml")},
		ErrorIfPathMissing: true}
}

// servesWorkloadClusters reports whether the API server's discovery lists workloadclusters.
func servesWorkloadClusters(t *testing.T) bool {
	t.Helper()
	list, err := kube.Discovery().ServerResourcesForGroupVersion(model.WorkloadClustersResource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == model.WorkloadClustersResource.Resource })
}

// uninstallWorkloadClusters removes the WorkloadCluster CRD until the test installs it again
// (installWorkloadClusters); it is installed again after the test in any case, for the
// tests that follow (the package's tests run one at a time).
func uninstallWorkloadClusters(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		_, err := envtest.InstallCRDs(restCfg, workloadClusterCRD())
		assert.NoError(t, err, "the WorkloadCluster CRD is installed again")
	})
	require.NoError(t, envtest.UninstallCRDs(restCfg, workloadClusterCRD()))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := dyn.Resource(crdsResource).Get(context.Background(), "workloadclusters.ome.io", metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "crd gone: %v", err)
		assert.False(c, servesWorkloadClusters(t), "discovery no longer lists workloadclusters")
	}, waitTimeout, tick)
}

func installWorkloadClusters(t *testing.T) {
	t.Helper()
	_, err := envtest.InstallCRDs(restCfg, workloadClusterCRD())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return servesWorkloadClusters(t) }, waitTimeout, tick)
}

// The WorkloadCluster CRD is installed after the publisher started (xDS sink alone, so only
// the Published condition tells `taint --wait` whether the weights are in place). Without
// a restart the publisher takes the new source's taint: `taint --wait` returns only once a
// real proxyless gRPC client's RPCs have left the tainted cluster, and untaint brings them
// back the same way. The publisher's periodic discovery is off (an hour): the map's own
// live taint check finds the unwatched source.
func TestOpsTaintWaitWithTaintSourceInstalledLater(t *testing.T) {
	uninstallWorkloadClusters(t)
	f := newFixture(t)
	fl := newFleet(f)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: fl.a, Endpoint: xdstest.StartBackend(t, fl.a), Weight: 1, Healthy: true},
		{Cluster: fl.b, Endpoint: xdstest.StartBackend(t, fl.b), Weight: 1, Healthy: true},
	})
	pub := f.startPublisher(func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck, c.XDSMinClients = []string{publish.SinkXDS}, "127.0.0.1:0", true, 1
		c.TaintSourcePeriod = time.Hour
	})
	client := xdsClient(t, pub.xdsAddr, "grpc-late-crd", "chat."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	f.waitPublishedWith("ACKed by 1/1 clients; weights " + fl.a + "=1, " + fl.b + "=1")
	got := spread(t, client, 200)
	assert.Positive(t, got[fl.a], "both clusters serve before the taint: %v", got)
	assert.Positive(t, got[fl.b], "both clusters serve before the taint: %v", got)

	installWorkloadClusters(t)
	setWorkloadClusterTaints(t, fl.a, "", true)
	op := admin(t)
	res := op.run(t, "taint", fl.a, "maintenance=planned:NoExecute", "--source", "WorkloadCluster", "--yes", "--wait=1m")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "\nPublished: ")
	assert.Equal(t, map[string]int{fl.b: 100}, spread(t, client, 100), "taint --wait returned: no RPC reaches the tainted cluster")
	assert.Contains(t, published(f.getMap()).Message, fl.a+"=0 (taint maintenance=planned:NoExecute)")

	res = op.run(t, "untaint", fl.a, "maintenance:NoExecute", "--yes", "--wait=1m")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, published(f.getMap()).Message, "weights "+fl.a+"=1, "+fl.b+"=1")
	got = spread(t, client, 200)
	assert.Positive(t, got[fl.a], "the untainted cluster serves again: %v", got)
}
