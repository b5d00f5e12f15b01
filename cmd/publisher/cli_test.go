package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
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
		{"run with bad flag", []string{"run", "--gatewy", "x"}, exitUsage, "flag provided but not defined: -gatewy"},
		{"run with bad policy", []string{"run", "--gateway", "prod/global", "--no-positive-policy", "Keep"}, exitUsage, "must be ApplyCurrent or RetainLastPositive"},
		{"run with bad log format", []string{"run", "--gateway", "prod/global", "--log-format", "xml"}, exitUsage, `--log-format "xml": must be json or console`},
		{"run with stray argument", []string{"run", "--gateway", "g", "extra"}, exitUsage, "unexpected arguments: extra"},
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

func TestFlagsToConfig(t *testing.T) {
	var stderr bytes.Buffer
	f, _, err := parseRunFlags([]string{"--gateway", "infra/edge", "--namespace", "prod, staging", "--require-route-accepted=false",
		"--no-positive-policy", "RetainLastPositive", "--host-template", "{{.Service}}.example.com"}, &stderr)
	assert.NoError(t, err)
	cfg := f.config()
	assert.Equal(t, types.NamespacedName{Namespace: "infra", Name: "edge"}, cfg.Gateway)
	assert.Equal(t, []string{"prod", "staging"}, cfg.Namespaces)
	assert.False(t, cfg.RequireRouteAccepted)
	assert.Equal(t, "RetainLastPositive", string(cfg.NoPositivePolicy))

	f, _, _ = parseRunFlags([]string{"--gateway", "global"}, &stderr)
	assert.Equal(t, types.NamespacedName{Name: "global"}, f.config().Gateway)
	assert.True(t, f.config().RequireRouteAccepted, "acceptance is required by default")
}

// Leader-election durations client-go refuses stop `run` at start-up with exit code 2,
// before anything contacts the API server or listens.
func TestRunRefusesLeaderElectionClientGoRefuses(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), []string{"run", "--gateway", "prod/global", "--kubeconfig", kubeconfig, "--http-address", "",
		"--leader-elect", "--leader-election-namespace", "ops", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "2s"},
		&stdout, &stderr)
	assert.Equal(t, exitUsage, code, stderr.String())
	assert.Contains(t, stderr.String(), "invalid configuration: leader election")
}
