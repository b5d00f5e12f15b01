// Package testenv locates what the tests and the demo need: the control plane binaries and
// helm (built by the hack/ scripts), the chart's CRDs (the same files users install) and
// Gateway API's standard-channel CRDs from the gateway-api module. The publisher never
// imports it.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RepoRoot returns the repository's root directory, found with `go list -m`, so it works
// from any directory inside the repository.
func RepoRoot() (string, error) {
	dir, err := moduleDir("github.com/trafficmap/publisher")
	if err != nil {
		return "", fmt.Errorf("locate the repository (run from inside it): %w", err)
	}
	return dir, nil
}

// CRDPaths returns the chart's CRD folder, then extraDirs, then Gateway API's
// standard-channel CRD files (without its ValidatingAdmissionPolicy file).
func CRDPaths(extraDirs ...string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	gw, err := moduleDir("sigs.k8s.io/gateway-api")
	if err != nil {
		return nil, fmt.Errorf("locate the gateway-api module: %w", err)
	}
	paths := append([]string{filepath.Join(root, "charts", "publisher", "crds")}, extraDirs...)
	std := filepath.Join(gw, "config", "crd", "standard")
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

func moduleDir(module string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s printed no directory", module)
	}
	return dir, nil
}

// ControlPlaneAssets returns the folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when set (make test sets it), otherwise what hack/controlplane.sh builds or reuses.
func ControlPlaneAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	out, err := script("controlplane.sh")
	if err != nil {
		return "", fmt.Errorf("build control plane (hack/controlplane.sh): %w", err)
	}
	return out, nil
}

var helmOnce = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("HELM"); p != "" {
		return p, nil
	}
	out, err := script("helm.sh")
	if err != nil {
		return "", fmt.Errorf("build helm (hack/helm.sh): %w", err)
	}
	return out, nil
})

// Helm returns the helm binary: $HELM when set, otherwise what hack/helm.sh builds or
// reuses (once per process).
func Helm() (string, error) { return helmOnce() }

// script runs one of the repository's hack/ scripts and returns what it printed.
func script(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "hack", name))
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}
