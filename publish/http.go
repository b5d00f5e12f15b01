package publish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// httpServer serves /metrics, /healthz (from the start: the process is alive),
// /readyz (ready once the caches synced and the sinks started, and while no watch is
// failing and the xDS server is not fenced) and the sinks' debug endpoints (/debug/xds, /debug/replicas, and Go's profiles
// under /debug/pprof/ when enabled). With a debug listener the debug endpoints are served
// there alone, never on the main listener (which a Service exposes): they list every
// client, node id and map.
type httpServer struct {
	listener net.Listener // --http-address; nil when off
	debug    net.Listener // --debug-address; nil: the debug endpoints are on listener
	registry *prometheus.Registry
	ready    atomic.Bool
	health   *watchHealth
	pprof    bool
	// fenced reports whether the xDS server is fenced (lease.Writer could not renew this
	// replica's report): the replica is then not ready, so a Service stops sending it new
	// clients. nil: never fenced. Set before serve.
	fenced func() bool
}

// newHTTPServer listens on address (--http-address) and, when set, debugAddress
// (--debug-address); an empty address is not listened on.
func newHTTPServer(address, debugAddress string, health *watchHealth, enablePprof bool) (*httpServer, error) {
	h := &httpServer{health: health, pprof: enablePprof}
	if address != "" {
		lis, err := net.Listen("tcp", address)
		if err != nil {
			return nil, fmt.Errorf("listen on --http-address %s: %w", address, err)
		}
		h.listener = lis
	}
	if debugAddress != "" {
		lis, err := net.Listen("tcp", debugAddress)
		if err != nil {
			if h.listener != nil {
				_ = h.listener.Close()
			}
			return nil, fmt.Errorf("listen on --debug-address %s: %w", debugAddress, err)
		}
		h.debug = lis
	}
	h.registry = NewRegistry()
	return h, nil
}

// NewRegistry returns the registry that --http-address serves on /metrics before the
// publisher adds its own metrics: the Go runtime's and the process's collectors. New
// registers the publisher's metrics in it, or in Config.Registerer when that is set.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serve serves until ctx is done.
func (h *httpServer) serve(ctx context.Context, log *zap.Logger, debug map[string]http.Handler) {
	mux := http.NewServeMux()
	debugMux := mux
	if h.debug != nil {
		debugMux = http.NewServeMux()
	}
	mux.Handle("/metrics", promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.ready.Load() {
			http.Error(w, "informer caches not synced or sinks not started", http.StatusServiceUnavailable)
			return
		}
		if h.fenced != nil && h.fenced() {
			http.Error(w, "xds server fenced: this replica's report to the leader is not renewed", http.StatusServiceUnavailable)
			return
		}
		if failing := h.health.failing(time.Now()); len(failing) > 0 {
			http.Error(w, "list or watch failing for "+strings.Join(failing, ", "), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	for path, handler := range debug {
		debugMux.Handle(path, handler)
	}
	if h.pprof {
		debugMux.HandleFunc("/debug/pprof/", pprof.Index)
		debugMux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		debugMux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		debugMux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		debugMux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	var wg sync.WaitGroup
	for _, l := range []struct {
		lis     net.Listener
		handler http.Handler
		name    string
	}{{h.listener, mux, "http"}, {h.debug, debugMux, "debug http"}} {
		if l.lis == nil {
			continue
		}
		srv := &http.Server{Handler: l.handler, ReadHeaderTimeout: 10 * time.Second}
		log.Info("serving "+l.name, zap.String("address", l.lis.Addr().String()))
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		go func() {
			defer wg.Done()
			if err := srv.Serve(l.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(l.name+" server stopped", zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// watchFailureWindow is how long a list or watch failure keeps a resource "failing": a
// reflector retries a failing watch at least every 30 s (its backoff cap), so a watch that
// still fails reports again within the window, and a healed one drops out after it.
const watchFailureWindow = 40 * time.Second

// watchHealth records the informers' list and watch failures: it logs a warning per
// failing resource at most once per window (client-go logs every retry itself, through
// klog at its own verbosity) and tells readiness which resources are failing. Guarded by mu.
type watchHealth struct {
	log *zap.Logger

	mu     sync.Mutex
	last   map[string]time.Time // resource -> last failure
	warned map[string]time.Time // resource -> last warning
}

func newWatchHealth(log *zap.Logger) *watchHealth {
	return &watchHealth{log: log, last: map[string]time.Time{}, warned: map[string]time.Time{}}
}

// handler is the watch error handler of the informers of resource.
func (h *watchHealth) handler(resource string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		now := time.Now()
		h.mu.Lock()
		h.last[resource] = now
		warn := now.Sub(h.warned[resource]) >= watchFailureWindow
		if warn {
			h.warned[resource] = now
		}
		h.mu.Unlock()
		if !warn {
			return
		}
		if apierrors.IsForbidden(err) {
			h.log.Error("permission denied: cannot list or watch "+resource+"; check the publisher's RBAC", zap.String("resource", resource), zap.Error(err))
			return
		}
		h.log.Warn("list or watch failing; retrying", zap.String("resource", resource), zap.Error(err))
	}
}

// failing lists, sorted, the resources whose list or watch failed within the window.
func (h *watchHealth) failing(now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for resource, at := range h.last {
		if now.Sub(at) < watchFailureWindow {
			out = append(out, resource)
		}
	}
	slices.Sort(out)
	return out
}
