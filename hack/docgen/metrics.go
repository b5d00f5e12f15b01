package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/trafficmap/publisher/publish"
)

// metric is one row of docs/reference/metrics.md.
type metric struct {
	name, typ, help string
	labels          []string
}

// collectorGauges are the types of the metrics of the xDS server's own collector
// (xds/metrics.go), which sends no sample before a client has been served: a Desc carries
// no type. A metric with neither a sample nor an entry here fails the generation.
var collectorGauges = map[string]string{
	"trafficmap_publisher_xds_resources":     "gauge",
	"trafficmap_publisher_xds_encoded_bytes": "gauge",
	"trafficmap_publisher_xds_snapshot_info": "gauge",
}

// standardPrefixes are the metric families of client_golang's Go and process collectors,
// which publish.NewRegistry adds: one row each, as which metrics they export depends on
// the Go version and the operating system.
var standardPrefixes = map[string]string{
	"go_":      "The Go runtime's metrics (client_golang's Go collector, default set): memory, garbage collection, goroutines, threads.",
	"process_": "The process's metrics (client_golang's process collector): CPU seconds, resident and virtual memory, open file descriptors, start time.",
}

// recorder is a prometheus.Registerer that keeps every collector registered through it.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

// Register implements prometheus.Registerer.
func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

// MustRegister implements prometheus.Registerer.
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// renderMetrics renders docs/reference/metrics.md from the registry a publisher with both
// sinks populates (publish.New, without contacting an API server).
func renderMetrics(string) ([]byte, error) {
	ms, err := gatherMetrics()
	if err != nil {
		return nil, err
	}
	d := newDoc("Metrics", "Every metric `publisher run` serves on /metrics of --http-address, from the registry "+
		"that publish.New populates with both sinks on (publish/metrics.go, publish/http.go, xds/metrics.go).")
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		labels := make([]string, len(m.labels))
		for i, l := range m.labels {
			labels[i] = code(l)
		}
		rows = append(rows, []string{code(m.name), m.typ, strings.Join(labels, ", "), m.help})
	}
	d.table([]string{"Name", "Type", "Labels", "Help"}, rows)
	return d.Bytes(), nil
}

// gatherMetrics builds a publisher on a registry and returns its metrics sorted by name.
func gatherMetrics() ([]metric, error) {
	reg := publish.NewRegistry()
	rec := &recorder{Registerer: reg}
	cfg := publish.Config{Gateway: types.NamespacedName{Namespace: "docs", Name: "gateway"},
		Sinks: []string{publish.SinkHTTPRoute, publish.SinkXDS}, XDSAddress: "127.0.0.1:0", Registerer: rec}
	if _, err := publish.New(cfg, &rest.Config{Host: "https://127.0.0.1:1"}, zap.NewNop()); err != nil {
		return nil, fmt.Errorf("build publisher: %w", err)
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	sampled := map[string]string{} // name -> type of the families with a sample
	byName := map[string]*metric{}
	for _, f := range families {
		sampled[f.GetName()] = strings.ToLower(f.GetType().String())
		if _, ok := standardPrefix(f.GetName()); ok {
			byName[f.GetName()] = &metric{name: f.GetName()}
		}
	}
	if err := describe(rec.collectors, sampled, byName); err != nil {
		return nil, err
	}
	return sortedMetrics(byName), nil
}

// describe adds to byName every metric the collectors describe (name, help and labels in
// their declared order), typed from its samples, else from its collector's Go type, else
// from collectorGauges.
func describe(cs []prometheus.Collector, sampled map[string]string, byName map[string]*metric) error {
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			m, err := parseDesc(desc)
			if err != nil {
				return err
			}
			if m.typ = sampled[m.name]; m.typ == "" {
				m.typ = vectorType(c)
			}
			if m.typ == "" {
				m.typ = collectorGauges[m.name]
			}
			if m.typ == "" {
				return fmt.Errorf("metric %s sends no sample and its type is unknown: add it to collectorGauges", m.name)
			}
			byName[m.name] = &m
		}
	}
	for name := range collectorGauges {
		if byName[name] == nil {
			return fmt.Errorf("collectorGauges names %s, which no collector describes", name)
		}
	}
	return nil
}

// vectorType is the metric type of a client_golang vector, "" for another collector. A
// single counter, gauge or histogram always sends a sample, so its type is sampled.
func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// descPattern matches prometheus.Desc.String(), the only view of a Desc's parts.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"),(?: unit: "[^"]*",)? constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}\}$`)

// parseDesc reads a Desc's name, help and variable labels.
func parseDesc(d *prometheus.Desc) (metric, error) {
	g := descPattern.FindStringSubmatch(d.String())
	if g == nil {
		return metric{}, fmt.Errorf("unexpected descriptor %s", d)
	}
	name, err := strconv.Unquote(g[1])
	if err != nil {
		return metric{}, fmt.Errorf("descriptor %s: %w", d, err)
	}
	help, err := strconv.Unquote(g[2])
	if err != nil {
		return metric{}, fmt.Errorf("descriptor %s: %w", d, err)
	}
	m := metric{name: name, help: help}
	if g[3] != "" {
		m.labels = strings.Split(g[3], ",")
	}
	return m, nil
}

// sortedMetrics returns the metrics sorted by name, the standard collectors' families
// folded into one row each.
func sortedMetrics(byName map[string]*metric) []metric {
	var out []metric
	folded := map[string]bool{}
	for name, m := range byName {
		prefix, ok := standardPrefix(name)
		if !ok {
			out = append(out, *m)
			continue
		}
		if !folded[prefix] {
			folded[prefix] = true
			out = append(out, metric{name: prefix + "*", typ: "various", help: standardPrefixes[prefix]})
		}
	}
	slices.SortFunc(out, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	return out
}

// standardPrefix returns the standard collector prefix of name, if it has one.
func standardPrefix(name string) (string, bool) {
	for p := range standardPrefixes {
		if strings.HasPrefix(name, p) {
			return p, true
		}
	}
	return "", false
}
