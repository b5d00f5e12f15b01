package tty

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/integration/testenv"
)

// The shared control plane and clients for every test in the package.
var (
	env  *envtest.Environment
	kube kubernetes.Interface
	dyn  dynamic.Interface
	tmc  omeclient.Interface
	// root is the repository's root (the publisher's module).
	root string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if root, err = testenv.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "tty:", err)
		return 1
	}
	assets, err := testenv.ControlPlaneAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tty:", err)
		return 1
	}
	crds, err := testenv.PublisherCRDPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tty:", err)
		return 1
	}
	env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		// The drain commands read only TrafficMaps and InferenceServices.
		CRDInstallOptions: envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
	}
	restCfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tty: start control plane:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	kube = kubernetes.NewForConfigOrDie(restCfg)
	dyn = dynamic.NewForConfigOrDie(restCfg)
	if tmc, err = omeclient.NewForConfig(restCfg); err != nil {
		fmt.Fprintln(os.Stderr, "tty:", err)
		return 1
	}
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}
