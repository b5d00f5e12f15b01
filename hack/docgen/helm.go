package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// value is one row of the Helm values table.
type value struct {
	path, def, help string
}

// chartDir is the publisher's chart, relative to the repository root.
const chartDir = "charts/publisher"

// renderHelmValues renders docs/reference/helm-values.md from the chart's values.yaml.
func renderHelmValues(root string) ([]byte, error) {
	vals, err := chartValues(root)
	if err != nil {
		return nil, err
	}
	d := newDoc("Helm values", "Every value of the chart charts/publisher, with its default and the comment above "+
		"it in charts/publisher/values.yaml.")
	d.para("Set them with `--set key=value` or a values file; how to install: " +
		"[Install with Helm](../how-to/install-helm.md).")
	valuesTable(d, vals)
	return d.Bytes(), nil
}

// renderChartReadme renders charts/publisher/README.md: the chart's description, its
// install lines and the values table.
func renderChartReadme(root string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(root, chartDir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("read chart: %w", err)
	}
	var chart struct{ Name, Description, Version, AppVersion string }
	if err := sigsyaml.Unmarshal(raw, &chart); err != nil {
		return nil, fmt.Errorf("parse Chart.yaml: %w", err)
	}
	vals, err := chartValues(root)
	if err != nil {
		return nil, err
	}
	d := newDoc("Helm chart "+chart.Name, "The chart's README, from Chart.yaml and the comments of values.yaml.")
	d.para(strings.TrimSpace(chart.Description), "", fmt.Sprintf("Chart version %s, app version %s.", chart.Version, chart.AppVersion))
	d.WriteString("\n## Install\n")
	d.para("Standalone, serving xDS to a fleet of Envoys and writing HTTPRoutes for `prod/global`:", "",
		"```sh",
		"helm install publisher charts/publisher --namespace publisher \\",
		"  --set publisher.gateway=prod/global --set 'publisher.namespaces={prod}'",
		"```", "",
		"Sidecar, giving a gateway chart the ServiceAccount, the RBAC and the container template",
		"(`trafficmap-publisher.container`):", "",
		"```sh",
		"helm install publisher charts/publisher --namespace edge \\",
		"  --set mode=sidecar --set publisher.gateway=prod/global --set xds.bindAddress=127.0.0.1",
		"```", "",
		"On a cluster without OME, add `--set crds.install=true`. Both modes, upgrades and uninstalling:",
		"[Install with Helm](../../docs/how-to/install-helm.md),",
		"[Upgrade and uninstall](../../docs/how-to/upgrade-uninstall.md).")
	d.WriteString("\n## Values\n")
	valuesTable(d, vals)
	return d.Bytes(), nil
}

// valuesTable writes the values as a table.
func valuesTable(d *doc, vals []value) {
	rows := make([][]string, 0, len(vals))
	for _, v := range vals {
		rows = append(rows, []string{code(v.path), code(v.def), v.help})
	}
	d.table([]string{"Key", "Default", "Description"}, rows)
}

// chartValues reads the chart's values.yaml and returns its keys sorted by path.
func chartValues(root string) ([]value, error) {
	raw, err := os.ReadFile(filepath.Join(root, chartDir, "values.yaml"))
	if err != nil {
		return nil, fmt.Errorf("read values: %w", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("parse values.yaml: %w", err)
	}
	if n.Kind != yaml.DocumentNode || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a mapping")
	}
	var out []value
	if err := walkValues(n.Content[0], "", &out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b value) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// walkValues adds the keys of mapping m under prefix: a row for every leaf (a scalar, a
// sequence or an empty mapping) and for every non-empty mapping that has a comment.
func walkValues(m *yaml.Node, prefix string, out *[]value) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		path := prefix + key.Value
		help := commentText(key.HeadComment, key.LineComment, val.LineComment)
		if val.Kind == yaml.MappingNode && len(val.Content) > 0 {
			if help != "" {
				*out = append(*out, value{path: path, help: help})
			}
			if err := walkValues(val, path+".", out); err != nil {
				return err
			}
			continue
		}
		def, err := defaultOf(val)
		if err != nil {
			return fmt.Errorf("values.yaml %s: %w", path, err)
		}
		*out = append(*out, value{path: path, def: def, help: help})
	}
	return nil
}

// defaultOf renders a leaf's default: a scalar as written ("" for an empty string), a
// sequence or a mapping as JSON.
func defaultOf(v *yaml.Node) (string, error) {
	if v.Kind == yaml.ScalarNode {
		if v.Tag == "!!str" && v.Value == "" {
			return `""`, nil
		}
		if v.Tag == "!!null" {
			return "null", nil
		}
		return v.Value, nil
	}
	var x any
	if err := v.Decode(&x); err != nil {
		return "", fmt.Errorf("decode: %w", err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	return string(b), nil
}

// commentText turns YAML comments into one line of Markdown: the "#" markers go, and
// indented example lines starting with "- " (a list item and its deeper lines) become
// inline code.
func commentText(comments ...string) string {
	var words []string
	var example []string
	exampleIndent := -1
	flush := func() {
		if len(example) > 0 {
			words = append(words, code(strings.Join(example, " ")))
			example = nil
		}
		exampleIndent = -1
	}
	for _, c := range comments {
		for _, line := range strings.Split(c, "\n") {
			text := strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
			trimmed := strings.TrimSpace(text)
			indent := len(text) - len(strings.TrimLeft(text, " "))
			switch {
			case trimmed == "":
				flush()
			case indent >= 2 && strings.HasPrefix(trimmed, "- "):
				flush()
				example, exampleIndent = []string{trimmed}, indent
			case exampleIndent >= 0 && indent > exampleIndent:
				example = append(example, trimmed)
			default:
				flush()
				words = append(words, trimmed)
			}
		}
	}
	flush()
	return strings.Join(words, " ")
}
