package model_test

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The model is pure, and the operator commands never link the controller or the xDS
// server: the dependency rules of the layout, checked with `go list -deps`.
func TestDependencies(t *testing.T) {
	goBin := filepath.Join(build.Default.GOROOT, "bin", "go") // the toolchain running this test
	deps := func(pkgs ...string) []string {
		out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
		require.NoError(t, err)
		return strings.Fields(string(out))
	}
	for _, tc := range []struct {
		pkgs      []string
		forbidden *regexp.Regexp
	}{
		{[]string{"github.com/trafficmap/publisher/model"},
			regexp.MustCompile(`client-go/(tools/cache|informers|util/workqueue)|grpc|go-control-plane`)},
		{[]string{"github.com/trafficmap/publisher/drain", "github.com/trafficmap/publisher/report"},
			regexp.MustCompile(`trafficmap/publisher/publish$|go-control-plane/pkg/server`)},
	} {
		for _, d := range deps(tc.pkgs...) {
			require.False(t, tc.forbidden.MatchString(d), "%v depends on %s", tc.pkgs, d)
		}
	}
}
