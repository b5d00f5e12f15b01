package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// The publisher binary, built once for the operator-command tests, which run it as an
// operator would: as a process, with a kubeconfig, stdin, stdout and stderr.
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
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/publisher")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = errors.New("go build ./cmd/publisher: " + err.Error() + ": " + string(out))
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// opsUser is an API user with its own kubeconfig file (context "envtest").
type opsUser struct{ kubeconfig string }

// newOpsUser adds a user to the control plane; groups {"system:masters"} makes it an admin.
func newOpsUser(t *testing.T, name string, groups ...string) opsUser {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	require.NoError(t, err)
	kc, err := u.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, kc, 0o600))
	return opsUser{kubeconfig: path}
}

func admin(t *testing.T) opsUser { return newOpsUser(t, "operator", "system:masters") }

// ran is one finished command.
type ran struct {
	stdout, stderr string
	code           int
}

// run runs the publisher with stdin not a terminal (/dev/null).
func (u opsUser) run(t *testing.T, args ...string) ran {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t), publisherBinary(t), append(args, "--kubeconfig", u.kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return ran{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// start runs the publisher in the background, stdin not a terminal; the returned function
// waits for it to end and returns what it did.
func (u opsUser) start(t *testing.T, args ...string) func() ran {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t), publisherBinary(t), append(args, "--kubeconfig", u.kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	var r ran
	wait := func() ran {
		t.Helper()
		once.Do(func() {
			err := cmd.Wait()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				require.NoError(t, err)
			}
			r = ran{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
		})
		return r
	}
	t.Cleanup(func() { wait() })
	return wait
}

// isvc reads an InferenceService.
func (f *fixture) isvc(name string) *unstructured.Unstructured {
	f.t.Helper()
	u, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return u
}

// createRawISVC creates an InferenceService exactly as given (no placement unless set).
func (f *fixture) createRawISVC(name string, labels map[string]string, spec map[string]any) {
	f.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": name, "namespace": f.ns}, "spec": spec,
	}}
	u.SetLabels(labels)
	_, err := dyn.Resource(v1beta1.InferenceServicesResource).Namespace(f.ns).Create(ctxFor(f.t), u, metav1.CreateOptions{})
	require.NoError(f.t, err)
}

// bindRole gives user a Role in the fixture's namespace with these rules.
func (f *fixture) bindRole(user string, rules ...rbacv1.PolicyRule) {
	f.t.Helper()
	ctx := ctxFor(f.t)
	_, err := kube.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	_, err = kube.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	require.NoError(f.t, err)
}
