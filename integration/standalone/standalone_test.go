// Package standalone runs the publisher as a standalone xDS endpoint on an API server that
// has no Gateway API CRDs at all (its own control plane, started once in TestMain).
package standalone

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/testenv"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

var restCfg *rest.Config

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	crds, err := testenv.PublisherCRDPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 1
	}
	assets, err := testenv.ControlPlaneAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		// Only TrafficMap and the stand-in InferenceService: no Gateway API.
		CRDInstallOptions: envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
	}
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "standalone: start control plane:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

// With --sinks xds the publisher needs neither Gateway API CRDs nor --gateway, and a real
// proxyless gRPC client gets the drained weights.
func TestXDSWithoutGatewayAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(restCfg)
	created, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "standalone-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ns := created.Name
	_, err = gatewayAPIServed(kube)
	require.NoError(t, err)

	isvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "chat", "namespace": ns,
			"annotations": map[string]any{"ome.io/traffic-drain": `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`}},
		"spec": map[string]any{},
	}}
	_, err = dynamic.NewForConfigOrDie(restCfg).Resource(v1beta1.InferenceServicesResource).Namespace(ns).Create(ctx, isvc, metav1.CreateOptions{})
	require.NoError(t, err)
	tmc, err := omeclient.NewForConfig(restCfg)
	require.NoError(t, err)
	_, err = tmc.OmeV1beta1().TrafficMaps(ns).Create(ctx, &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: ns},
		Spec: v1beta1.TrafficMapSpec{Service: "chat", Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1},
			{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 1},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	p, err := publish.New(publish.Config{Namespaces: []string{ns}, Sinks: []string{publish.SinkXDS}, XDSAddress: "127.0.0.1:0", RequireXDSAck: true, XDSMinClients: 1},
		restCfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { stop(); assert.NoError(t, <-done) }()

	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"standalone-client"}}`, p.XDSAddr().String())
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	require.NoError(t, err)
	conn, err := grpc.NewClient("xds:///chat."+ns, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	require.NoError(t, err)
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	for range 50 {
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		require.NoError(t, err)
		require.Equal(t, "worker-b", resp.GetHostname(), "the drained worker-a gets no RPC")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		tm, err := tmc.OmeV1beta1().TrafficMaps(ns).Get(ctx, "chat", metav1.GetOptions{})
		require.NoError(c, err)
		cond := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
		require.NotNil(c, cond)
		assert.Equal(c, metav1.ConditionTrue, cond.Status, cond.Message)
		assert.Contains(c, cond.Message, "ACKed by 1/1 clients; weights worker-a=0 (drained by maintenance-a), worker-b=1")
	}, 30*time.Second, 25*time.Millisecond)
}

// gatewayAPIServed confirms the premise: this API server serves no Gateway API.
func gatewayAPIServed(kube kubernetes.Interface) (bool, error) {
	groups, err := kube.Discovery().ServerGroups()
	if err != nil {
		return false, err
	}
	for _, g := range groups.Groups {
		if g.Name == "gateway.networking.k8s.io" {
			return true, fmt.Errorf("the api server serves gateway.networking.k8s.io; this test needs it absent")
		}
	}
	return false, nil
}
