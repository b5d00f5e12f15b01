package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// chartTLS is what the chart's default values render for the xDS port: the files of the
// serving Secret and of one client Secret, written to a temporary folder, and the
// publisher's xDS TLS arguments pointed at them.
type chartTLS struct {
	args                      []string // the container's arguments
	cert, key, clientCA       string   // --xds-tls-cert, --xds-tls-key, --xds-client-ca, as files here
	clientCert, clientKey, ca string   // the client Secret's tls.crt, tls.key and ca.crt
}

// renderChartTLS renders the chart with its default values (and one client certificate,
// named client) and writes the Secrets the container mounts, and the client's, to files.
func renderChartTLS(t *testing.T, client string) chartTLS {
	t.Helper()
	cmd := exec.Command(helmBinary(t), "template", "tm", filepath.Join(repoRoot(), "charts", "publisher"), "--namespace", "publisher",
		"--set", "publisher.gateway=prod/global", "--set", "xds.tls.clients[0].name="+client)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	require.NoError(t, cmd.Run(), stderr.String())
	secrets := map[string]map[string]string{}
	var args []string
	var mountPath string
	for _, doc := range strings.Split(stdout.String(), "\n---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args         []string
							VolumeMounts []struct{ Name, MountPath string } `json:"volumeMounts"`
						}
					}
				}
			}
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		switch obj.Kind {
		case "Secret":
			secrets[obj.Metadata.Name] = obj.Data
		case "Deployment":
			require.Len(t, obj.Spec.Template.Spec.Containers, 1)
			args = obj.Spec.Template.Spec.Containers[0].Args
			for _, m := range obj.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == "xds-tls" {
					mountPath = m.MountPath
				}
			}
		}
	}
	require.NotEmpty(t, mountPath, "the default values mount the xDS TLS Secret")
	dir := t.TempDir()
	write := func(secret, key string) string {
		data, ok := secrets[secret][key]
		require.True(t, ok, "Secret %s has %s", secret, key)
		raw, err := base64.StdEncoding.DecodeString(data)
		require.NoError(t, err)
		path := filepath.Join(dir, secret+"-"+key)
		require.NoError(t, os.WriteFile(path, raw, 0o600))
		return path
	}
	c := chartTLS{args: args}
	serving := "tm-trafficmap-publisher-xds-tls"
	files := map[string]string{mountPath + "/tls.crt": write(serving, "tls.crt"), mountPath + "/tls.key": write(serving, "tls.key"),
		mountPath + "/ca.crt": write(serving, "ca.crt")}
	for _, a := range args {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--xds-tls-cert":
			c.cert = files[value]
		case "--xds-tls-key":
			c.key = files[value]
		case "--xds-client-ca":
			c.clientCA = files[value]
		}
	}
	clientSecret := "tm-trafficmap-publisher-xds-client-" + client
	c.clientCert, c.clientKey, c.ca = write(clientSecret, "tls.crt"), write(clientSecret, "tls.key"), write(clientSecret, "ca.crt")
	return c
}

// grpcBootstrapTLS is the repository's mutual TLS gRPC bootstrap,
// examples/bootstrap/grpc-bootstrap-mtls.json, with its server address, node id and
// files replaced; without certFile and keyFile the client presents no certificate.
func grpcBootstrapTLS(t *testing.T, server, nodeID, caFile, certFile, keyFile string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "bootstrap", "grpc-bootstrap-mtls.json"))
	require.NoError(t, err)
	var b map[string]any
	require.NoError(t, json.Unmarshal(raw, &b))
	servers, _ := b["xds_servers"].([]any)
	require.Len(t, servers, 1)
	s := servers[0].(map[string]any)
	s["server_uri"] = server
	creds := s["channel_creds"].([]any)
	require.Len(t, creds, 1)
	cfg := creds[0].(map[string]any)["config"].(map[string]any)
	cfg["ca_certificate_file"] = caFile
	if certFile == "" {
		delete(cfg, "certificate_file")
		delete(cfg, "private_key_file")
	} else {
		cfg["certificate_file"], cfg["private_key_file"] = certFile, keyFile
	}
	b["node"].(map[string]any)["id"] = nodeID
	out, err := json.Marshal(b)
	require.NoError(t, err)
	return out
}

// tlsXDSClient is a real proxyless gRPC client whose xDS client uses the bootstrap.
func tlsXDSClient(t *testing.T, bootstrap []byte, target string) testgrpc.TestServiceClient {
	t.Helper()
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap)
	require.NoError(t, err)
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// With the chart's default values the xDS port serves mutual TLS, and only authenticated
// clients exist for Published: a real gRPC client without a certificate is refused and
// counts for nothing; one with the certificate the chart issued gets the weights and
// counts; an authenticated client that never ACKs holds the map it subscribes to and no
// other. The debug endpoints are not on the HTTP port the Service exposes.
func TestXDSChartDefaultMutualTLS(t *testing.T) {
	chart := renderChartTLS(t, "test-client")
	require.NotEmpty(t, chart.cert)
	require.NotEmpty(t, chart.clientCA, "the default values turn on mutual TLS: %v", chart.args)
	assert.Contains(t, chart.args, "--debug-address=127.0.0.1:8081")

	a, b := newFixture(t), newFixture(t)
	for _, f := range []*fixture{a, b} {
		f.createMap([]v1beta1.TrafficMapEntry{
			{Cluster: "worker-a", Endpoint: xdstest.StartBackend(t, "worker-a"), Weight: 1},
			{Cluster: "worker-b", Endpoint: xdstest.StartBackend(t, "worker-b"), Weight: 1},
		})
	}
	pub := startPublisher(t, a.publisherConfig(xdsOnlyAck, func(c *publish.Config) {
		c.Namespaces = []string{a.ns, b.ns}
		c.XDSTLSCert, c.XDSTLSKey, c.XDSClientCA = chart.cert, chart.key, chart.clientCA
		c.DebugAddress = "127.0.0.1:0"
	}))
	server := pub.xdsAddr.String()
	for _, f := range []*fixture{a, b} {
		f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected, --xds-min-clients is 1")
	}

	// No certificate: refused at the handshake, never counted.
	anonymous := tlsXDSClient(t, grpcBootstrapTLS(t, server, "anonymous", chart.ca, "", ""), service+"."+b.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := anonymous.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	cancel()
	require.Error(t, err, "a client without a certificate gets no configuration")
	assert.Empty(t, pub.pub.XDSClients(), "a refused client is no xds client")
	b.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0 connected, --xds-min-clients is 1")

	// An authenticated protocol-level client subscribed to a's map that never ACKs: it
	// holds a's map, and only a's.
	pair, err := tls.LoadX509KeyPair(chart.clientCert, chart.clientKey)
	require.NoError(t, err)
	caPEM, err := os.ReadFile(chart.ca)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	conn, err := grpc.NewClient(server, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	sctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	silent, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	require.NoError(t, err)
	for typ, names := range mapNames(a.ns) {
		require.NoError(t, silent.Send(&discoveryv3.DiscoveryRequest{Node: grpcNode("silent"), TypeUrl: typ, ResourceNames: names}))
	}
	received := xdstest.Stream(silent.Recv)
	select {
	case resp := <-received:
		require.NotNil(t, resp, "the authenticated client is served")
	case <-time.After(waitTimeout):
		t.Fatal("the authenticated client was sent nothing")
	}
	a.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0/1 ACKed a version with these weights")
	b.waitPublishedWith("none of the 1 connected xds clients subscribes to its resources")

	// A real gRPC client with the chart's client certificate gets b's weights and counts.
	real := tlsXDSClient(t, grpcBootstrapTLS(t, server, "authenticated", chart.ca, chart.clientCert, chart.clientKey), service+"."+b.ns)
	got := map[string]int{}
	for range 20 {
		host, err := call(real)
		require.NoError(t, err)
		got[host]++
	}
	assert.Equal(t, 20, got["worker-a"]+got["worker-b"])
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := pub.pub.XDSClients()
		require.Len(c, clients, 2)
		for _, cl := range clients {
			assert.Equal(c, "test-client", cl.Access.Identity, "every client is known by its certificate")
			assert.NotEmpty(c, cl.Subscribed[resource.ListenerType].SortedNames())
		}
	}, waitTimeout, tick)
	// b's True condition was about the same content before the client joined, and a True
	// condition keeps the counts of the moment it turned True (no status write per client
	// that comes and goes): new weights show that the client counts, deterministically.
	b.drain(`{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`)
	b.waitPublishedWith("ACKed by 1/1 clients; weights worker-a=0 (drained by maintenance-a), worker-b=1")
	a.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), "waiting for xds clients: 0/1 ACKed a version with these weights")

	// The debug endpoints are on the debug address only.
	require.NotNil(t, pub.pub.DebugAddr())
	assert.Contains(t, get(t, pub, "/debug/xds"), "404 page not found", "not on the HTTP port a Service exposes")
	resp, err := httpGet("http://" + pub.pub.DebugAddr().String() + "/debug/xds")
	require.NoError(t, err)
	assert.Contains(t, resp, `"test-client"`)
}

// httpGet returns the body at url.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url) //nolint:gosec // a test's loopback URL
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
