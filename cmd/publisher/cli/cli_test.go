package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, exitUsage, "Usage:"},
		{"unknown command", []string{"publish"}, exitUsage, `error: unknown command "publish"`},
		{"help", []string{"help"}, exitOK, ""},
		{"run without gateway", []string{"run"}, exitUsage, "error: invalid configuration: --gateway is required"},
		{"run with bad flag", []string{"run", "--gatewy", "x"}, exitUsage, "error: unknown flag: --gatewy; see 'publisher run --help'"},
		{"unknown root flag", []string{"--nope"}, exitUsage, "error: unknown flag: --nope"},
		{"run with bad policy", []string{"run", "--gateway", "prod/global", "--no-positive-policy", "Keep"}, exitUsage, "must be ApplyCurrent or RetainLastPositive"},
		{"run with bad log format", []string{"run", "--gateway", "prod/global", "--log-format", "xml"}, exitUsage, `--log-format "xml": must be json or console`},
		{"run with stray argument", []string{"run", "--gateway", "g", "extra"}, exitUsage, "unexpected arguments: extra"},
		{"run with a memory limit ratio above 1", []string{"run", "--gateway", "g", "--memory-limit-ratio", "1.5"}, exitUsage, "--memory-limit-ratio 1.5: must be between 0 and 1"},
		{"run with missing kubeconfig", []string{"run", "--gateway", "g", "--kubeconfig", "/nonexistent/kubeconfig"}, exitUsage, "error: load kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runMain(context.Background(), tc.args, &stdout, &stderr)
			assert.Equal(t, tc.code, code, stderr.String())
			assert.Contains(t, stderr.String(), tc.stderr)
		})
	}
}

func parseRunFlags(t *testing.T, args ...string) runFlags {
	t.Helper()
	var f runFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	f.register(fs)
	require.NoError(t, fs.Parse(args))
	return f
}

func TestFlagsToConfig(t *testing.T) {
	f := parseRunFlags(t, "--gateway", "infra/edge", "--namespace", "prod, staging", "--require-route-accepted=false",
		"--no-positive-policy", "RetainLastPositive", "--host-template", "{{.Service}}.example.com")
	cfg := f.config()
	assert.Equal(t, types.NamespacedName{Namespace: "infra", Name: "edge"}, cfg.Gateway)
	assert.Equal(t, []string{"prod", "staging"}, cfg.Namespaces)
	assert.False(t, cfg.RequireRouteAccepted)
	assert.Equal(t, "RetainLastPositive", string(cfg.NoPositivePolicy))

	assert.Empty(t, cfg.HostnameEntitlements, "no entitlement policy by default")
	assert.Empty(t, cfg.PublisherName, "the field manager by default")
	assert.Equal(t, publish.DefaultTeardownTimeout, cfg.TeardownTimeout)
	assert.Equal(t, 5*time.Second, parseRunFlags(t, "--gateway", "g", "--teardown-timeout", "5s").config().TeardownTimeout)
	err := parseRunFlags(t, "--gateway", "g", "--teardown-timeout", "-1s").config().Validate()
	require.ErrorIs(t, err, publish.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "--teardown-timeout")

	f = parseRunFlags(t, "--gateway", "g", "--publisher-name", "edge", "--hostname-entitlement", "Example.com=staging, prod",
		"--hostname-entitlement", "internal.example.org=ops")
	cfg = f.config()
	assert.Equal(t, "edge", cfg.PublisherName)
	assert.Equal(t, []model.Entitlement{{Domain: "example.com", Namespaces: []string{"prod", "staging"}},
		{Domain: "internal.example.org", Namespaces: []string{"ops"}}}, cfg.HostnameEntitlements)
	require.NoError(t, cfg.Validate())
	for _, bad := range []string{"example.com", "*.example.com=prod", "example.com=Prod_1", "=prod"} {
		cfg = parseRunFlags(t, "--gateway", "g", "--hostname-entitlement", bad).config()
		err := cfg.Validate()
		require.ErrorIs(t, err, publish.ErrInvalidConfig, bad)
		assert.Contains(t, err.Error(), "--hostname-entitlement", bad)
	}

	f = parseRunFlags(t, "--gateway", "global")
	assert.Equal(t, types.NamespacedName{Name: "global"}, f.config().Gateway)
	assert.True(t, f.config().RequireRouteAccepted, "acceptance is required by default")
}

// The xDS client policy and the debug address reach the configuration: the policy flag
// repeats (a rule's namespace list has commas of its own).
func TestSecurityFlagsToConfig(t *testing.T) {
	f := parseRunFlags(t, "--gateway", "global", "--xds-client-namespaces", "spiffe://cluster.local/ns/a/*=a,shared",
		"--xds-client-namespaces", "edge-gateway=*", "--debug-address", "127.0.0.1:8081")
	cfg := f.config()
	assert.Equal(t, []string{"spiffe://cluster.local/ns/a/*=a,shared", "edge-gateway=*"}, cfg.XDSClientNamespaces)
	assert.Equal(t, "127.0.0.1:8081", cfg.DebugAddress)
	assert.Empty(t, parseRunFlags(t, "--gateway", "global").config().DebugAddress, "without it the debug endpoints stay on --http-address")
}

// Leader-election durations client-go refuses stop `run` at start-up with exit code 2,
// before anything contacts the API server or listens.
func TestRunRefusesLeaderElectionClientGoRefuses(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "")
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), []string{"run", "--gateway", "prod/global", "--kubeconfig", kubeconfig, "--http-address", "",
		"--leader-elect", "--leader-election-namespace", "ops", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "2s"},
		&stdout, &stderr)
	assert.Equal(t, exitUsage, code, stderr.String())
	assert.Contains(t, stderr.String(), "invalid configuration: leader election")
}

// publisher completion SHELL writes cobra's completion script for bash, zsh and fish.
func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_publisher",
		"zsh":  "#compdef publisher",
		"fish": "complete -c publisher",
	} {
		t.Run(shell, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitOK, runMain(context.Background(), []string{"completion", shell}, &stdout, &stderr), stderr.String())
			assert.Contains(t, stdout.String(), marker)
			assert.Greater(t, strings.Count(stdout.String(), "\n"), 50, "a whole script")
			assert.Empty(t, stderr.String())
		})
	}
}

// The completion engine completes flag values: the output formats of drain.
func TestCompletionOfFlagValues(t *testing.T) {
	var stdout bytes.Buffer
	require.Equal(t, exitOK, runMain(context.Background(), []string{"__complete", "drain", "-o", ""}, &stdout, &bytes.Buffer{}))
	assert.Equal(t, []string{"table", "wide", "json", "yaml", ":4"}, strings.Fields(stdout.String())[:5])
}

// Run as kubectl-trafficmap the binary calls itself 'kubectl trafficmap'; as
// kubectl_complete-trafficmap it answers kubectl's completion requests.
func TestKubectlPluginNames(t *testing.T) {
	var stdout bytes.Buffer
	require.Equal(t, exitOK, RunProgram(context.Background(), "kubectl-trafficmap", []string{"status", "--help"}, &stdout, &bytes.Buffer{}))
	assert.Contains(t, stdout.String(), "Usage:\n  kubectl trafficmap status (SERVICE | --workload-cluster CLUSTER)")
	assert.Contains(t, stdout.String(), "  kubectl trafficmap status chat -n prod")
	assert.NotContains(t, stdout.String(), "publisher status")

	stdout.Reset()
	require.Equal(t, exitOK, RunProgram(context.Background(), "kubectl_complete-trafficmap", []string{"status", "--outp"}, &stdout, &bytes.Buffer{}))
	assert.Contains(t, stdout.String(), "--output")

	stdout.Reset()
	require.Equal(t, exitOK, RunProgram(context.Background(), "publisher", []string{"status", "--help"}, &stdout, &bytes.Buffer{}))
	assert.Contains(t, stdout.String(), "Usage:\n  publisher status")
}

// The operator commands take kubectl's connection flags, and an unknown flag is named.
func TestOperatorCommandsTakeKubectlFlags(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "prod")
	var stdout, stderr bytes.Buffer
	// Every flag is accepted; the request then fails to connect (exit 1), after the flags.
	code := runMain(context.Background(), []string{"status", "chat", "--kubeconfig", kubeconfig, "--context", "x", "-n", "prod",
		"--as", "alice", "--as-group", "ops", "--as-group", "sre", "--request-timeout", "1s"}, &stdout, &stderr)
	assert.Equal(t, exitFailure, code)
	assert.NotContains(t, stderr.String(), "flag")

	stderr.Reset()
	code = runMain(context.Background(), []string{"status", "chat", "--kubeconfig", kubeconfig, "--namespcae", "prod"}, &stdout, &stderr)
	assert.Equal(t, exitFailure, code)
	assert.Equal(t, "error: unknown flag: --namespcae; use --help\n", stderr.String())

	// --request-timeout reaches the client configuration.
	f := newKubeFlags()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--kubeconfig", kubeconfig, "--request-timeout", "7s", "--as", "alice", "--as-group", "ops"}))
	kc, err := loadKube(f)
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, kc.rest.Timeout)
	assert.Equal(t, "alice", kc.rest.Impersonate.UserName)
	assert.Equal(t, []string{"ops"}, kc.rest.Impersonate.Groups)
	assert.Equal(t, "prod", kc.namespace, "the context's namespace")
	assert.Equal(t, "x", kc.context)
}

// plugins/trafficmap.yaml is a krew manifest for this binary: the plugin name kubectl runs
// it under, and for every platform the archive 'make plugin-archives' builds, with the
// publisher binary in it.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "plugins", "trafficmap.yaml"))
	require.NoError(t, err)
	var m struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Spec             struct {
			Version, Homepage, ShortDescription, Description, Caveats string
			Platforms                                                 []struct {
				Selector         struct{ MatchLabels map[string]string } `json:"selector"`
				URI, Sha256, Bin string
			}
		}
	}
	require.NoError(t, yaml.UnmarshalStrict(raw, &m))
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", m.APIVersion)
	assert.Equal(t, "Plugin", m.Kind)
	assert.Equal(t, strings.TrimPrefix(pluginProgram, "kubectl-"), m.Metadata.Name)
	require.Len(t, m.Spec.Platforms, 4)
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		assert.True(t, strings.HasSuffix(p.URI, "/publisher_"+goos+"_"+arch+".tar.gz"), p.URI)
		assert.Equal(t, programName, p.Bin)
		assert.Len(t, p.Sha256, 64)
	}
}

// writeKubeconfig writes a kubeconfig whose context x (current) points at an address
// nothing listens on, with namespace (none when ""), and returns its path.
func writeKubeconfig(t *testing.T, namespace string) string {
	t.Helper()
	selection := "{cluster: c, user: u}"
	if namespace != "" {
		selection = "{cluster: c, user: u, namespace: " + namespace + "}"
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: `+selection+`}]
current-context: x
`), 0o600))
	return kubeconfig
}
