package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The publisher binary linked as kubectl-trafficmap on PATH is a kubectl plugin: the real
// kubectl runs 'kubectl trafficmap status ...' through it, with the same output as
// 'publisher status ...', its exit codes, and its help naming 'kubectl trafficmap'; drain
// works the same way, and kubectl completes the plugin's flags and SERVICE.
func TestKubectlPluginStatus(t *testing.T) {
	kubectl := kubectlBinary(t) // the real kubectl v1.37.2 (hack/kubectl.sh), as the docs test runs
	f := newFixture(t)
	f.createMap(seedEntries())
	f.startPublisher()
	f.waitPublished()
	op := admin(t)

	dir := t.TempDir()
	for _, name := range []string{"kubectl-trafficmap", "kubectl_complete-trafficmap"} { // as make install-plugin links it
		require.NoError(t, os.Symlink(publisherBinary(t), filepath.Join(dir, name)))
	}
	kubectlRun := func(args ...string) ran {
		t.Helper()
		cmd := exec.CommandContext(ctxFor(t), kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+op.kubeconfig)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			require.NoError(t, err)
		}
		return ran{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	}
	plugin := func(args ...string) ran { t.Helper(); return kubectlRun(append([]string{"trafficmap"}, args...)...) }

	got := plugin("status", "chat", "-n", f.ns)
	require.Equal(t, 0, got.code, got.stderr)
	direct := op.run(t, "status", "chat", "-n", f.ns)
	require.Equal(t, 0, direct.code, direct.stderr)
	assert.Equal(t, direct.stdout, got.stdout, "the plugin is the same command")
	assert.Contains(t, got.stdout, "worker-a")

	got = plugin("status", "chat", "-n", f.ns, "--check", "-o", "json", "--request-timeout", "20s")
	assert.Equal(t, 0, got.code, got.stderr)

	got = plugin("status", "nope", "-n", f.ns)
	assert.Equal(t, 1, got.code, "the plugin's exit code reaches the caller")
	assert.True(t, strings.HasPrefix(got.stderr, "error: "), got.stderr)

	got = plugin("status", "chat", "--nope")
	assert.Equal(t, 1, got.code)
	assert.Equal(t, "error: unknown flag: --nope; use --help\n", got.stderr)

	got = plugin("status", "--help")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stdout, "Usage:\n  kubectl trafficmap status")

	// drain through the plugin (a client dry run: validated, previewed, nothing sent).
	got = plugin("drain", "chat", "-n", f.ns, "--workload-cluster", "worker-a", "--id", "maintenance-a", "--reason", "planned maintenance",
		"--yes", "--dry-run=client")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stdout, "traffic drain")
	assert.NotContains(t, f.isvc(service).GetAnnotations(), drainKey)

	// kubectl's completion of the plugin runs kubectl_complete-trafficmap: flags, and the
	// TrafficMaps of the namespace read from the API.
	got = kubectlRun("__complete", "trafficmap", "status", "--outp")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Contains(t, got.stdout, "--output")
	got = kubectlRun("__complete", "trafficmap", "status", "-n", f.ns, "")
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, []string{"chat", ":4"}, strings.Fields(got.stdout))
}
