package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/xds/xdstest"
)

// metricName finds the publisher's metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\btrafficmap_publisher_[a-z0-9_]+`)

// labelRefs finds the label names an expression groups by or matches on.
var (
	byClause = regexp.MustCompile(`\bby \(([^)]*)\)`)
	matcher  = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
)

// Every metric name the chart's alert expressions and dashboard queries use is one a running
// publisher exports on /metrics, with the labels they group by and match on: the test
// renders the chart with both on, runs a publisher with both sinks, makes it reconcile,
// publish, write routes and count an xDS ACK and a NACK (so the vectors have series), and
// scrapes it.
func TestMonitoringMetricsAreExported(t *testing.T) {
	exprs := chartMonitoringExprs(t)
	require.GreaterOrEqual(t, len(exprs), 10, "alerts and dashboard queries")

	f := newFixture(t)
	f.createMap(seedEntries())
	pub := f.startPublisher(bothSinks)
	f.waitPublishedWith("no xds client is connected")

	// One ADS stream: ACK the clusters, NACK the listeners.
	stream, err := adsClient(t, pub).StreamAggregatedResources(context.Background())
	require.NoError(t, err)
	in := xdstest.Stream(stream.Recv)
	node := &corev3.Node{Id: "envoy-metrics", UserAgentName: "envoy"}
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
	clusters, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType,
		VersionInfo: clusters.GetVersionInfo(), ResponseNonce: clusters.GetNonce()}))
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}))
	listeners, ok := xdstest.Next(in, waitTimeout)
	require.True(t, ok)
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType,
		ResponseNonce: listeners.GetNonce(), ErrorDetail: &rpcstatus.Status{Message: "listener refused for the test"}}))

	var samples map[string][]map[string]bool // metric name -> label sets of its samples
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		samples = scrape(get(t, pub, "/metrics"))
		for _, name := range []string{"trafficmap_publisher_xds_acks_total", "trafficmap_publisher_xds_nacks_total",
			"trafficmap_publisher_input_to_sink_confirmed_seconds_bucket", "trafficmap_publisher_reconciles_total"} {
			assert.Contains(c, samples, name)
		}
	}, waitTimeout, tick)

	for _, expr := range exprs {
		names := metricName.FindAllString(expr, -1)
		require.NotEmpty(t, names, expr)
		labels := map[string]bool{}
		for _, name := range names {
			sets, ok := samples[name]
			if !assert.True(t, ok, "%s is not exported; used in %s", name, expr) {
				continue
			}
			for _, set := range sets {
				for l := range set {
					labels[l] = true
				}
			}
		}
		for _, used := range labelsUsed(expr) {
			if used == "job" { // Prometheus's, from the scrape configuration
				continue
			}
			assert.True(t, labels[used], "label %q of %s is not exported", used, expr)
		}
	}
}

// scrape parses the text exposition format: per sample name, the label names of each sample.
func scrape(text string) map[string][]map[string]bool {
	out := map[string][]map[string]bool{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		labels := map[string]bool{}
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			body, _, _ := strings.Cut(line[i+1:], "}")
			for _, m := range regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`).FindAllStringSubmatch(body, -1) {
				labels[m[1]] = true
			}
		}
		out[name] = append(out[name], labels)
	}
	return out
}

// labelsUsed returns the label names expr groups by or matches on, sorted.
func labelsUsed(expr string) []string {
	var out []string
	for _, m := range byClause.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// chartMonitoringExprs renders the chart with the Grafana dashboard and the PrometheusRule
// on and returns every alert expression and dashboard query.
func chartMonitoringExprs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command(helmBinary(t), "template", "tm", filepath.Join(repoRoot(), "charts", "publisher"), "--namespace", "publisher",
		"--set", "publisher.gateway=prod/global", "--set", "grafanaDashboard.enabled=true",
		"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.minXDSClients=1",
		"--show-only", "templates/grafana-dashboard.yaml", "--show-only", "templates/prometheusrule.yaml")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	require.NoError(t, err, string(out))
	var exprs []string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj struct {
			Kind string
			Data map[string]string
			Spec struct {
				Groups []struct {
					Rules []struct{ Alert, Expr string }
				}
			}
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		switch obj.Kind {
		case "PrometheusRule":
			for _, g := range obj.Spec.Groups {
				for _, r := range g.Rules {
					exprs = append(exprs, r.Expr)
				}
			}
		case "ConfigMap":
			var dash struct {
				Panels []struct{ Targets []struct{ Expr string } }
			}
			require.NoError(t, json.Unmarshal([]byte(obj.Data["trafficmap-publisher.json"]), &dash))
			for _, p := range dash.Panels {
				for _, target := range p.Targets {
					exprs = append(exprs, target.Expr)
				}
			}
		}
	}
	return exprs
}
