package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// serverName is the name the serving certificate carries (with 127.0.0.1) and the one the
// client configurations verify.
const serverName = "localhost"

// pki is the run's own certificate authority for the publisher's xDS port: a CA, a serving
// certificate for 127.0.0.1 and localhost, and client certificates signed on demand. It is
// immutable after newPKI and safe for concurrent use.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
}

// newPKI creates a CA and a serving certificate and writes ca.crt, server.crt and
// server.key into dir (created if missing).
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ca key: %w", err)
	}
	tmpl := certTemplate("chaos-ca")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create ca certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse ca certificate: %w", err)
	}
	p := &pki{dir: dir, ca: ca, caKey: caKey, caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	srv := certTemplate(serverName)
	srv.DNSNames, srv.IPAddresses = []string{serverName}, []net.IP{net.IPv4(127, 0, 0, 1)}
	srv.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	certDER, key, err := p.sign(srv)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	cert, keyFile, _ := p.ServerFiles()
	if err := writePEM(cert, "CERTIFICATE", certDER); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal server key: %w", err)
	}
	if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}
	return p, nil
}

// ServerFiles returns the paths of the serving certificate, its key and the CA bundle
// (--xds-tls-cert, --xds-tls-key, --xds-client-ca).
func (p *pki) ServerFiles() (cert, key, ca string) {
	return filepath.Join(p.dir, "server.crt"), filepath.Join(p.dir, "server.key"), filepath.Join(p.dir, "ca.crt")
}

// ClientTLS returns a client configuration presenting a new certificate whose common name
// is identity, signed by the CA, that trusts the CA and verifies the server as localhost.
func (p *pki) ClientTLS(identity string) (*tls.Config, error) {
	tmpl := certTemplate(identity)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, key, err := p.sign(tmpl)
	if err != nil {
		return nil, fmt.Errorf("client certificate %q: %w", identity, err)
	}
	cfg := p.AnonymousTLS()
	cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	return cfg, nil
}

// AnonymousTLS returns a client configuration that trusts the CA and verifies the server
// as localhost but presents no client certificate.
func (p *pki) AnonymousTLS() *tls.Config {
	return &tls.Config{RootCAs: p.caPool, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// sign issues a certificate from tmpl with a new key, signed by the CA.
func (p *pki) sign(tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign: %w", err)
	}
	return der, key, nil
}

// certTemplate is a certificate valid from an hour ago for a day, with a random serial.
func certTemplate(commonName string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)) // never fails on crypto/rand
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
