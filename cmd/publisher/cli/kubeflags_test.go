package cli

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The operator commands take kubectl's connection flags: the same names, shorthands and
// types as k8s.io/cli-runtime's ConfigFlags (which kubectl uses), less --cache-dir.
func TestKubeFlagsAreKubectls(t *testing.T) {
	type flag struct{ shorthand, kind string }
	set := func(add func(*pflag.FlagSet)) map[string]flag {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		add(fs)
		out := map[string]flag{}
		fs.VisitAll(func(f *pflag.Flag) { out[f.Name] = flag{f.Shorthand, f.Value.Type()} })
		return out
	}
	kubectl := genericclioptions.NewConfigFlags(false)
	kubectl.CacheDir = nil
	want := set(kubectl.AddFlags)
	require.Contains(t, want, "namespace")
	assert.Equal(t, want, set(newKubeFlags().AddFlags))
}

// Every flag reaches the client configuration as kubectl's does.
func TestKubeFlagsReachTheClientConfig(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "dev")
	args := []string{"--kubeconfig", kubeconfig, "--as", "alice", "--as-uid", "u1", "--as-group", "ops",
		"--as-user-extra", "scope=a", "--as-user-extra", "scope=b", "--as-user-extra", "malformed",
		"--request-timeout", "3s", "-s", "https://other:6443", "--tls-server-name", "api.internal",
		"--token", "t0k", "--insecure-skip-tls-verify", "--disable-compression", "-n", "prod"}
	ours := newKubeFlags()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	ours.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	got, err := ours.loader().ClientConfig()
	require.NoError(t, err)

	kubectl := genericclioptions.NewConfigFlags(false)
	kfs := pflag.NewFlagSet("k", pflag.ContinueOnError)
	kubectl.AddFlags(kfs)
	require.NoError(t, kfs.Parse(args))
	want, err := kubectl.ToRESTConfig()
	require.NoError(t, err)

	assert.Equal(t, want.Host, got.Host)
	assert.Equal(t, "https://other:6443", got.Host)
	assert.Equal(t, want.Impersonate, got.Impersonate)
	assert.Equal(t, map[string][]string{"scope": {"a", "b"}}, got.Impersonate.Extra)
	assert.Equal(t, want.Timeout, got.Timeout)
	assert.Equal(t, want.BearerToken, got.BearerToken)
	assert.Equal(t, want.TLSClientConfig.ServerName, got.TLSClientConfig.ServerName)
	assert.Equal(t, want.TLSClientConfig.Insecure, got.TLSClientConfig.Insecure)
	assert.True(t, got.TLSClientConfig.Insecure)
	assert.Equal(t, want.DisableCompression, got.DisableCompression)
	ns, _, err := ours.loader().Namespace()
	require.NoError(t, err)
	assert.Equal(t, "prod", ns)
}
