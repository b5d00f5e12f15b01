package cli

import (
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's connection flags, bound with client-go's clientcmd: --kubeconfig,
// --context, --cluster, --user, -n/--namespace, --as, --as-group, --as-uid, --as-user-extra,
// --request-timeout, -s/--server and the TLS, token, proxy and compression flags; not
// --cache-dir, as no discovery is done. They are what k8s.io/cli-runtime's ConfigFlags
// registers, without that module, which links kustomize and kubectl's printers (1.9 MB of
// the stripped binary, whose pages are resident in every publisher that runs it).
type kubeFlags struct {
	kubeconfig string
	userExtra  []string
	overrides  clientcmd.ConfigOverrides
}

// newKubeFlags returns unset connection flags: the kubeconfig's own selection.
func newKubeFlags() *kubeFlags {
	return &kubeFlags{overrides: clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults}}
}

// AddFlags registers the flags on fs.
func (k *kubeFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s"
	names.AuthOverrideFlags.Username.LongName = "" // kubectl has no basic authentication flags
	names.AuthOverrideFlags.Password.LongName = ""
	clientcmd.BindOverrideFlags(&k.overrides, fs, names)
	fs.StringArrayVar(&k.userExtra, "as-user-extra", nil,
		"User extras to impersonate for the operation, this flag can be repeated to specify multiple values for the same key.")
}

// namespace is -n as given ("" when not).
func (k *kubeFlags) namespace() string { return k.overrides.Context.Namespace }

// context is --context as given ("" when not).
func (k *kubeFlags) context() string { return k.overrides.CurrentContext }

// loader is the kubeconfig selection the flags make, loaded when first read; it never
// prompts.
func (k *kubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := k.overrides
	for _, extra := range k.userExtra {
		key, value, ok := strings.Cut(extra, "=")
		if !ok {
			continue
		}
		if overrides.AuthInfo.ImpersonateUserExtra == nil {
			overrides.AuthInfo.ImpersonateUserExtra = map[string][]string{}
		}
		overrides.AuthInfo.ImpersonateUserExtra[key] = append(overrides.AuthInfo.ImpersonateUserExtra[key], value)
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &overrides)
}

// KubeFlagNames are the names of the kubectl connection flags the operator commands take.
func KubeFlagNames() map[string]bool {
	fs := pflag.NewFlagSet("kube", pflag.ContinueOnError)
	newKubeFlags().AddFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}
