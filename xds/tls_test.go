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
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	certmetrics "sigs.k8s.io/controller-runtime/pkg/certwatcher/metrics"

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

	addr := serveTLS(t, xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg}))
	roots := x509.NewCertPool()
	roots.AddCert(ca.caCert)
	fetch := func(clientCerts []tls.Certificate) error { return fetchClusters(t, addr, roots, clientCerts) }

	pair, err := tls.X509KeyPair(cc, ck)
	require.NoError(t, err)
	assert.NoError(t, fetch([]tls.Certificate{pair}), "a client with a valid certificate is served")
	err = fetch(nil)
	require.Error(t, err, "a client without a certificate is refused")
	// TLS 1.3 reports the refusal after the handshake: as a certificate alert, a reset or a
	// broken pipe, all of which gRPC turns into Unavailable.
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// fetchClusters asks the server at addr for clusters over TLS and returns the first error.
func fetchClusters(t *testing.T, addr string, roots *x509.CertPool, clientCerts []tls.Certificate) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: clientCerts})))
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

// serveTLS serves srv on a loopback port until the test ends and returns the address.
func serveTLS(t *testing.T, srv *xds.Server) string {
	t.Helper()
	_, err := srv.SetResources(context.Background(), xds.FlavourEnvoy, envoyResources(t, 1))
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return lis.Addr().String()
}

// servedSerial opens a new TLS connection to addr and returns the serial number of the
// certificate the server presented.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// The serving certificate and key are reloaded when their files change: new connections
// get the new certificate, without a restart. A pair that does not load leaves the last
// good one in use.
func TestTLSCertificateReload(t *testing.T) {
	ca := newPKI(t)
	dir := t.TempDir()
	c2, k2 := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	certFile, keyFile := write(t, dir, "tls.crt", c2), write(t, dir, "tls.key", k2)
	cfg, err := xds.LoadTLS(certFile, keyFile, "")
	require.NoError(t, err)
	addr := serveTLS(t, xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg}))
	roots := x509.NewCertPool()
	roots.AddCert(ca.caCert)
	assert.Equal(t, int64(2), servedSerial(t, addr, roots))

	// A broken certificate file is read (the read error counter moves) and not used.
	errorsBefore := promtestutil.ToFloat64(certmetrics.ReadCertificateErrors)
	write(t, dir, "tls.crt", []byte("not a certificate"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, promtestutil.ToFloat64(certmetrics.ReadCertificateErrors), errorsBefore)
	}, 30*time.Second, 20*time.Millisecond, "the broken file is read")
	assert.Equal(t, int64(2), servedSerial(t, addr, roots), "the last good certificate stays in use")

	c3, k3 := ca.issue(t, 3, x509.ExtKeyUsageServerAuth)
	write(t, dir, "tls.key", k3)
	write(t, dir, "tls.crt", c3)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, int64(3), servedSerial(t, addr, roots))
	}, 30*time.Second, 20*time.Millisecond, "a new connection gets the new certificate")
	assert.NoError(t, fetchClusters(t, addr, roots, nil), "gRPC is served with the new certificate")
}

// The client CA bundle is read again at each handshake: a client whose CA is added to the
// file is accepted from then on, without a restart.
func TestTLSClientCAReload(t *testing.T) {
	serverCA, clientCA := newPKI(t), newPKI(t)
	dir := t.TempDir()
	sc, sk := serverCA.issue(t, 2, x509.ExtKeyUsageServerAuth)
	cc, ck := clientCA.issue(t, 3, x509.ExtKeyUsageClientAuth)
	caFile := write(t, dir, "ca.crt", serverCA.caPEM)
	cfg, err := xds.LoadTLS(write(t, dir, "tls.crt", sc), write(t, dir, "tls.key", sk), caFile)
	require.NoError(t, err)
	addr := serveTLS(t, xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg}))
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.caCert)
	pair, err := tls.X509KeyPair(cc, ck)
	require.NoError(t, err)

	require.Error(t, fetchClusters(t, addr, roots, []tls.Certificate{pair}), "a client CA not in the bundle is refused")
	write(t, dir, "ca.crt", []byte("not a bundle"))
	require.Error(t, fetchClusters(t, addr, roots, []tls.Certificate{pair}), "a broken bundle leaves the last good one in use")
	write(t, dir, "ca.crt", append(append([]byte{}, serverCA.caPEM...), clientCA.caPEM...))
	assert.NoError(t, fetchClusters(t, addr, roots, []tls.Certificate{pair}), "the next handshake uses the new bundle")
}

func TestLoadTLSRefusals(t *testing.T) {
	_, err := xds.LoadTLS("", "", "ca.pem")
	assert.ErrorContains(t, err, "--xds-client-ca needs --xds-tls-cert and --xds-tls-key")
	_, err = xds.LoadTLS("a.crt", "", "")
	assert.ErrorContains(t, err, "--xds-tls-cert and --xds-tls-key go together")
	cfg, err := xds.LoadTLS("", "", "")
	assert.NoError(t, err)
	assert.Nil(t, cfg, "plaintext")

	ca := newPKI(t)
	dir := t.TempDir()
	c, k := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	certFile, keyFile := write(t, dir, "tls.crt", c), write(t, dir, "tls.key", k)
	_, err = xds.LoadTLS(write(t, dir, "bad.crt", []byte("not a certificate")), keyFile, "")
	assert.ErrorContains(t, err, "load --xds-tls-cert")
	_, err = xds.LoadTLS(certFile, filepath.Join(dir, "missing.key"), "")
	assert.ErrorContains(t, err, "load --xds-tls-cert")
	_, err = xds.LoadTLS(certFile, keyFile, filepath.Join(dir, "missing-ca.crt"))
	assert.ErrorContains(t, err, "read --xds-client-ca")
	_, err = xds.LoadTLS(certFile, keyFile, write(t, dir, "bad-ca.crt", []byte("not a bundle")))
	assert.ErrorContains(t, err, "holds no PEM certificate")
}
