package publish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// httpServer serves /metrics, /healthz, /readyz (ready once the caches synced and, with the
// xDS sink, the first snapshot was built) and, with the xDS sink, /debug/xds.
type httpServer struct {
	listener net.Listener
	registry *prometheus.Registry
	ready    atomic.Bool
}

func newHTTPServer(address string) (*httpServer, error) {
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen on --http-address %s: %w", address, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &httpServer{listener: lis, registry: reg}, nil
}

func (h *httpServer) serve(ctx context.Context, p *Publisher) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.ready.Load() {
			http.Error(w, "informer caches not synced or first xds snapshot not built", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if p.xds != nil {
		mux.Handle("/debug/xds", p.xds.server.DebugHandler())
	}
	if p.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(h.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.log.Error("http server stopped", zap.Error(err))
	}
}

// HTTPAddr is where /metrics, /healthz, /readyz and /debug/xds are served, or nil when
// the HTTP server is off.
func (p *Publisher) HTTPAddr() net.Addr {
	if p.http == nil {
		return nil
	}
	return p.http.listener.Addr()
}
