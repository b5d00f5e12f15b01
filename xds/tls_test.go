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
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/xds"
)

type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &pki{caCert: cert, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM certificate and key for a leaf signed by the CA.
func (p *pki) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

// With mTLS on, a client with a certificate from the client CA gets configuration and a
// client without one is refused.
func TestMutualTLS(t *testing.T) {
	ca := newPKI(t)
	dir := t.TempDir()
	sc, sk := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	cc, ck := ca.issue(t, 3, x509.ExtKeyUsageClientAuth)
	cfg, err := xds.LoadTLS(write(t, dir, "srv.crt", sc), write(t, dir, "srv.key", sk), write(t, dir, "ca.crt", ca.caPEM))
	require.NoError(t, err)

	srv := xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg})
	_, err = srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })

	roots := x509.NewCertPool()
	roots.AddCert(ca.caCert)
	fetch := func(clientCerts []tls.Certificate) error {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: clientCerts})))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: envoyNode, TypeUrl: resource.ClusterType}); err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}

	pair, err := tls.X509KeyPair(cc, ck)
	require.NoError(t, err)
	assert.NoError(t, fetch([]tls.Certificate{pair}), "a client with a valid certificate is served")
	err = fetch(nil)
	require.Error(t, err, "a client without a certificate is refused")
	// TLS 1.3 reports the refusal after the handshake: as a certificate alert, a reset or a
	// broken pipe, all of which gRPC turns into Unavailable.
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

func TestLoadTLSRefusals(t *testing.T) {
	_, err := xds.LoadTLS("", "", "ca.pem")
	assert.ErrorContains(t, err, "--xds-client-ca needs --xds-tls-cert and --xds-tls-key")
	_, err = xds.LoadTLS("a.crt", "", "")
	assert.ErrorContains(t, err, "--xds-tls-cert and --xds-tls-key go together")
	cfg, err := xds.LoadTLS("", "", "")
	assert.NoError(t, err)
	assert.Nil(t, cfg, "plaintext")
}
