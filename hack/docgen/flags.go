package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/util/homedir"

	"github.com/trafficmap/publisher/cmd/publisher/cli"
)

// envDefaults are the environment variables some flag defaults are read from; the page
// shows the defaults with them unset, as the usage strings name them.
var envDefaults = []string{"POD_NAMESPACE", "POD_NAME", "KUBECACHEDIR"}

// renderFlags renders docs/reference/flags.md from the command tree of cmd/publisher.
func renderFlags(string) ([]byte, error) {
	for _, k := range envDefaults {
		if err := os.Unsetenv(k); err != nil {
			return nil, fmt.Errorf("unset %s: %w", k, err)
		}
	}
	root := cli.NewRootCommand("publisher", io.Discard, io.Discard)
	kube := cli.KubeFlagNames()
	d := newDoc("Command-line flags", "Every flag of every `publisher` command, from the commands' flag sets "+
		"(package cmd/publisher/cli).")
	d.para("The operator commands also take kubectl's connection flags; they are listed once, at the end.",
		"A flag whose type is `stringArray` is repeatable.")
	cmds := commands(root)
	for _, c := range cmds {
		own, hasKube := splitFlags(c.Flags(), kube)
		d.WriteString("\n## " + c.CommandPath() + "\n")
		d.para(fmt.Sprintf("`%s`", strings.TrimSpace(c.Parent().CommandPath()+" "+c.Use)), "", c.Short+".")
		if len(own) > 0 {
			d.table([]string{"Flag", "Type", "Default", "Description"}, flagRows(own))
		}
		if hasKube {
			d.para("Also the [kubectl connection flags](#kubectl-connection-flags).")
		}
	}
	if k := kubeCommandFlags(cmds, kube); len(k) > 0 {
		d.WriteString("\n## kubectl connection flags\n")
		d.para("As kubectl has them (bound with client-go's clientcmd); every operator command above that names them takes them.")
		d.table([]string{"Flag", "Type", "Default", "Description"}, flagRows(k))
	}
	return d.Bytes(), nil
}

// commands returns the commands under root that are shown, sorted by path.
func commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Deprecated != "" {
				continue
			}
			out = append(out, sub)
			walk(sub)
		}
	}
	walk(root)
	slices.SortFunc(out, func(a, b *cobra.Command) int { return strings.Compare(a.CommandPath(), b.CommandPath()) })
	return out
}

// splitFlags returns the visible flags of fs that are not kubectl connection flags, sorted
// by name, and whether fs has connection flags.
func splitFlags(fs *pflag.FlagSet, kube map[string]bool) (own []*pflag.Flag, hasKube bool) {
	fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Hidden:
		case kube[f.Name]:
			hasKube = true
		default:
			own = append(own, f)
		}
	})
	slices.SortFunc(own, func(a, b *pflag.Flag) int { return strings.Compare(a.Name, b.Name) })
	return own, hasKube
}

// kubeCommandFlags returns the connection flags the commands have, one of each name, sorted.
func kubeCommandFlags(cmds []*cobra.Command, kube map[string]bool) []*pflag.Flag {
	seen := map[string]*pflag.Flag{}
	for _, c := range cmds {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if kube[f.Name] && !f.Hidden && seen[f.Name] == nil {
				seen[f.Name] = f
			}
		})
	}
	var out []*pflag.Flag
	for _, f := range seen {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *pflag.Flag) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// flagRows renders flags as table rows: flag and shorthand, type, default, usage.
func flagRows(flags []*pflag.Flag) [][]string {
	rows := make([][]string, 0, len(flags))
	for _, f := range flags {
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		rows = append(rows, []string{name, f.Value.Type(), code(defaultValue(f)), f.Usage})
	}
	return rows
}

// defaultValue is f's default as the page shows it: the user's home directory reads
// $HOME, and empty lists and zero values of types without a natural zero read as nothing.
func defaultValue(f *pflag.Flag) string {
	v := f.DefValue
	if home := homedir.HomeDir(); home != "" && strings.HasPrefix(v, home+string(os.PathSeparator)) {
		v = "$HOME" + strings.TrimPrefix(v, home)
	}
	if v == "[]" {
		return ""
	}
	return v
}
