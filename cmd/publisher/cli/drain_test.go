package cli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Invalid input is refused in OME's order, before any API client exists, with exactly one
// line on stderr and nothing on stdout.
func TestActionRefusalsBeforeAnyAPIUse(t *testing.T) {
	seed := []string{"chat", "-n", "prod", "--workload-cluster", "worker-a", "--id", "maintenance-a", "--reason", "planned maintenance",
		"--kubeconfig", "/nonexistent/kubeconfig"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"drain", "chat", "--nope"}, "invalid traffic action flags: unknown flag: --nope; use --help"},
		{"bad bool", []string{"drain", "chat", "--yes=maybe"}, `invalid traffic action flags: invalid argument "maybe" for "--yes" flag: strconv.ParseBool: parsing "maybe": invalid syntax; use --help`},
		{"undrain has no --workload-cluster", []string{"undrain", "chat", "--id", "m", "--workload-cluster", "worker-a"}, "invalid traffic action flags: unknown flag: --workload-cluster; use --help"},
		{"undrain has no --reason", []string{"undrain", "chat", "--id", "m", "--reason", "x"}, "invalid traffic action flags: unknown flag: --reason; use --help"},
		{"no service", []string{"drain", "--id", "m"}, "exactly one inference service is required"},
		{"two services", []string{"undrain", "a", "b", "--id", "m"}, "exactly one inference service is required"},
		{"bad output", append([]string{"drain", "-o", "xml"}, seed...), "output must be table, wide, json or yaml"},
		{"bad dry-run", append([]string{"drain", "--dry-run=true"}, seed...), "dry-run must be none, client or server"},
		{"bad name", []string{"drain", "Chat!", "--id", "m"}, "invalid inference service name"},
		{"--cluster is not the workload cluster", []string{"drain", "chat", "--cluster", "worker-a", "--id", "m", "--reason", "r"},
			"traffic drain requires --workload-cluster; --cluster selects the Kubernetes API cluster"},
		{"bad id", []string{"drain", "chat", "--workload-cluster", "worker-a", "--id", "M", "--reason", "r"}, "traffic override ID must be a DNS-1123 label"},
		{"bad cluster", []string{"drain", "chat", "--workload-cluster", "Worker_A", "--id", "m", "--reason", "r"}, "traffic drain cluster must be a DNS-1123 subdomain"},
		{"bad reason", []string{"drain", "chat", "--workload-cluster", "worker-a", "--id", "m", "--reason", "two\nlines"},
			"traffic drain reason must be bounded, trimmed, printable, and non-secret"},
		{"bad namespace", []string{"drain", "chat", "-n", "Prod", "--workload-cluster", "worker-a", "--id", "m", "--reason", "r"}, "resolved workload namespace is invalid"},
		{"missing context", append([]string{"drain", "--context", "nope"}, seed...), "selected kubeconfig context is unavailable or unsafe"},
		{"bad --wait", append([]string{"drain", "--wait=soon"}, seed...), `invalid traffic action flags: invalid argument "soon" for "--wait" flag: must be a positive duration; use --help`},
		{"negative --wait", append([]string{"drain", "--wait=-1s"}, seed...), `invalid traffic action flags: invalid argument "-1s" for "--wait" flag: must be a positive duration; use --help`},
		{"--wait with a dry run", append([]string{"drain", "--wait", "--dry-run=client"}, seed...), "--wait waits for an applied change; a dry run applies none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runMain(context.Background(), tc.args, &stdout, &stderr)
			assert.Equal(t, exitFailure, code)
			assert.Empty(t, stdout.String())
			assert.Equal(t, "error: "+tc.want+"\n", stderr.String())
		})
	}
}

func TestActionAndStatusHelp(t *testing.T) {
	for _, cmd := range []string{"drain", "undrain", "status"} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitOK, runMain(context.Background(), []string{cmd, "-h"}, &stdout, &stderr))
		assert.Contains(t, stdout.String(), "Usage:")
		assert.Empty(t, stderr.String())
	}
	var stdout bytes.Buffer
	runMain(context.Background(), []string{"drain", "--help"}, &stdout, &bytes.Buffer{})
	assert.Contains(t, stdout.String(), "45-second deadline")
	assert.Contains(t, stdout.String(), "10 seconds")
	assert.Contains(t, stdout.String(), "not\nTrafficMap convergence")
}

func TestStatusUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "exactly one inference service is required, or --workload-cluster"},
		{[]string{"status", "chat", "--workload-cluster", "worker-a"}, "--workload-cluster lists services; do not name one"},
		{[]string{"status", "chat", "-A"}, "-A needs --workload-cluster"},
		{[]string{"status", "chat", "-o", "wide"}, "output must be table, json or yaml"},
		{[]string{"status", "chat", "--gateway", "global"}, `--gateway "global": must be NAMESPACE/NAME`},
		{[]string{"status", "--workload-cluster", "worker-a", "--publisher-url", "http://127.0.0.1:8080"},
			"--publisher-url shows the xds clients of one service's status; it does not apply to --workload-cluster"},
		{[]string{"status", "--workload-cluster", "worker-a", "--check"}, "--check checks one service's status; it does not apply to --workload-cluster"},
		{[]string{"status", "chat", "--publisher-url", "127.0.0.1:8080"}, `--publisher-url "127.0.0.1:8080": must be http://HOST:PORT or https://HOST:PORT`},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitFailure, runMain(context.Background(), tc.args, &stdout, &stderr), tc.args)
		assert.Equal(t, "error: "+tc.want+"\n", stderr.String())
	}
}

func TestWaitFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want waitFlag
	}{
		{nil, waitFlag{}},
		{[]string{"--wait"}, waitFlag{set: true, d: defaultWait}},
		{[]string{"--wait=90s"}, waitFlag{set: true, d: 90 * time.Second}},
		{[]string{"--wait=2m", "--wait=false"}, waitFlag{}},
	} {
		var w waitFlag
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.Var(&w, "wait", "")
		fs.Lookup("wait").NoOptDefVal = "true"
		require.NoError(t, fs.Parse(tc.args), tc.args)
		assert.Equal(t, tc.want, w, tc.args)
	}
	var w waitFlag
	for _, bad := range []string{"0s", "-1m", "soon", ""} {
		assert.Error(t, w.Set(bad), bad)
	}
}
