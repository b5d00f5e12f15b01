package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/integration/testenv"
)

// The shared control plane and clients for every test in the package.
var (
	env     *envtest.Environment
	restCfg *rest.Config
	kube    kubernetes.Interface
	gw      gwclient.Interface
	tmc     omeclient.Interface
	dyn     dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	routeKlog()
	assets, err := testenv.ControlPlaneAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	crds, err := crdPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	certDir, err := os.MkdirTemp("", "publisher-apiserver-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(certDir)

	env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
		// A fixed cert dir keeps serving certificates and client credentials valid across an
		// API server restart (TestAPIServerRestart). With watches open, kube-apiserver's
		// graceful shutdown outlasts any short wait; envtest kills it after
		// ControlPlaneStopTimeout (it passes that, not APIServer.StopTimeout, to each stop).
		ControlPlane:            envtest.ControlPlane{APIServer: &envtest.APIServer{CertDir: certDir}},
		ControlPlaneStopTimeout: 3 * time.Second,
	}
	restCfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: start control plane:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	restCfg.QPS, restCfg.Burst = 200, 400

	kube = kubernetes.NewForConfigOrDie(restCfg)
	gw = gwclient.NewForConfigOrDie(restCfg)
	dyn = dynamic.NewForConfigOrDie(restCfg)
	if tmc, err = omeclient.NewForConfig(restCfg); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	code := m.Run()
	if binPath != "" { // built by publisherBinary for the operator-command tests
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}

// crdPaths lists the CRDs the tests install: the TrafficMap CRD, the minimal stand-ins for
// third-party CRDs (OME InferenceService, Modelplane InferenceCluster, OME WorkloadCluster)
// and Gateway API's.
func crdPaths() ([]string, error) {
	standIns := filepath.Join(repoRoot(), "integration", "testdata", "crds")
	return testenv.CRDPaths(
		filepath.Join(standIns, "modelplane.ai_inferenceclusters.yaml"),
		filepath.Join(standIns, "ome.io_workloadclusters.yaml"))
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}
