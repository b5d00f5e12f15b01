//go:build e2e

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// egBackendsResource is Envoy Gateway's Backend API.
var egBackendsResource = schema.GroupVersionResource{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Resource: "backends"}

// egFixedPorts are the ports Envoy Gateway v1.9.1 listens on that its configuration cannot
// move: the xDS server (18000, on every address) and the controller manager's health probe
// (8081). Only one Envoy Gateway runs at a time; a test fails when another process holds one.
var egFixedPorts = []int{18000, 8081}

// egCRDsOnce installs Envoy Gateway's own CRDs (gateway.envoyproxy.io, from its module's
// charts/gateway-crds-helm; Gateway API's CRDs are TestMain's) once per test binary.
var egCRDsOnce = sync.OnceValue(installEnvoyGatewayCRDs)

func installEnvoyGatewayCRDs() error {
	dir, err := egModuleDir()
	if err != nil {
		return err
	}
	generated := filepath.Join(dir, "charts", "gateway-crds-helm", "templates", "generated")
	files, err := filepath.Glob(filepath.Join(generated, "gateway.envoyproxy.io_*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no envoy gateway crds in %s", generated)
	}
	out, err := os.MkdirTemp("", "e2e-eg-crds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		// The chart wraps each CRD in {{- if ...}} ... {{- end }}: drop the template lines.
		var keep []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "{{") {
				keep = append(keep, line)
			}
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(f)), []byte(strings.Join(keep, "\n")), 0o600); err != nil {
			return err
		}
	}
	_, err = envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{Paths: []string{out}, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("install envoy gateway crds: %w", err)
	}
	return nil
}

// egModuleDir returns the Envoy Gateway module's directory in the module cache (hack/gateways.sh
// downloaded it to build the binary).
func egModuleDir() (string, error) {
	tmp, err := os.MkdirTemp("", "e2e-eg-mod-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/gateway@"+envoyGatewayVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/envoyproxy/gateway@%s: %w", envoyGatewayVersion, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"Dir": "`); ok {
			return strings.TrimSuffix(v, `",`), nil
		}
	}
	return "", fmt.Errorf("go mod download github.com/envoyproxy/gateway@%s gave no directory", envoyGatewayVersion)
}

// egConfig is the EnvoyGateway configuration the controller runs with: the Kubernetes
// provider watching only ns, no leader election, no topology injector webhook, the Backend
// API on, the admin server on a free port and no Prometheus endpoint.
const egConfig = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: %s
provider:
  type: Kubernetes
  kubernetes:
    watch:
      type: Namespaces
      namespaces: [%s]
    leaderElection:
      disable: true
    proxyTopologyInjector:
      disabled: true
admin:
  address:
    host: 127.0.0.1
    port: %d
telemetry:
  metrics:
    prometheus:
      disable: true
extensionApis:
  enableBackend: true
logging:
  level:
    default: info
`

// startEnvoyGateway runs the Envoy Gateway controller (no Envoy: it computes and writes
// route status) watching namespaces nss, the first its controller namespace too. Its xDS server reads its
// certificate from /certs, a path its Kubernetes provider fixes: the test makes certificates
// with `envoy-gateway certgen --local` and runs the controller in a private mount namespace
// (unshare) where a bind mount shows them at /certs; an empty /certs directory is created on
// the host for the mount point when absent, and removed afterwards.
func startEnvoyGateway(t *testing.T, nss ...string) *process {
	t.Helper()
	requireRoot(t)
	bin := gatewayBinary(t, "envoy-gateway")
	require.NoError(t, egCRDsOnce())
	for _, port := range egFixedPorts {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		require.NoError(t, err, "envoy gateway %s listens on port %d, which its configuration cannot move; free it", envoyGatewayVersion, port)
		require.NoError(t, l.Close())
	}

	home := t.TempDir()
	out, err := exec.Command(bin, "certgen", "--local", "--config-home", home).CombinedOutput()
	require.NoError(t, err, "envoy-gateway certgen --local: %s", out)
	certs := filepath.Join(home, "certs", "envoy-gateway")
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		_, err := os.Stat(filepath.Join(certs, f))
		require.NoError(t, err, "certgen --local wrote no %s", f)
	}
	if _, err := os.Stat("/certs"); os.IsNotExist(err) {
		require.NoError(t, os.Mkdir("/certs", 0o755))
		t.Cleanup(func() { _ = os.Remove("/certs") })
	}

	cfg := filepath.Join(home, "envoy-gateway.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, egConfig, egController, strings.Join(nss, ", "), freePort(t)), 0o600))
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /certs && exec "$2" server --config-path "$3"`, "sh", certs, bin, cfg)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigFile(t, "envoy-gateway-"+nss[0]), "ENVOY_GATEWAY_NAMESPACE="+nss[0])
	p := startProcess(t, "envoy-gateway", cmd)
	// Started: it accepted its GatewayClass, or it ended (the failure shows its output).
	require.Never(t, p.Exited, 3*time.Second, tick, "envoy-gateway exited at start")
	return p
}

// egGateway starts Envoy Gateway for nss with a GatewayClass and in each namespace a Gateway
// name (HTTP port 80), and waits until it has accepted them.
func egGateway(t *testing.T, name string, nss ...string) {
	t.Helper()
	startEnvoyGateway(t, nss...)
	class := "eg-" + nss[0]
	createGatewayClass(t, class, egController)
	for _, ns := range nss {
		createGateway(t, ns, name, class, 80)
	}
	for _, ns := range nss {
		waitGatewayCondition(t, ns, name, "Accepted")
	}
}

// createEGBackend creates an Envoy Gateway Backend name with one FQDN endpoint host:port.
func createEGBackend(t *testing.T, ns, name, host string, port int) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.envoyproxy.io/v1alpha1",
		"kind":       "Backend",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"endpoints": []any{
			map[string]any{"fqdn": map[string]any{"hostname": host, "port": int64(port)}},
		}},
	}}
	require.EventuallyWithT(t, func(c *assert.CollectT) { // the CRD may be fresh
		_, err := dyn.Resource(egBackendsResource).Namespace(ns).Create(ctxFor(t), u, metav1.CreateOptions{})
		require.NoError(c, err)
	}, waitTimeout, tick)
}
