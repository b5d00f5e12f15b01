package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// TLS is the xDS port's TLS as LoadTLS loaded it: a serving certificate that is reloaded
// when its files change, and optionally a client CA bundle for mutual TLS with a policy of
// which client identities see which namespaces. Pass it as ServerConfig.TLS; the server's
// Serve watches the files for as long as it serves. A TLS serves one Server.
//
// With mutual TLS only authenticated clients exist for the server: a client without a
// certificate the CA signed is refused at the handshake (and, as a second lock, any stream
// without a verified certificate is refused before the tracker sees it), so it can neither
// read resources nor hold or confirm a map. Without a client CA (server-only TLS) or without
// TLS, every client is anonymous and every client counts.
type TLS struct {
	cert     *certwatcher.CertWatcher
	clientCA *clientCA     // nil without mutual TLS
	policy   *ClientPolicy // which identities see which namespaces; empty: all see all
}

// LoadTLS loads the xDS port's TLS from PEM files: the server certificate and key, and,
// when clientCAFile is set, mutual TLS that refuses any client without a certificate signed
// by that CA. Empty certFile and keyFile mean plaintext (nil, nil). Unreadable or invalid
// files are an error here; once serving, a certificate and key that change on disk are used
// for the next connections (a pair that does not load leaves the last good one in use), and
// the client CA bundle is read again at each handshake. clientNamespaces are the rules of
// a ClientPolicy (see ParseClientPolicy); they need mutual TLS.
func LoadTLS(certFile, keyFile, clientCAFile string, clientNamespaces ...string) (*TLS, error) {
	policy, err := ParseClientPolicy(clientNamespaces)
	if err != nil {
		return nil, err
	}
	if !policy.Empty() && clientCAFile == "" {
		return nil, errors.New("--xds-client-namespaces needs --xds-client-ca: without mutual TLS no xds client has an identity")
	}
	if certFile == "" && keyFile == "" {
		if clientCAFile != "" {
			return nil, errors.New("--xds-client-ca needs --xds-tls-cert and --xds-tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--xds-tls-cert and --xds-tls-key go together")
	}
	t := &TLS{policy: policy}
	if clientCAFile != "" {
		ca := &clientCA{path: clientCAFile}
		data, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read --xds-client-ca: %w", err)
		}
		if ca.pool = parseCAs(data); ca.pool == nil {
			return nil, fmt.Errorf("--xds-client-ca %s holds no PEM certificate", clientCAFile)
		}
		ca.pem = data
		t.clientCA = ca
	}
	cw, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load --xds-tls-cert %s and --xds-tls-key %s: %w", certFile, keyFile, err)
	}
	t.cert = cw
	return t, nil
}

// serverOptions are the gRPC server options of the xDS port's TLS: its credentials and the
// interceptor that authenticates every stream and gives it its Access.
func (t *TLS) serverOptions(log *zap.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(t.config(log))), grpc.ChainStreamInterceptor(t.streamInterceptor(log))}
}

// config is the server side tls.Config: the watched certificate and, with a client CA,
// a per-handshake configuration carrying the CA bundle as it is on disk.
func (t *TLS) config(log *zap.Logger) *tls.Config {
	cfg := &tls.Config{GetCertificate: t.cert.GetCertificate, MinVersion: tls.VersionTLS12}
	if t.clientCA == nil {
		return cfg
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = t.clientCA.current(log)
	base := cfg.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = t.clientCA.current(log)
		return c, nil
	}
	return cfg
}

// watch reloads the certificate and key on every change of their files, and logs each
// certificate loaded, until ctx is done.
func (t *TLS) watch(ctx context.Context, log *zap.Logger) {
	loaded := make(chan tls.Certificate, 1)
	// Called at once with the current certificate, then from a goroutine of its own at each
	// reload: nothing is logged once ctx is done.
	t.cert.RegisterCallback(func(c tls.Certificate) {
		select {
		case loaded <- c:
		case <-ctx.Done():
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := t.cert.Start(ctx); err != nil {
			log.Error("xds tls certificate watch stopped; the certificate no longer reloads", zap.Error(err))
		}
	}()
	for {
		select {
		case c := <-loaded:
			if c.Leaf != nil {
				log.Info("xds tls certificate loaded", zap.String("subject", c.Leaf.Subject.String()),
					zap.String("serial", c.Leaf.SerialNumber.String()), zap.Time("notAfter", c.Leaf.NotAfter))
			}
		case <-done:
			return
		}
	}
}

// clientCA is the client CA bundle, read again at each handshake and parsed again when its
// content changed.
type clientCA struct {
	path string

	mu   sync.Mutex
	pem  []byte
	pool *x509.CertPool
}

// current returns the pool of the bundle on disk, or the last good pool when the file
// cannot be read or holds no certificate.
func (c *clientCA) current(log *zap.Logger) *x509.CertPool {
	data, err := os.ReadFile(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		log.Warn("read --xds-client-ca failed; keeping the last good bundle", zap.Error(err))
		return c.pool
	}
	if bytes.Equal(data, c.pem) {
		return c.pool
	}
	pool := parseCAs(data)
	if pool == nil {
		log.Warn("--xds-client-ca holds no PEM certificate; keeping the last good bundle", zap.String("file", c.path))
		return c.pool
	}
	c.pem, c.pool = data, pool
	log.Info("xds client ca bundle reloaded", zap.String("file", c.path))
	return pool
}

// parseCAs returns the certificates of a PEM bundle as a pool, or nil when it holds none.
func parseCAs(data []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil
	}
	return pool
}
