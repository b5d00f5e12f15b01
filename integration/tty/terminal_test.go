package tty

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The fixture and the expected outputs below follow integration/helpers_test.go and
// integration/ops_test.go (the same seed service, map and drain); test helpers cannot be
// imported across modules.
const (
	waitTimeout     = 30 * time.Second
	tick            = 25 * time.Millisecond
	service         = "chat"
	drainKey        = "ome.io/traffic-drain"
	seedDrain       = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`
	confirmPrompt   = "Confirm this exact action? [y/N] "
	declined        = "error: action declined at the prompt; nothing was changed\n"
	acceptedMessage = "API accepted traffic annotation request; not TrafficM..."
)

// Through a pseudo-terminal: n declines (the error says so), changes nothing and exits 1; Ctrl-C cancels; y drains; YES
// undrains.
func TestOpsDrainThroughTerminal(t *testing.T) {
	f := newFixture(t)
	op := admin(t)

	rv := f.isvc().GetResourceVersion()
	got := op.runTerminal(t, "n", nil, seedDrainArgs(f.ns)...)
	assert.Equal(t, 1, got.code)
	assert.Equal(t, f.wantPreview("drain", rv, "worker-a", `"planned maintenance"`, "0 -> 1")+confirmPrompt+"n\n"+declined, got.stderr)
	assert.Empty(t, got.stdout)
	assert.Equal(t, rv, f.isvc().GetResourceVersion(), "nothing changed")

	got = op.runTerminal(t, "\x03", nil, seedDrainArgs(f.ns)...) // Ctrl-C in raw mode
	assert.Equal(t, 1, got.code)
	assert.True(t, strings.HasSuffix(got.stderr, confirmPrompt+"\nerror: context canceled\n"), got.stderr)
	assert.Equal(t, rv, f.isvc().GetResourceVersion(), "nothing changed")

	got = op.runTerminal(t, "y", nil, seedDrainArgs(f.ns)...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.Equal(t, f.wantPreview("drain", rv, "worker-a", `"planned maintenance"`, "0 -> 1")+confirmPrompt+"y\n", got.stderr)
	assert.Equal(t, f.wantResult("drain", "0 -> 1", "none", "Yes", acceptedMessage), got.stdout)
	assert.Equal(t, seedDrain, f.isvc().GetAnnotations()[drainKey])

	got = op.runTerminal(t, "YES", nil, undrainArgs(f.ns)...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.True(t, strings.HasSuffix(got.stderr, confirmPrompt+"YES\n"), got.stderr)
	assert.Equal(t, f.wantResult("undrain", "1 -> 0", "none", "Yes", acceptedMessage), got.stdout)
	assert.NotContains(t, f.isvc().GetAnnotations(), drainKey)
}

// The drain of the last serving cluster with --allow-no-traffic: the prompt says in words
// that all traffic to the service stops; n declines and changes nothing, y drains.
func TestOpsAllowNoTrafficPromptSaysTrafficStops(t *testing.T) {
	f := newFixture(t)
	op := admin(t)
	f.setAnnotation(drainKey, `{"maintenance-b":{"cluster":"worker-b","reason":"first"}}`)
	rv := f.isvc().GetResourceVersion()
	args := append(seedDrainArgs(f.ns), "--allow-no-traffic")
	stops := fmt.Sprintf("ALL TRAFFIC to %s/chat STOPS: no workload cluster keeps a positive effective weight. ", f.ns) + confirmPrompt

	got := op.runTerminal(t, "n", nil, args...)
	assert.Equal(t, 1, got.code)
	assert.True(t, strings.HasSuffix(got.stderr, stops+"n\n"+declined), got.stderr)
	assert.Contains(t, got.stderr, fmt.Sprintf("  NO TRAFFIC: all traffic to InferenceService %s/chat stops: no workload cluster keeps a positive effective weight.\n", f.ns))
	assert.Equal(t, rv, f.isvc().GetResourceVersion(), "nothing changed")

	got = op.runTerminal(t, "y", nil, args...)
	require.Equal(t, 0, got.code, got.stderr)
	assert.True(t, strings.HasSuffix(got.stderr, stops+"y\n"), got.stderr)
	assert.Contains(t, f.isvc().GetAnnotations()[drainKey], "maintenance-a")
}

// An update between the read and the patch (made while the prompt waits) makes the guarded
// patch fail: exit 3, the OME message, and neither the drain nor anything else is written.
func TestOpsConcurrentUpdateIsRejected(t *testing.T) {
	f := newFixture(t)
	op := admin(t)

	var bumped string
	got := op.runTerminal(t, "y", func() {
		f.setAnnotation("unrelated", "bump")
		bumped = f.isvc().GetResourceVersion()
	}, seedDrainArgs(f.ns)...)
	assert.Equal(t, 3, got.code)
	assert.True(t, strings.HasSuffix(got.stderr, confirmPrompt+"y\nerror: guarded annotation patch rejected; refresh traffic status and retry explicitly\n"), got.stderr)
	assert.Empty(t, got.stdout)
	assert.Equal(t, map[string]string{"unrelated": "bump"}, f.isvc().GetAnnotations())
	assert.Equal(t, bumped, f.isvc().GetResourceVersion(), "nothing was written after the bump")

	// The same for an undrain, on a drained service.
	f.setAnnotation(drainKey, seedDrain)
	got = op.runTerminal(t, "y", func() { f.setAnnotation("unrelated", "bump-2") }, undrainArgs(f.ns)...)
	assert.Equal(t, 3, got.code, got.stderr)
	assert.Equal(t, seedDrain, f.isvc().GetAnnotations()[drainKey])
}

func seedDrainArgs(ns string) []string {
	return []string{"drain", service, "-n", ns, "--workload-cluster", "worker-a", "--id", "maintenance-a", "--reason", "planned maintenance"}
}

func undrainArgs(ns string) []string {
	return []string{"undrain", service, "-n", ns, "--id", "maintenance-a"}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fixture is one test's namespace with the seed's InferenceService chat and its TrafficMap
// (chat on worker-a and worker-b, weight 1 each). No publisher runs: the commands only read
// the map and patch the InferenceService.
type fixture struct {
	t       *testing.T
	ns      string
	isvcUID types.UID
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	created, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tty-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	f := &fixture{t: t, ns: created.Name}
	u, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Create(ctxFor(t), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1",
		"kind":       "InferenceService",
		"metadata":   map[string]any{"name": service, "namespace": f.ns},
		"spec":       map[string]any{"placement": map[string]any{"mode": "All", "clusterSelector": map[string]any{}}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.isvcUID = u.GetUID()
	_, err = tmc.OmeV1beta1().TrafficMaps(f.ns).Create(ctxFor(t), &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: f.ns},
		Spec: v1beta1.TrafficMapSpec{Service: service, Mode: "All", ObservedISVCGeneration: 1, Entries: []v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1, Healthy: true},
			{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1, Healthy: true},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return f
}

// isvc reads the InferenceService chat.
func (f *fixture) isvc() *unstructured.Unstructured {
	f.t.Helper()
	u, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Get(ctxFor(f.t), service, metav1.GetOptions{})
	require.NoError(f.t, err)
	return u
}

// setAnnotation sets one annotation on the InferenceService chat.
func (f *fixture) setAnnotation(key, value string) {
	f.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	require.NoError(f.t, err)
	_, err = dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Patch(ctxFor(f.t), service, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(f.t, err)
}

// wantPreview is the seed's preview for the fixture's chat as read (uid, resourceVersion),
// with the effective weights of the drain (worker-a 1 -> 0) or the undrain (0 -> 1) of
// worker-a.
func (f *fixture) wantPreview(action, rv, cluster, reason, count string) string {
	return fmt.Sprintf(`ALPHA guarded traffic action (not TrafficMap convergence)
FIELD             VALUE
Action            traffic %s
Context           envtest
Workload NS       %s
Target            InferenceService/chat
UID               %s
ResourceVersion   %s
Dry-run           none
Override ID       maintenance-a
Cluster           %s
Reason            %s
Override count    %s
Annotation        ome.io/traffic-drain
Follow-up         publisher status chat -n %s --context=envtest
API acceptance is not TrafficMap convergence or data-plane realization.
The exact InferenceService UID/resourceVersion is tested atomically.
Other annotations and traffic-drain override IDs are preserved.
Run the previewed traffic status command to observe controller evidence.
Effective weights of InferenceService %s/chat (TrafficMap chat):
  CLUSTER    WEIGHT   BEFORE   AFTER
  worker-a   1        %s        %s
  worker-b   1        1        1
`, action, f.ns, f.isvcUID, rv, cluster, reason, count, f.ns, f.ns, map[string]string{"drain": "1", "undrain": "0"}[action], map[string]string{"drain": "0", "undrain": "1"}[action])
}

func (f *fixture) wantResult(action, count, dryRun, applied, message string) string {
	return fmt.Sprintf(`FIELD         VALUE
action        traffic %s
target        InferenceService/%s/chat
dry-run       %s
accepted      Yes
applied       %s
override-id   maintenance-a
cluster       worker-a
overrides     %s
message       %s
follow-up     publisher status chat -n %s --context=envtest
hint          Use -o json or -o yaml for full values.
`, action, f.ns, dryRun, applied, count, message, f.ns)
}

// The publisher binary, built once, which the tests run as an operator would.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func publisherBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "publisher-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "publisher")
		cmd := exec.Command("go", "-C", root, "build", "-o", binPath, "./cmd/publisher")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/publisher: %w: %s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// opsUser is an API user with its own kubeconfig file (context "envtest").
type opsUser struct{ kubeconfig string }

// admin adds an API user in system:masters.
func admin(t *testing.T) opsUser {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kc, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, kc, 0o600))
	return opsUser{kubeconfig: path}
}

// ran is one finished command.
type ran struct {
	stdout, stderr string
	code           int
}

// runTerminal runs the publisher with stdin and stderr on a pseudo-terminal. It waits for the
// prompt, calls atPrompt (which may change the cluster meanwhile), then types answer and
// Enter. stderr holds everything the terminal showed.
func (u opsUser) runTerminal(t *testing.T, answer string, atPrompt func(), args ...string) ran {
	t.Helper()
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	cmd := exec.CommandContext(ctxFor(t), publisherBinary(t), append(args, "--kubeconfig", u.kubeconfig)...)
	var stdout bytes.Buffer
	cmd.Stdin, cmd.Stderr, cmd.Stdout = tty, tty, &stdout
	require.NoError(t, cmd.Start())
	// The test keeps its copy of the terminal open until the child's output is read: when
	// the last copy closes, Linux may hang the master up before output written just before
	// the exit reaches it (CI lost a declined prompt's last line so).
	defer tty.Close()

	var screen syncBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&screen, ptmx); close(copied) }() // ends with EIO once the terminal closes

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, screen.String(), confirmPrompt)
	}, waitTimeout, tick, "the prompt")
	if atPrompt != nil {
		atPrompt()
	}
	_, err = ptmx.Write([]byte(answer + "\r"))
	require.NoError(t, err)

	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	// Everything the child wrote comes before an end mark written after its exit.
	const end = "[end of the child's output]"
	_, err = tty.Write([]byte(end))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, strings.HasSuffix(screen.String(), end))
	}, waitTimeout, tick, "the child's output")
	require.NoError(t, tty.Close())
	<-copied
	stderr := strings.TrimSuffix(strings.ReplaceAll(screen.String(), "\r\n", "\n"), end)
	return ran{stdout: stdout.String(), stderr: stderr, code: cmd.ProcessState.ExitCode()}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
