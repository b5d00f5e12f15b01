package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/homedir"

	"github.com/trafficmap/publisher/cmd/publisher/cli"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// Every committed generated page is what docgen renders now: a flag, metric, reason or
// value changed without `make docs` fails here, naming the stale file.
func TestGeneratedPagesAreCurrent(t *testing.T) {
	for _, p := range pages {
		t.Run(p.path, func(t *testing.T) {
			want, err := p.render(repoRoot)
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(p.path)))
			require.NoError(t, err, "%s is missing: run make docs", p.path)
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run make docs and commit the result\n%s", p.path, firstDiff(string(got), string(want)))
			}
		})
	}
}

// firstDiff names the first line where the committed page and the rendered one differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "first difference at line " + strconv.Itoa(i+1) + ":\n  committed: " + gl + "\n  generated: " + wl
		}
	}
	return ""
}

func TestPagesAreMarked(t *testing.T) {
	for _, p := range pages {
		b, err := p.render(repoRoot)
		require.NoError(t, err, p.path)
		s := string(b)
		assert.True(t, strings.HasPrefix(s, header), "%s starts with the generated-code header", p.path)
		assert.Contains(t, s, "`make docs`", p.path)
		for i, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "|") {
				assert.LessOrEqual(t, len(l), maxLine, "%s:%d: prose line over %d", p.path, i+1, maxLine)
			}
		}
	}
}

// Every flag of every visible command is on the flags page, with its type and default.
func TestFlagsPageHasEveryFlag(t *testing.T) {
	page, err := renderFlags(repoRoot)
	require.NoError(t, err)
	kube := cli.KubeFlagNames()
	for _, c := range commands(cli.NewRootCommand("publisher", nil, nil)) {
		own, _ := splitFlags(c.Flags(), kube)
		for _, f := range own {
			assert.Contains(t, string(page), "`--"+f.Name+"` | "+f.Value.Type()+" |", "%s --%s", c.CommandPath(), f.Name)
		}
	}
	assert.Contains(t, string(page), "| `--xds-address` | string | `:18000` |")
	assert.Contains(t, string(page), "| `-o`, `--output` | string | `table` |")
	assert.Contains(t, string(page), "| `--leader-election-namespace` | string |  |", "defaults from the environment read as unset")
}

func TestMetrics(t *testing.T) {
	ms, err := gatherMetrics()
	require.NoError(t, err)
	byName := map[string]metric{}
	for _, m := range ms {
		byName[m.name] = m
	}
	for name, want := range map[string]metric{
		"trafficmap_publisher_published_conditions_total": {typ: "counter", labels: []string{"status", "reason"}},
		"trafficmap_publisher_input_to_published_seconds": {typ: "histogram"},
		"trafficmap_publisher_maps_in_fallback":           {typ: "gauge", labels: []string{"reason"}},
		"trafficmap_publisher_xds_snapshot_info":          {typ: "gauge", labels: []string{"flavour", "type", "version"}},
		"trafficmap_publisher_xds_nacks_total":            {typ: "counter", labels: []string{"type"}},
		"go_*":                                            {typ: "various"},
		"process_*":                                       {typ: "various"},
	} {
		m, ok := byName[name]
		require.True(t, ok, name)
		assert.Equal(t, want.typ, m.typ, name)
		assert.Equal(t, want.labels, m.labels, name)
		assert.NotEmpty(t, m.help, name)
	}
}

func TestCommentText(t *testing.T) {
	tests := []struct {
		name     string
		comments []string
		want     string
	}{
		{"plain", []string{"# one\n# two"}, "one two"},
		{"line comment", []string{"", "# inline"}, "inline"},
		{"example", []string{"# rules, e.g.\n#   - domain: example.com\n#     namespaces: [prod]\n# Empty: any."},
			"rules, e.g. `- domain: example.com namespaces: [prod]` Empty: any."},
		{"indented prose", []string{"# modes:\n#   generate: Helm makes\n#     the CA."}, "modes: generate: Helm makes the CA."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, commentText(tc.comments...))
		})
	}
}

func TestChartValues(t *testing.T) {
	vals, err := chartValues(repoRoot)
	require.NoError(t, err)
	byPath := map[string]value{}
	for _, v := range vals {
		byPath[v.path] = v
	}
	assert.Equal(t, "standalone", byPath["mode"].def)
	assert.Contains(t, byPath["mode"].help, "sidecar")
	assert.Equal(t, `["httproute","xds"]`, byPath["publisher.sinks"].def)
	assert.Equal(t, `""`, byPath["publisher.gateway"].def)
	assert.Equal(t, "defaults to the chart's appVersion", byPath["image.tag"].help)
	assert.Contains(t, byPath["httpPort"].help, "/metrics", "a comment after a blank line belongs to the key below it")
}

func TestWrap(t *testing.T) {
	long := strings.Repeat("word ", 19) + "see [Install with Helm](../how-to/install-helm.md)."
	tests := []struct {
		name, in, want string
	}{
		{"short", "one two", "one two"},
		{"long", strings.Repeat("abcd ", 30), strings.TrimSpace(strings.Repeat("abcd ", 20)) + "\n" + strings.TrimSpace(strings.Repeat("abcd ", 10))},
		{"a link is never broken", long, strings.TrimSpace(strings.Repeat("word ", 19)) + " see\n[Install with Helm](../how-to/install-helm.md)."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, wrap(tc.in))
		})
	}
}

// A default read from the machine (the home directory) or an empty list does not make the
// page differ between machines.
func TestDefaultValue(t *testing.T) {
	home := homedir.HomeDir()
	require.NotEmpty(t, home)
	tests := []struct{ name, def, want string }{
		{"plain", ":8080", ":8080"},
		{"home directory", filepath.Join(home, ".kube", "cache"), "$HOME/.kube/cache"},
		{"empty list", "[]", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, defaultValue(&pflag.Flag{DefValue: tc.def}))
		})
	}
}
