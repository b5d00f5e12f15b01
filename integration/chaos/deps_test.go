package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forbiddenDeps are the publisher's packages the chaos harness must not depend on: it checks
// their work, so a bug in them (a name, a weight, a status) would be shared, not caught.
var forbiddenDeps = []string{
	"github.com/trafficmap/publisher/model",
	"github.com/trafficmap/publisher/xds",
	"github.com/trafficmap/publisher/weights",
	"github.com/trafficmap/publisher/publish",
	"github.com/trafficmap/publisher/httproute",
}

// The harness and its tests import none of forbiddenDeps, nor their subpackages, directly
// or through another package (integration/standin included).
func TestDepsIndependent(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	root := filepath.Dir(strings.TrimSpace(string(out)))
	cmd := exec.Command("go", "list", "-deps", "-test", "./integration/chaos/...")
	cmd.Dir = root
	out, err = cmd.Output()
	require.NoError(t, err, "go list: %s", errOutput(err))
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden(pkg) {
			bad = append(bad, pkg)
		}
	}
	assert.Empty(t, bad, "the chaos harness depends on the publisher's own packages")
}

// forbidden reports whether pkg is one of forbiddenDeps or below one.
func forbidden(pkg string) bool {
	for _, f := range forbiddenDeps {
		if pkg == f || strings.HasPrefix(pkg, f+"/") {
			return true
		}
	}
	return false
}

// Each forbidden package and its subpackages are found, and nothing else.
func TestDepsForbidden(t *testing.T) {
	assert.True(t, forbidden("github.com/trafficmap/publisher/xds"))
	assert.True(t, forbidden("github.com/trafficmap/publisher/model/statusapply"))
	assert.False(t, forbidden("github.com/trafficmap/publisher/xdsclient"))
	assert.False(t, forbidden("github.com/trafficmap/publisher/api/v1beta1"))
}

// errOutput is the stderr of a failed command, if any.
func errOutput(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
