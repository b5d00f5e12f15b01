package bootstrap_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // resolves the cluster's typed_extension_protocol_options
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/xds"
)

// envoy.yaml is a valid Envoy v3 bootstrap (every field known, every constraint of the
// proto met) that takes listeners and clusters from the publisher over gRPC ADS, names
// itself Envoy, and reaches the publisher's default xDS port.
func TestEnvoyBootstrap(t *testing.T) {
	raw, err := os.ReadFile("envoy.yaml")
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	var b bootstrapv3.Bootstrap
	require.NoError(t, protojson.UnmarshalOptions{}.Unmarshal(js, &b), "unknown or mistyped fields")
	require.NoError(t, b.ValidateAll())

	assert.Equal(t, string(xds.FlavourEnvoy), b.GetNode().GetMetadata().GetFields()[xds.FlavourMetadataKey].GetStringValue())
	assert.NotEmpty(t, b.GetNode().GetId())
	assert.NotEmpty(t, b.GetNode().GetCluster(), "Envoy needs node.cluster for ADS")
	ads := b.GetDynamicResources().GetAdsConfig()
	assert.Equal(t, corev3.ApiConfigSource_GRPC, ads.GetApiType())
	assert.Equal(t, corev3.ApiVersion_V3, ads.GetTransportApiVersion())
	require.Len(t, ads.GetGrpcServices(), 1)
	cluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	assert.NotNil(t, b.GetDynamicResources().GetLdsConfig().GetAds(), "listeners over ADS")
	assert.NotNil(t, b.GetDynamicResources().GetCdsConfig().GetAds(), "clusters over ADS")

	require.Len(t, b.GetStaticResources().GetClusters(), 1)
	c := b.GetStaticResources().GetClusters()[0]
	assert.Equal(t, cluster, c.GetName())
	assert.Contains(t, c.GetTypedExtensionProtocolOptions(), "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "HTTP/2 for gRPC")
	addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	assert.Equal(t, uint32(18000), addr.GetPortValue(), "the publisher's default --xds-address port")
}

// envoy-mtls.yaml is envoy.yaml over mutual TLS: a valid bootstrap whose xDS cluster
// presents a client certificate and checks the publisher's against the CA.
func TestEnvoyMutualTLSBootstrap(t *testing.T) {
	raw, err := os.ReadFile("envoy-mtls.yaml")
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	var b bootstrapv3.Bootstrap
	require.NoError(t, protojson.UnmarshalOptions{}.Unmarshal(js, &b), "unknown or mistyped fields")
	require.NoError(t, b.ValidateAll())
	require.Len(t, b.GetStaticResources().GetClusters(), 1)
	var tlsCtx tlsv3.UpstreamTlsContext
	require.NoError(t, b.GetStaticResources().GetClusters()[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(&tlsCtx))
	common := tlsCtx.GetCommonTlsContext()
	require.Len(t, common.GetTlsCertificates(), 1)
	assert.Equal(t, "/etc/xds-client/tls.crt", common.GetTlsCertificates()[0].GetCertificateChain().GetFilename())
	assert.Equal(t, "/etc/xds-client/tls.key", common.GetTlsCertificates()[0].GetPrivateKey().GetFilename())
	assert.Equal(t, "/etc/xds-client/ca.crt", common.GetValidationContext().GetTrustedCa().GetFilename())
}

// grpc-bootstrap-mtls.json is grpc-bootstrap.json over mutual TLS: grpc-go's "tls" channel
// credentials with the CA, the client certificate and its key. The integration test
// TestXDSChartDefaultMutualTLS loads it into a real grpc-go xDS client.
func TestGRPCMutualTLSBootstrap(t *testing.T) {
	raw, err := os.ReadFile("grpc-bootstrap-mtls.json")
	require.NoError(t, err)
	var b struct {
		XDSServers []struct {
			ServerURI    string `json:"server_uri"`
			ChannelCreds []struct {
				Type   string            `json:"type"`
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
			ServerFeatures []string `json:"server_features"`
		} `json:"xds_servers"`
		Node struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"node"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&b))
	require.Len(t, b.XDSServers, 1)
	require.Len(t, b.XDSServers[0].ChannelCreds, 1)
	creds := b.XDSServers[0].ChannelCreds[0]
	assert.Equal(t, "tls", creds.Type)
	for _, k := range []string{"ca_certificate_file", "certificate_file", "private_key_file"} {
		assert.NotEmpty(t, creds.Config[k], k)
	}
	assert.Equal(t, string(xds.FlavourGRPC), b.Node.Metadata[xds.FlavourMetadataKey])
}

// grpc-bootstrap.json has what grpc-go's xDS client needs (an xds_v3 server with channel
// credentials and a node id) and names itself gRPC. The integration test
// TestXDSProxylessGRPCClient loads it into a real grpc-go xDS client.
func TestGRPCBootstrap(t *testing.T) {
	raw, err := os.ReadFile("grpc-bootstrap.json")
	require.NoError(t, err)
	var b struct {
		XDSServers []struct {
			ServerURI      string                  `json:"server_uri"`
			ChannelCreds   []struct{ Type string } `json:"channel_creds"`
			ServerFeatures []string                `json:"server_features"`
		} `json:"xds_servers"`
		Node struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"node"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&b))
	require.Len(t, b.XDSServers, 1)
	assert.Contains(t, b.XDSServers[0].ServerURI, ":18000")
	assert.Equal(t, "insecure", b.XDSServers[0].ChannelCreds[0].Type)
	assert.Contains(t, b.XDSServers[0].ServerFeatures, "xds_v3")
	assert.NotEmpty(t, b.Node.ID)
	assert.Equal(t, string(xds.FlavourGRPC), b.Node.Metadata[xds.FlavourMetadataKey])
}
