// Package testenv locates what the integration tests and the demo install on their local
// control plane: the chart's CRDs (the same files users install) and Gateway API's
// standard-channel CRDs from the gateway-api module. The publisher never imports it.
package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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
