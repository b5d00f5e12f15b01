package xds_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/url"
	"slices"
	"sort"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/trafficmap/publisher/xds"
)

// issueClient returns a PEM client certificate and key signed by the CA, with subject
// common name cn and the given URI SANs.
func (p *pki) issueClient(t *testing.T, serial int64, cn string, uris ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		require.NoError(t, err)
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	return pair
}

func TestClientPolicy(t *testing.T) {
	rules := []string{
		"spiffe://cluster.local/ns/team-a/*=team-a",
		"gateway.edge.example.com=*",
		"batch-*=batch-*, shared",
	}
	p, err := xds.ParseClientPolicy(rules)
	require.NoError(t, err)
	tests := []struct {
		name       string
		identities []string
		allowed    bool
		sees       map[string]bool
	}{
		{"a SPIFFE ID sees its namespace", []string{"spiffe://cluster.local/ns/team-a/sa/client", "client"}, true,
			map[string]bool{"team-a": true, "team-b": false, "team-a-x": false}},
		{"a DNS SAN with * sees all", []string{"gateway.edge.example.com"}, true, map[string]bool{"team-a": true, "anything": true}},
		{"namespace patterns and lists", []string{"batch-7"}, true,
			map[string]bool{"batch-prod": true, "shared": true, "team-a": false}},
		{"a client matching no rule is refused", []string{"spiffe://cluster.local/ns/team-b/sa/client", "intruder"}, false, nil},
		{"no identity matches nothing", nil, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := p.Access(tc.identities)
			require.Equal(t, tc.allowed, ok)
			for ns, want := range tc.sees {
				assert.Equal(t, want, a.Sees(ns), ns)
			}
		})
	}

	empty, err := xds.ParseClientPolicy(nil)
	require.NoError(t, err)
	a, ok := empty.Access([]string{"anyone"})
	assert.True(t, ok, "no rules: every authenticated client is let in")
	assert.False(t, a.Restricted(), "and sees every namespace")
	assert.Equal(t, "anyone", a.Identity)

	for _, bad := range []struct{ rule, msg string }{
		{"no-equals", "must be IDENTITY=NAMESPACE"},
		{"=team-a", "must be IDENTITY=NAMESPACE"},
		{"client=", "names no namespace"},
		{"client= , ", "names no namespace"},
	} {
		_, err := xds.ParseClientPolicy([]string{bad.rule})
		assert.ErrorContains(t, err, "--xds-client-namespaces")
		assert.ErrorContains(t, err, bad.msg, bad.rule)
	}
	_, err = xds.LoadTLS("a.crt", "a.key", "", "client=team-a")
	assert.ErrorContains(t, err, "--xds-client-namespaces needs --xds-client-ca")
}

// A client counts only for the maps of the namespaces it may see: a restricted client that
// subscribes to everything and never ACKs holds its own namespace's map and no other, and
// a restricted Envoy (which is never sent the one listener and route configuration that
// carry every namespace) holds none.
func TestConfirmCountsOnlyVisibleNamespaces(t *testing.T) {
	teamA := service(t, "team-a", "chat", nil, seedEntries()...)
	teamB := service(t, "team-b", "chat", nil, seedEntries()...)
	h := xds.NewHistory(8)
	h.Record(xds.FlavourGRPC, all("v1"), []xds.Service{teamA, teamB}, nil)
	h.Record(xds.FlavourEnvoy, all("e1"), []xds.Service{teamA, teamB}, nil)
	p, err := xds.ParseClientPolicy([]string{"team-a-client=team-a"})
	require.NoError(t, err)
	access, ok := p.Access([]string{"team-a-client"})
	require.True(t, ok)

	silent := client("team-a-client", "sotw-1", "", wildcard) // never ACKed anything
	silent.Access = access
	for _, s := range []xds.Service{teamA, teamB} {
		got := xds.Confirm([]xds.ClientState{silent}, h, s.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, s), 0)
		if s.Namespace == "team-a" {
			assert.False(t, got.Done, "its own namespace's map waits for it: %s", got.Message)
			assert.Equal(t, 1, got.Total)
		} else {
			assert.True(t, got.Done, "another namespace's map does not wait for it: %s", got.Message)
			assert.Equal(t, 0, got.Connected, "nor does it count as connected for it")
		}
	}
	nacking := client("team-a-client", "sotw-2", "v1", wildcard)
	nacking.Access = access
	nacking.Nacked[resource.RouteType] = xds.Nack{Version: "v1", Message: "rejected"}
	assert.Nil(t, xds.Confirm([]xds.ClientState{nacking}, h, teamB.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, teamB), 0).Nack,
		"its NACK does not reach another namespace's map")

	envoy := xds.ClientState{NodeID: "envoy", Stream: "sotw-3", Flavour: xds.FlavourEnvoy, Subscribed: wildcard, Access: access}
	got := xds.Confirm([]xds.ClientState{envoy}, h, teamA.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, teamA), 1)
	assert.Equal(t, 0, got.Connected, "a restricted Envoy counts for no map: %s", got.Message)

	unrestricted := client("any", "sotw-4", "", wildcard) // plaintext or no policy: sees all
	assert.False(t, xds.Confirm([]xds.ClientState{unrestricted}, h, teamB.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, teamB), 0).Done)
}

// mtlsServer serves the gRPC flavour of team-a/chat and team-b/chat with mutual TLS and
// the client policy rules, and returns the server, its address and the CA.
func mtlsServer(t *testing.T, rules ...string) (*xds.Server, string, *pki) {
	t.Helper()
	ca := newPKI(t)
	dir := t.TempDir()
	sc, sk := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	cfg, err := xds.LoadTLS(write(t, dir, "tls.crt", sc), write(t, dir, "tls.key", sk), write(t, dir, "ca.crt", ca.caPEM), rules...)
	require.NoError(t, err)
	srv := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg})
	addr := serveTLS(t, srv)
	a, b := service(t, "team-a", "chat", nil, seedEntries()...), service(t, "team-b", "chat", nil, seedEntries()...)
	a.Hostnames, b.Hostnames = []string{"chat.team-a.example.com"}, []string{"chat.team-b.example.com"}
	res, err := xds.TranslateGRPC([]xds.Service{a, b})
	require.NoError(t, err)
	_, err = srv.SetResources(context.Background(), xds.FlavourGRPC, res)
	require.NoError(t, err)
	return srv, addr, ca
}

func adsOver(t *testing.T, addr string, ca *pki, certs ...tls.Certificate) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.caCert)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

var grpcNodeAuth = &corev3.Node{Id: "grpc-client", UserAgentName: "gRPC Go"}

// resourceNames decodes the names of a response's resources, sorted.
func resourceNames(t *testing.T, typeURL string, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range resp.GetResources() {
		var m interface {
			proto.Message
			GetName() string
		}
		switch typeURL {
		case resource.ListenerType:
			m = &listenerv3.Listener{}
		case resource.RouteType:
			m = &routev3.RouteConfiguration{}
		default:
			m = &clusterv3.Cluster{}
		}
		require.NoError(t, a.UnmarshalTo(m))
		out = append(out, m.GetName())
	}
	sort.Strings(out)
	return out
}

// With mutual TLS and a client policy, a client sees only the resources of the namespaces
// its certificate's identity may see: its wildcard subscriptions get only those, its
// subscription by name to another namespace's route configuration gets nothing, and the
// tracker knows it as restricted. A client whose identity matches no rule is refused, and
// one without a certificate never reaches the tracker.
func TestMutualTLSClientPolicyFiltersNamespaces(t *testing.T) {
	srv, addr, ca := mtlsServer(t, "spiffe://example.org/team-a/*=team-a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	teamA := adsOver(t, addr, ca, ca.issueClient(t, 10, "client-a", "spiffe://example.org/team-a/client"))
	stream, err := teamA.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	want := map[string][]string{
		resource.ListenerType: {"chat.team-a", "chat.team-a.example.com"},
		resource.RouteType:    {"team-a/chat"},
		resource.ClusterType:  {xds.ClusterName("team-a", "chat", "worker-a"), xds.ClusterName("team-a", "chat", "worker-b")},
	}
	for _, typ := range []string{resource.ListenerType, resource.ClusterType} {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: grpcNodeAuth, TypeUrl: typ}))
		resp, err := stream.Recv()
		require.NoError(t, err)
		assert.Equal(t, want[typ], resourceNames(t, typ, resp), "wildcard %s", typ)
	}
	require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: grpcNodeAuth, TypeUrl: resource.RouteType,
		ResourceNames: []string{"team-a/chat", "team-b/chat"}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, want[resource.RouteType], resourceNames(t, resource.RouteType, resp), "team-b's route configuration is not sent")

	delta, err := teamA.DeltaAggregatedResources(ctx)
	require.NoError(t, err)
	require.NoError(t, delta.Send(&discoveryv3.DeltaDiscoveryRequest{Node: grpcNodeAuth, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}}))
	dresp, err := delta.Recv()
	require.NoError(t, err)
	var got []string
	for _, r := range dresp.GetResources() {
		got = append(got, r.GetName())
	}
	slices.Sort(got)
	assert.Equal(t, want[resource.ClusterType], got, "delta wildcard")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		clients := srv.Tracker().Clients()
		require.Len(c, clients, 2)
		for _, cl := range clients {
			assert.Equal(c, "spiffe://example.org/team-a/client", cl.Access.Identity)
			assert.True(c, cl.Access.Restricted())
			assert.True(c, cl.MaySee("team-a/chat"))
			assert.False(c, cl.MaySee("team-b/chat"))
		}
	}, 10*time.Second, 10*time.Millisecond)

	// An identity the policy does not name is refused.
	stranger := adsOver(t, addr, ca, ca.issueClient(t, 11, "stranger", "spiffe://example.org/team-b/client"))
	s2, err := stranger.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	// A stream the server refuses at once may fail Send with io.EOF; its status comes from Recv.
	if err := s2.Send(&discoveryv3.DiscoveryRequest{Node: grpcNodeAuth, TypeUrl: resource.ClusterType}); !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	_, err = s2.Recv()
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	// No certificate: refused at the handshake.
	anon := adsOver(t, addr, ca)
	s3, err := anon.StreamAggregatedResources(ctx)
	if err == nil {
		if err := s3.Send(&discoveryv3.DiscoveryRequest{Node: grpcNodeAuth, TypeUrl: resource.ClusterType}); !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		_, err = s3.Recv()
	}
	require.Error(t, err)
	assert.Len(t, srv.Tracker().Clients(), 2, "neither refused client is tracked")
}
