// Package charts tests the Helm chart with a real helm (built from the Go module proxy by
// hack/helm.sh and cached): lint, golden renderings of both modes, and the CRDs it renders.
package charts

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/integration/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden renderings in testdata/")

// helm returns the helm binary: $HELM when set, else the project's build script's.
func helm(t *testing.T) string {
	t.Helper()
	path, err := testenv.Helm()
	require.NoError(t, err)
	return path
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

var cases = map[string][]string{
	"standalone": {"--set", "publisher.gateway=prod/global"},
	"standalone-namespaced": {"--set", "publisher.gateway=global", "--set", "publisher.namespaces={prod,staging}",
		"--set", "publisher.hostnameEntitlements[0].domain=example.com", "--set", "publisher.hostnameEntitlements[0].namespaces={prod,staging}",
		"--set", "publisher.publisherName=edge", "--set", "publisher.takeOverFrom=gatewayapi",
		"--set", "xds.tls.secretName=publisher-xds-tls", "--set", "xds.tls.clientCA=true",
		"--set", "podDisruptionBudget.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "replicas=2",
		"--set", "leaderElection.enabled=true"},
	"sidecar":  {"--set", "mode=sidecar", "--set", "publisher.gateway=prod/global", "--set", "xds.bindAddress=127.0.0.1"},
	"xds-only": {"--set", "publisher.sinks={xds}"},
	// Dashboards and alerts on: the Grafana dashboard ConfigMap and the PrometheusRule.
	"monitoring": {"--set", "publisher.gateway=prod/global", "--set", "serviceMonitor.enabled=true",
		"--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.annotations.grafana_folder=Networking",
		"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.minXDSClients=2", "--set", "prometheusRule.labels.release=prometheus"},
	// In sidecar mode the alerts select no job unless told to.
	"sidecar-monitoring": {"--set", "mode=sidecar", "--set", "publisher.gateway=prod/global",
		"--set", "grafanaDashboard.enabled=true", "--set", "prometheusRule.enabled=true"},
}

// installCRDs renders the standalone case with the TrafficMap CRD. It has no golden file:
// TestTrafficMapCRDMatchesGenerated compares the CRD with config/crd instead.
var installCRDs = []string{"--set", "publisher.gateway=prod/global", "--set", "crds.install=true"}

func TestLint(t *testing.T) {
	all := map[string][]string{"crds.install": installCRDs}
	for name, args := range cases {
		all[name] = args
	}
	for name, args := range all {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"lint", "--strict", "publisher"}, args...)...)
			require.NoError(t, err, out)
			assert.Contains(t, out, "0 chart(s) failed")
		})
	}
}

// generatedPEM matches the certificates and keys Helm generates anew at each rendering (the
// xDS CA and the certificates it signs), which golden files hold as "<generated>".
var generatedPEM = regexp.MustCompile(`(?m)^(  (?:tls\.crt|tls\.key|ca\.crt|ca\.key): )[A-Za-z0-9+/=]{64,}$`)

// TestTemplateGolden renders each case and compares it with testdata/<case>.yaml.
func TestTemplateGolden(t *testing.T) {
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"template", "tm", "publisher", "--namespace", "publisher"}, args...)...)
			require.NoError(t, err, out)
			out = generatedPEM.ReplaceAllString(out, "${1}<generated>")
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden file; run go test ./charts/ -update")
			assert.Equal(t, string(want), out)
		})
	}
}

// The standalone Deployment runs non-root on a read-only root filesystem with every
// capability dropped, seccomp RuntimeDefault and resource requests.
func TestSecureDefaults(t *testing.T) {
	out, err := runHelm(t, "template", "tm", "publisher", "--namespace", "publisher", "--show-only", "templates/deployment.yaml",
		"--set", "publisher.gateway=prod/global")
	require.NoError(t, err, out)
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot   bool `json:"runAsNonRoot"`
						SeccompProfile struct{ Type string }
					} `json:"securityContext"`
					Containers []struct {
						Args            []string
						SecurityContext struct {
							ReadOnlyRootFilesystem   bool `json:"readOnlyRootFilesystem"`
							AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation"`
							Capabilities             struct{ Drop []string }
						} `json:"securityContext"`
						Resources struct{ Requests map[string]string }
					}
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &d))
	pod := d.Spec.Template.Spec
	assert.True(t, pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, "RuntimeDefault", pod.SecurityContext.SeccompProfile.Type)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.True(t, c.SecurityContext.ReadOnlyRootFilesystem)
	assert.False(t, c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, []string{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.NotEmpty(t, c.Resources.Requests["cpu"])
	assert.NotEmpty(t, c.Resources.Requests["memory"])
	assert.Contains(t, c.Args, "--gateway=prod/global")
}

func TestReplicasNeedLeaderElection(t *testing.T) {
	out, err := runHelm(t, "template", "tm", "publisher", "--set", "publisher.gateway=g", "--set", "replicas=2", "--set", "leaderElection.enabled=false")
	require.Error(t, err)
	assert.Contains(t, out, "replicas > 1 needs leaderElection.enabled")
}

func TestUnknownModeFails(t *testing.T) {
	out, err := runHelm(t, "template", "tm", "publisher", "--set", "mode=daemon")
	require.Error(t, err)
	assert.Contains(t, out, `mode "daemon": must be standalone or sidecar`)
}

// In sidecar mode a gateway chart that has this chart as a subchart includes the container
// template into its own pod: the publisher then serves xDS on loopback to the Envoy next to it.
func TestSidecarIncludedByAGatewayChart(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "charts", "trafficmap-publisher"), os.DirFS("publisher")))
	files := map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: gateway\nversion: 0.1.0\ndependencies:\n  - name: trafficmap-publisher\n    version: 0.1.0\n",
		"values.yaml": "trafficmap-publisher:\n  mode: sidecar\n  publisher:\n    gateway: prod/global\n  xds:\n    bindAddress: 127.0.0.1\n",
		"templates/gateway.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: gateway
spec:
  selector:
    matchLabels: {app: gateway}
  template:
    metadata:
      labels: {app: gateway}
    spec:
      serviceAccountName: {{ include "trafficmap-publisher.serviceAccountName" (index .Subcharts "trafficmap-publisher") }}
      containers:
        - name: envoy
          image: envoy
        - {{- include "trafficmap-publisher.container" (index .Subcharts "trafficmap-publisher") | nindent 10 }}
      volumes:
        {{- include "trafficmap-publisher.volumes" (index .Subcharts "trafficmap-publisher") | nindent 8 }}
`,
	}
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	out, err := runHelm(t, "template", "gw", dir, "--namespace", "edge")
	require.NoError(t, err, out)
	var docs []map[string]any
	for _, doc := range strings.Split(out, "\n---\n") {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &m))
		if m != nil {
			docs = append(docs, m)
		}
	}
	kinds := map[string]int{}
	var pod map[string]any
	for _, d := range docs {
		kinds[d["kind"].(string)]++
		if d["kind"] == "Deployment" {
			pod = d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		}
	}
	assert.Equal(t, 1, kinds["Deployment"], "only the gateway's own Deployment: sidecar mode renders none")
	assert.Equal(t, 1, kinds["ServiceAccount"])
	require.NotNil(t, pod)
	assert.Equal(t, "gw-trafficmap-publisher", pod["serviceAccountName"])
	containers := pod["containers"].([]any)
	require.Len(t, containers, 2)
	publisher := containers[1].(map[string]any)
	assert.Equal(t, "publisher", publisher["name"])
	assert.Contains(t, publisher["args"], "--xds-address=127.0.0.1:18000", "xDS on loopback for the Envoy in the same pod")
	assert.Contains(t, publisher["args"], "--gateway=prod/global")
	assert.Contains(t, publisher["args"], "--xds-client-ca=/etc/publisher/xds-tls/ca.crt", "mutual TLS in sidecar mode too")
	volumes := pod["volumes"].([]any)
	require.Len(t, volumes, 1, "the gateway's pod mounts the publisher's xDS TLS Secret")
	assert.Equal(t, "gw-trafficmap-publisher-xds-tls", volumes[0].(map[string]any)["secret"].(map[string]any)["secretName"])
}

// renderDocs renders the chart with helm template and returns its documents.
func renderDocs(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "tm", "publisher", "--namespace", "publisher"}, args...)...)
	require.NoError(t, err, out)
	var docs []map[string]any
	for _, doc := range strings.Split(out, "\n---\n") {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &m))
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

// crdNames returns the names of the CustomResourceDefinitions among docs.
func crdNames(docs []map[string]any) []string {
	var names []string
	for _, d := range docs {
		if d["kind"] == "CustomResourceDefinition" {
			names = append(names, d["metadata"].(map[string]any)["name"].(string))
		}
	}
	return names
}

// The chart never renders the stand-in InferenceService CRD (OME owns it), not even with
// --include-crds, and renders the TrafficMap CRD only with crds.install=true.
func TestCRDs(t *testing.T) {
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Empty(t, crdNames(renderDocs(t, append(args, "--include-crds")...)), "no CRD by default")
			assert.Empty(t, crdNames(renderDocs(t, append(args, "--include-crds", "--set", "crds.install=false")...)))
		})
	}
	t.Run("install", func(t *testing.T) {
		docs := renderDocs(t, append(installCRDs, "--include-crds")...)
		assert.Equal(t, []string{"trafficmaps.ome.io"}, crdNames(docs), "the TrafficMap CRD only, never an InferenceService CRD")
	})
}

// With crds.install=true the chart renders config/crd/ome.io_trafficmaps.yaml (what
// hack/generate.sh writes and the tests install) with only helm.sh/resource-policy: keep
// added, so helm uninstall leaves the CRD and every TrafficMap in place.
func TestTrafficMapCRDMatchesGenerated(t *testing.T) {
	var rendered map[string]any
	for _, d := range renderDocs(t, installCRDs...) {
		if d["kind"] == "CustomResourceDefinition" {
			rendered = d
		}
	}
	require.NotNil(t, rendered, "crds.install=true renders the TrafficMap CRD")
	annotations := rendered["metadata"].(map[string]any)["annotations"].(map[string]any)
	assert.Equal(t, "keep", annotations["helm.sh/resource-policy"])
	delete(annotations, "helm.sh/resource-policy")

	data, err := os.ReadFile(filepath.Join("..", "config", "crd", "ome.io_trafficmaps.yaml"))
	require.NoError(t, err)
	var generated map[string]any
	require.NoError(t, yaml.Unmarshal(data, &generated))
	assert.Equal(t, generated, rendered, "the chart's template is out of date: run make generate")
}

// With grafanaDashboard and prometheusRule on, the chart renders the dashboard file as is
// in a ConfigMap the Grafana sidecar picks up (grafana_dashboard: "1"), with the panels the
// operator needs, and a PrometheusRule with every alert; minXDSClients 0 leaves out the xDS
// client alert, noLeaderFor "" the no-leader one and fallbackFor "" the fallback one. TestMonitoringMetricsAreExported (integration) checks the metric names.
func TestDashboardAndAlerts(t *testing.T) {
	out, err := runHelm(t, "template", "tm", "publisher", "--namespace", "publisher", "--set", "publisher.gateway=prod/global",
		"--set", "grafanaDashboard.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.minXDSClients=3",
		"--show-only", "templates/grafana-dashboard.yaml", "--show-only", "templates/prometheusrule.yaml")
	require.NoError(t, err, out)
	byKind := map[string]string{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct{ Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		byKind[meta.Kind] = doc
	}
	require.Len(t, byKind, 2)

	var cm struct {
		Metadata struct{ Labels map[string]string }
		Data     map[string]string
	}
	require.NoError(t, yaml.Unmarshal([]byte(byKind["ConfigMap"]), &cm))
	assert.Equal(t, "1", cm.Metadata.Labels["grafana_dashboard"])
	file, err := os.ReadFile(filepath.Join("publisher", "dashboards", "trafficmap-publisher.json"))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(file)), cm.Data["trafficmap-publisher.json"], "the file, not templated")
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(file, &dash))
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		assert.NotEmpty(t, p.Targets, p.Title)
	}
	assert.Equal(t, []string{"Published conditions by reason", "Input to Published latency per sink", "xDS clients",
		"xDS ACKs and NACKs", "Reconciles and reconcile errors", "Route writes", "Maps ramping and not published",
		"Maps in fallback by reason"}, titles)

	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert, Expr string
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(byKind["PrometheusRule"]), &rule))
	require.Len(t, rule.Spec.Groups, 1)
	alerts := map[string]string{}
	for _, r := range rule.Spec.Groups[0].Rules {
		alerts[r.Alert] = r.Expr
	}
	assert.ElementsMatch(t, []string{"TrafficMapNotPublished", "TrafficMapInFallback", "TrafficMapPublisherXDSNacks", "TrafficMapPublisherInvalidSnapshots",
		"TrafficMapPublisherTooFewXDSClients", "TrafficMapPublisherReconcileErrors", "TrafficMapPublisherNoLeader"}, keys(alerts))
	assert.Equal(t, `(sum(trafficmap_publisher_xds_clients{job="tm-trafficmap-publisher"}) or vector(0)) < 3`, alerts["TrafficMapPublisherTooFewXDSClients"])
	assert.Equal(t, `max by (reason) (trafficmap_publisher_maps_in_fallback{job="tm-trafficmap-publisher"}) > 0`, alerts["TrafficMapInFallback"])

	out, err = runHelm(t, "template", "tm", "publisher", "--namespace", "publisher", "--set", "publisher.gateway=prod/global",
		"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.noLeaderFor=", "--set", "prometheusRule.fallbackFor=",
		"--show-only", "templates/prometheusrule.yaml")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "TrafficMapPublisherTooFewXDSClients", "minXDSClients 0: no such alert")
	assert.NotContains(t, out, "TrafficMapPublisherNoLeader", `noLeaderFor "": no such alert`)
	assert.NotContains(t, out, "TrafficMapInFallback", `fallbackFor "": no such alert`)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The default values serve xDS with mutual TLS from a CA the chart generates: the publisher
// gets the serving certificate, its key and the client CA (never the CA's key), the
// certificates chain to that CA, and a client certificate the chart issues chains to it
// too. The debug endpoints are on loopback, not on a port the Service exposes.
func TestDefaultsServeMutualTLSAndHideDebug(t *testing.T) {
	docs := renderDocs(t, "--set", "publisher.gateway=prod/global", "--set", "xds.tls.clients[0].name=edge-gateway",
		"--set", "xds.tls.clients[0].dnsNames={edge.gateways.svc}")
	secrets := map[string]map[string]any{}
	var pod, svc map[string]any
	for _, d := range docs {
		name := d["metadata"].(map[string]any)["name"].(string)
		switch d["kind"] {
		case "Secret":
			secrets[name] = d["data"].(map[string]any)
		case "Deployment":
			pod = d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		case "Service":
			svc = d["spec"].(map[string]any)
		}
	}
	require.NotNil(t, pod)
	require.NotNil(t, svc)
	container := pod["containers"].([]any)[0].(map[string]any)
	args := container["args"]
	assert.Contains(t, args, "--xds-tls-cert=/etc/publisher/xds-tls/tls.crt")
	assert.Contains(t, args, "--xds-tls-key=/etc/publisher/xds-tls/tls.key")
	assert.Contains(t, args, "--xds-client-ca=/etc/publisher/xds-tls/ca.crt", "mutual TLS by default")
	assert.Contains(t, args, "--debug-address=127.0.0.1:8081", "the debug endpoints on loopback")

	volumes := pod["volumes"].([]any)
	require.Len(t, volumes, 1)
	secret := volumes[0].(map[string]any)["secret"].(map[string]any)
	assert.Equal(t, "tm-trafficmap-publisher-xds-tls", secret["secretName"])
	var keys []string
	for _, item := range secret["items"].([]any) {
		keys = append(keys, item.(map[string]any)["key"].(string))
	}
	assert.ElementsMatch(t, []string{"tls.crt", "tls.key", "ca.crt"}, keys, "the CA's key is never mounted")

	pemOf := func(secret, key string) []byte {
		t.Helper()
		data, ok := secrets[secret][key].(string)
		require.True(t, ok, "Secret %s has %s", secret, key)
		raw, err := base64.StdEncoding.DecodeString(data)
		require.NoError(t, err)
		return raw
	}
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pemOf("tm-trafficmap-publisher-xds-ca", "ca.crt")))
	assert.NotEmpty(t, pemOf("tm-trafficmap-publisher-xds-ca", "ca.key"), "the CA's key is kept for upgrades")
	leaf := func(secret string) *x509.Certificate {
		t.Helper()
		block, _ := pem.Decode(pemOf(secret, "tls.crt"))
		require.NotNil(t, block)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		assert.Equal(t, pemOf("tm-trafficmap-publisher-xds-ca", "ca.crt"), pemOf(secret, "ca.crt"))
		_, err = tls.X509KeyPair(pemOf(secret, "tls.crt"), pemOf(secret, "tls.key"))
		require.NoError(t, err, "%s: the key matches the certificate", secret)
		return cert
	}
	server := leaf("tm-trafficmap-publisher-xds-tls")
	_, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "tm-trafficmap-publisher.publisher.svc"})
	assert.NoError(t, err, "the serving certificate is for the Service's name")
	_, err = server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"})
	assert.NoError(t, err, "and for loopback (sidecar mode)")
	client := leaf("tm-trafficmap-publisher-xds-client-edge-gateway")
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "the client certificate chains to the client CA")
	assert.Equal(t, "edge-gateway", client.Subject.CommonName)
	assert.Contains(t, client.DNSNames, "edge.gateways.svc")

	var ports []string
	for _, p := range svc["ports"].([]any) {
		ports = append(ports, fmt.Sprint(p.(map[string]any)["port"]))
	}
	assert.ElementsMatch(t, []string{"18000", "8080"}, ports, "the Service exposes xDS and metrics only")
	for _, p := range container["ports"].([]any) {
		assert.NotEqual(t, float64(8081), p.(map[string]any)["containerPort"], "the debug port is not a container port")
	}
}

// Plaintext is an explicit choice, and a client policy needs mutual TLS.
func TestPlaintextIsExplicitAndPolicyNeedsMutualTLS(t *testing.T) {
	docs := renderDocs(t, "--set", "publisher.gateway=prod/global", "--set", "xds.tls.mode=plaintext")
	for _, d := range docs {
		assert.NotEqual(t, "Secret", d["kind"], "no certificates in plaintext mode")
		if d["kind"] == "Deployment" {
			c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			for _, a := range c["args"].([]any) {
				assert.NotContains(t, a, "--xds-tls")
			}
		}
	}
	out, err := runHelm(t, "template", "tm", "publisher", "--set", "publisher.gateway=g", "--set", "xds.tls.mode=plaintext",
		"--set", "xds.clientNamespaces={a=b}")
	require.Error(t, err)
	assert.Contains(t, out, "xds.clientNamespaces needs mutual TLS")
	out, err = runHelm(t, "template", "tm", "publisher", "--set", "publisher.gateway=g", "--set", "xds.tls.mode=insecure")
	require.Error(t, err)
	assert.Contains(t, out, `xds.tls.mode "insecure": must be generate, cert-manager or plaintext`)

	docs = renderDocs(t, "--set", "publisher.gateway=prod/global", "--set", "xds.clientNamespaces={spiffe://cluster.local/ns/team-a/*=team-a}")
	for _, d := range docs {
		if d["kind"] == "Deployment" {
			c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			assert.Contains(t, c["args"], "--xds-client-namespaces=spiffe://cluster.local/ns/team-a/*=team-a")
		}
	}
}

// With xds.tls.mode cert-manager the chart renders cert-manager resources instead of
// generating certificates: its own CA (self-signed Issuer, CA Certificate, CA Issuer)
// unless given an issuerRef, the serving Certificate and one per client.
func TestCertManagerMode(t *testing.T) {
	kinds := func(docs []map[string]any) map[string]int {
		out := map[string]int{}
		for _, d := range docs {
			out[d["kind"].(string)]++
		}
		return out
	}
	docs := renderDocs(t, "--set", "publisher.gateway=prod/global", "--set", "xds.tls.mode=cert-manager",
		"--set", "xds.tls.clients[0].name=edge", "--set", "xds.tls.clients[0].uris={spiffe://cluster.local/ns/gw/sa/edge}")
	k := kinds(docs)
	assert.Equal(t, 0, k["Secret"], "cert-manager writes the Secrets")
	assert.Equal(t, 2, k["Issuer"])
	assert.Equal(t, 3, k["Certificate"], "CA, serving, one client")
	docs = renderDocs(t, "--set", "publisher.gateway=prod/global", "--set", "xds.tls.mode=cert-manager",
		"--set", "xds.tls.certManager.issuerRef.name=corp-ca", "--set", "xds.tls.certManager.issuerRef.kind=ClusterIssuer")
	k = kinds(docs)
	assert.Equal(t, 0, k["Issuer"])
	assert.Equal(t, 1, k["Certificate"])
	for _, d := range docs {
		if d["kind"] == "Deployment" {
			c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			assert.Contains(t, c["args"], "--xds-client-ca=/etc/publisher/xds-tls/ca.crt")
		}
	}
}

// The xDS limits are passed only when set; unset, the publisher's defaults apply.
func TestXDSLimits(t *testing.T) {
	out, err := runHelm(t, "template", "tm", "publisher", "--set", "publisher.gateway=g", "--set", "xds.limits.maxNames=500",
		"--set", "xds.limits.maxStreamsPerConnection=8", "--set", "xds.limits.maxConnectionsPerClient=64")
	require.NoError(t, err, out)
	assert.Contains(t, out, "- --xds-max-names=500\n")
	assert.Contains(t, out, "- --xds-max-streams-per-connection=8\n")
	assert.Contains(t, out, "- --xds-max-connections-per-client=64\n")
	out, err = runHelm(t, "template", "tm", "publisher", "--set", "publisher.gateway=g")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "--xds-max-")
}
