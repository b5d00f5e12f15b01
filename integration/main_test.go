package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/trafficmap/publisher/api/tmclient"
)

// The shared control plane and clients for every test in the package.
var (
	env     *envtest.Environment
	restCfg *rest.Config
	kube    kubernetes.Interface
	gw      gwclient.Interface
	tmc     *tmclient.Clientset
	dyn     dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, err := controlPlaneAssets()
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
		// graceful shutdown outlasts any short wait; after StopTimeout envtest kills it.
		ControlPlane: envtest.ControlPlane{APIServer: &envtest.APIServer{CertDir: certDir, StopTimeout: 3 * time.Second}},
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
	if tmc, err = tmclient.NewForConfig(restCfg); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	code := m.Run()
	if binPath != "" { // built by publisherBinary for the operator-command tests
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}

// controlPlaneAssets returns the folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when set (make test sets it), otherwise the project's build script, which reuses its cache.
func controlPlaneAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	var out bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(repoRoot(), "hack", "controlplane.sh"))
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control plane (hack/controlplane.sh): %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}

// crdPaths lists the project's CRDs (the chart's copy, the one file users install) and
// Gateway API's standard-channel CRDs shipped in the gateway-api module.
func crdPaths() ([]string, error) {
	paths := []string{filepath.Join(repoRoot(), "charts", "publisher", "crds"),
		// Minimal stand-ins for third-party CRDs (Modelplane InferenceCluster, OME WorkloadCluster).
		filepath.Join(repoRoot(), "integration", "testdata", "crds")}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return nil, fmt.Errorf("locate the gateway-api module: %w", err)
	}
	std := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	files, err := filepath.Glob(filepath.Join(std, "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no gateway api crds in %s", std)
	}
	for _, f := range files {
		if !strings.Contains(f, "_vap_") { // a ValidatingAdmissionPolicy, not a CRD
			paths = append(paths, f)
		}
	}
	return paths, nil
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}
