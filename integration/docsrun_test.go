package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/standin"
	"github.com/trafficmap/publisher/model"
)

// Docs that run: every ```sh block of docs/how-to/*.md runs, in page order, in one
// `bash -euo pipefail` session per page, on this package's control plane, with the
// publisher running, KUBECONFIG naming an admin of the control plane and PATH holding a
// real kubectl (v1.37.2, hack/kubectl.sh) and the publisher binary as kubectl-trafficmap.
// Every page with sh blocks has a fixture here that creates what its "Before you start"
// list says; every other shell block must be marked `<!-- not run: REASON -->` on the line
// before it.

// docFixtures are the pages' "Before you start" lists, as code: each creates exactly what
// its page assumes. A page with sh blocks and no entry fails TestDocs.
var docFixtures = map[string]func(t *testing.T){
	"drain-a-cluster.md": func(t *testing.T) { seedPage(t, "prod") },
	"ramped-drain.md":    func(t *testing.T) { seedPage(t, "shop") },
	"fleet-drain.md":     fleetPage,
}

// TestDocs runs the how-to guides (see above); a failing command names its page, block and
// line, with the block and its output.
func TestDocs(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "how-to", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/how-to has pages")
	for _, page := range pages {
		name := filepath.Base(page)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(page)
			require.NoError(t, err)
			blocks, err := shellBlocks(string(src))
			require.NoError(t, err, "docs/how-to/%s", name)
			if len(blocks) == 0 {
				return
			}
			require.Contains(t, string(src), "\n## Before you start\n", "docs/how-to/%s lists what its sh blocks assume", name)
			setup, ok := docFixtures[name]
			require.True(t, ok, "docs/how-to/%s has sh blocks but no fixture in docFixtures (integration/docsrun_test.go)", name)
			setup(t)
			if msg := runPage(t, blocks); msg != "" {
				t.Fatalf("docs/how-to/%s: %s", name, msg)
			}
		})
	}
}

// docBlock is one ```sh block: its commands and the page line of its opening fence.
type docBlock struct {
	line int
	text string
}

// fenceRE matches a fence line: its indentation (a block in a list item is indented with
// the item), three or more backticks or tildes, and the info string's first word.
var fenceRE = regexp.MustCompile("^( *)(`{3,}|~{3,})\\s*([^\\s`]*)")

// notRunRE is the mark a shell block that is not run must have on the line before it.
var notRunRE = regexp.MustCompile(`^<!-- not run: \S.* -->$`)

// shellInfos are the info strings of shell blocks other than sh, which are not run.
var shellInfos = map[string]bool{"bash": true, "console": true, "shell": true, "zsh": true, "shell-session": true}

// shellBlocks returns a page's sh blocks in order, or an error naming each shell block
// that is not marked not run, and each sh block that is (sh blocks always run).
func shellBlocks(page string) ([]docBlock, error) {
	lines := strings.Split(page, "\n")
	var blocks []docBlock
	var errs []error
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, open, info, start := m[1], m[2], strings.ToLower(m[3]), i
		var body []string
		for i++; i < len(lines) && !isClosingFence(lines[i], open); i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		marked := start > 0 && notRunRE.MatchString(strings.TrimSpace(lines[start-1]))
		switch {
		case info == "sh" && marked:
			errs = append(errs, fmt.Errorf("line %d: an sh block always runs: mark it `console` to keep it from running", start+1))
		case info == "sh":
			blocks = append(blocks, docBlock{line: start + 1, text: strings.Join(body, "\n")})
		case shellInfos[info] && !marked:
			errs = append(errs, fmt.Errorf("line %d: a %s block must have `<!-- not run: REASON -->` on the line before it (or be sh, and run)", start+1, info))
		}
	}
	return blocks, errors.Join(errs...)
}

// isClosingFence reports whether line closes a block opened with the fence open.
func isClosingFence(line, open string) bool {
	s := strings.TrimLeft(line, " ")
	if !strings.HasPrefix(s, open) {
		return false
	}
	return strings.Trim(s, open[:1]+" \t") == ""
}

// runPage runs the blocks in one bash session and returns "" when every block succeeded,
// else which block failed (number, line, text) with its output.
func runPage(t *testing.T, blocks []docBlock) string {
	t.Helper()
	dir := t.TempDir()
	var script strings.Builder
	script.WriteString("set -euo pipefail\ncd \"$DOCS_WORKDIR\"\n")
	for i, b := range blocks {
		file := filepath.Join(dir, fmt.Sprintf("block-%d.sh", i+1))
		require.NoError(t, os.WriteFile(file, []byte(b.text+"\n"), 0o600))
		fmt.Fprintf(&script, "echo %d > %q\n{ source %q; } > %q 2>&1\n", i+1, filepath.Join(dir, "current"), file, file+".out")
	}
	script.WriteString("echo done > " + strconv.Quote(filepath.Join(dir, "current")) + "\n")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script.String())
	cmd.Env = docsEnv(t)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	for i := range blocks {
		if got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("block-%d.sh.out", i+1))); err == nil {
			t.Logf("block %d (line %d) output:\n%s", i+1, blocks[i].line, got)
		}
	}
	current, _ := os.ReadFile(filepath.Join(dir, "current"))
	if runErr == nil && strings.TrimSpace(string(current)) == "done" {
		return ""
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(current)))
	if err != nil || n < 1 || n > len(blocks) {
		return fmt.Sprintf("the session failed before any block ran: %v\n%s", runErr, out.String())
	}
	got, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("block-%d.sh.out", n)))
	return fmt.Sprintf("sh block %d (line %d) failed: %v\n--- block\n%s\n--- output\n%s%s", n, blocks[n-1].line, runErr, blocks[n-1].text, got, out.String())
}

// docsEnv is the pages' environment: an admin kubeconfig (context envtest), PATH with the
// real kubectl and the publisher as kubectl-trafficmap first, and a HOME of its own.
func docsEnv(t *testing.T) []string {
	t.Helper()
	bin := t.TempDir()
	require.NoError(t, os.Symlink(kubectlBinary(t), filepath.Join(bin, "kubectl")))
	require.NoError(t, os.Symlink(publisherBinary(t), filepath.Join(bin, "kubectl-trafficmap")))
	home, work := t.TempDir(), t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" && k != "KUBECONFIG" {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home,
		"KUBECONFIG="+admin(t).kubeconfig, "DOCS_WORKDIR="+work)
}

// The kubectl the pages and the plugin test run, built once by hack/kubectl.sh unless
// TRAFFICMAP_KUBECTL (set by make test) names it.
var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

func kubectlBinary(t *testing.T) string {
	t.Helper()
	kubectlOnce.Do(func() {
		if kubectlPath = os.Getenv("TRAFFICMAP_KUBECTL"); kubectlPath != "" {
			return
		}
		cmd := exec.Command("bash", filepath.Join(repoRoot(), "hack", "kubectl.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kubectlErr = fmt.Errorf("hack/kubectl.sh: %w: %s", err, stderr.String())
			return
		}
		kubectlPath = strings.TrimSpace(string(out))
	})
	require.NoError(t, kubectlErr)
	return kubectlPath
}

// fixedNamespace creates the namespace a page names; it must not exist yet (each page has
// its own, and namespaces are never finalized on this control plane).
func fixedNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err, "the page's namespace %s is free on this control plane", name)
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// pageFixture is newFixture in the page's namespace: the Gateway ns/global served by the
// stand-in gateway controller and the InferenceService chat with spec.placement.
func pageFixture(t *testing.T, ns string) *fixture {
	t.Helper()
	fixedNamespace(t, ns)
	f := &fixture{t: t, ns: ns, routing: standin.Routing{Client: tmc}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	f.gw, err = standin.StartGateway(ctx, kube, gw, ns, gatewayName, t.Logf)
	require.NoError(t, err)
	f.isvcUID = f.createISVC(service, nil)
	return f
}

// routedStatus writes what OME's routing controller (the stand-in) writes on a map it made:
// sourceUID, Routable True and OverrideActive False.
func routedStatus(t *testing.T, ns, name string, uid types.UID) {
	t.Helper()
	_, err := standin.Routing{Client: tmc}.ApplyStatus(ctxFor(t), ns, name, uid,
		metav1.Condition{Status: metav1.ConditionTrue, Reason: "Routable", Message: "at least one entry has a positive weight"},
		metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoOverride", Message: "no drain holds an entry"})
	require.NoError(t, err)
}

// seedPage is the seed's setup in namespace ns (drain-a-cluster.md, ramped-drain.md): the
// Gateway ns/global with a controller, the InferenceService chat with spec.placement, its
// TrafficMap chat with worker-a and worker-b at weight 1 as OME's routing controller left it,
// and the publisher (--namespace ns --gateway ns/global --sinks httproute) running, chat
// Published.
func seedPage(t *testing.T, ns string) {
	t.Helper()
	f := pageFixture(t, ns)
	f.createMap(seedEntries())
	routedStatus(t, ns, service, f.isvcUID)
	f.startPublisher()
	f.waitPublished()
}

// fleetPage is fleet-drain.md's setup: namespace serving with the Gateway serving/global,
// the InferenceServices chat and embed, their TrafficMaps with gpu-east and gpu-west at
// weight 1, the WorkloadClusters gpu-east and gpu-west (no taints; cluster-scoped, so named
// apart from every other test's clusters), and the publisher (--namespace serving --gateway
// serving/global --sinks httproute) running, both maps Published.
func fleetPage(t *testing.T) {
	t.Helper()
	const ns = "serving"
	f := pageFixture(t, ns)
	embedUID := f.createISVC("embed", nil)
	for _, c := range []string{"gpu-east", "gpu-west"} {
		setWorkloadClusterTaints(t, c, "", true)
	}
	entries := []v1beta1.TrafficMapEntry{
		{Cluster: "gpu-east", Endpoint: "https://gpu-east.example.com", Weight: 1, Healthy: true},
		{Cluster: "gpu-west", Endpoint: "https://gpu-west.example.com", Weight: 1, Healthy: true},
	}
	f.createMap(entries)
	routedStatus(t, ns, service, f.isvcUID)
	_, err := tmc.OmeV1beta1().TrafficMaps(ns).Create(ctxFor(t), &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: "embed", Namespace: ns},
		Spec:       v1beta1.TrafficMapSpec{Service: "embed", Mode: "All", Entries: entries, ObservedISVCGeneration: 1},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	routedStatus(t, ns, "embed", embedUID)
	f.startPublisher()
	for _, name := range []string{service, "embed"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			tm, err := tmc.OmeV1beta1().TrafficMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(c, err)
			cond := published(tm)
			require.NotNil(c, cond)
			assert.Equal(c, string(model.ReasonPublished), cond.Reason, cond.Message)
		}, waitTimeout, tick, "%s/%s Published", ns, name)
	}
}

// shellBlocks runs sh blocks (also indented in a list item, with longer or tilde fences)
// and requires the not-run mark on the line right before every other shell block.
func TestDocsShellBlocks(t *testing.T) {
	tests := []struct {
		name    string
		page    string
		want    []docBlock
		wantErr string
	}{
		{name: "sh runs", page: "# T\n\n```sh\nkubectl get tm\n```\n", want: []docBlock{{line: 3, text: "kubectl get tm"}}},
		{name: "in a list item", page: "1. Step:\n\n   ```sh\n   a \\\n     b\n   ```\n",
			want: []docBlock{{line: 3, text: "a \\\n  b"}}},
		{name: "longer and tilde fences", page: "````sh\n```\n````\n~~~sh\nc\n~~~\n",
			want: []docBlock{{line: 1, text: "```"}, {line: 4, text: "c"}}},
		{name: "data and output are not shell", page: "```yaml\na: 1\n```\n```text\nout\n```\n```\nplain\n```\n"},
		{name: "marked console", page: "<!-- not run: needs Helm -->\n```console\n$ helm install\n```\n"},
		{name: "marked in a list item", page: "1. x\n\n   <!-- not run: needs a real cluster -->\n   ```bash\n   kubectl get pods\n   ```\n"},
		{name: "unmarked console", page: "x\n\n```console\n$ helm install\n```\n",
			wantErr: "line 3: a console block must have `<!-- not run: REASON -->` on the line before it"},
		{name: "mark not right before", page: "<!-- not run: needs Helm -->\n\n```shell\nhelm install\n```\n",
			wantErr: "line 3: a shell block must have"},
		{name: "mark without a reason", page: "<!-- not run: -->\n```bash\nx\n```\n", wantErr: "line 2: a bash block must have"},
		{name: "marked sh", page: "<!-- not run: slow -->\n```sh\nx\n```\n", wantErr: "line 2: an sh block always runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shellBlocks(tt.page)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
