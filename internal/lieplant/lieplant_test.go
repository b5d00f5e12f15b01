package lieplant

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultBuildHasNoPlant builds the publisher without the tag and checks that its symbol
// table names nothing of this package: every hook was removed as dead code. (Built with
// -tags lieplant, the same binary lists this package's functions.)
func TestDefaultBuildHasNoPlant(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "publisher")
	build := exec.Command("go", "build", "-o", bin, "./cmd/publisher")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	nm, err := exec.Command("go", "tool", "nm", bin).Output()
	require.NoError(t, err)
	var found []string
	for _, line := range strings.Split(string(nm), "\n") {
		if strings.Contains(line, "lieplant") {
			found = append(found, line)
		}
	}
	assert.Empty(t, found, "symbols of the lie plant in the default build")
}

func TestRivalName(t *testing.T) {
	assert.Equal(t, "rival-a.b.example.com", RivalName("a.b.example.com"))
	assert.Equal(t, "*.example.com", RivalName("*.example.com"))
	assert.Empty(t, RivalName(""))
}
