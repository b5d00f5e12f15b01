package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/publish/lease"
	"github.com/trafficmap/publisher/publish/xdssink"
	"github.com/trafficmap/publisher/xds"
)

// maxRetryDelay caps the per-key retry backoff, so that after an API server outage every
// key is retried within this long of the API coming back.
const maxRetryDelay = 5 * time.Second

// Publisher is the controller: it wires the informers (caches) to one rate-limited queue of
// TrafficMap keys and runs the reconcile pipeline (reconciler) on its workers, while this
// replica leads (elector). Create it with New and start it with Run.
type Publisher struct {
	cfg     Config
	log     *zap.Logger
	clients clients
	caches  *caches
	queue   priorityqueue.PriorityQueue[cache.ObjectName]
	// queueStop shuts queue down once (shutDownQueue).
	queueStop sync.Once
	// reconciled holds the keys of the cached maps reconciled at least once since this
	// replica started (see requeue); the workers write it, the sinks' callbacks read it.
	reconciled sync.Map
	events     record.EventBroadcaster
	// recorder records Events only while this replica leads.
	recorder *leaderRecorder
	rec      *reconciler
	sinks    []model.Sink
	elector  *elector
	health   *watchHealth
	// http serves metrics, health and debug endpoints; nil when off.
	http *httpServer
	// metrics records the publisher's own metrics; nil without a registry.
	metrics *metrics
	// board and report exchange the replicas' xDS confirmations (package replicas); nil
	// without leader election or without the xDS sink.
	board  *lease.Board
	report *lease.Writer
}

type clients struct {
	kube    kubernetes.Interface
	gateway gwclient.Interface
	maps    omeclient.Interface
	meta    metadata.Interface
	dyn     dynamic.Interface
}

func newClients(rc *rest.Config) (clients, error) {
	var c clients
	var err error
	if c.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return c, fmt.Errorf("build kubernetes client: %w", err)
	}
	if c.gateway, err = gwclient.NewForConfig(rc); err != nil {
		return c, fmt.Errorf("build gateway api client: %w", err)
	}
	if c.maps, err = omeclient.NewForConfig(rc); err != nil {
		return c, fmt.Errorf("build trafficmap client: %w", err)
	}
	if c.meta, err = metadata.NewForConfig(rc); err != nil {
		return c, fmt.Errorf("build metadata client: %w", err)
	}
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return c, fmt.Errorf("build dynamic client: %w", err)
	}
	return c, nil
}

// New validates cfg and builds a Publisher talking to the API server at rc. It does not
// contact the API server; Run does. It listens on the configured ports.
func New(cfg Config, rc *rest.Config, log *zap.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	tmpl, err := cfg.hostTemplate()
	if err != nil {
		return nil, err
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	if rc.UserAgent == "" {
		rc.UserAgent = cfg.FieldManager
	}
	c, err := newClients(rc)
	if err != nil {
		return nil, err
	}

	route := httproute.Config{Gateway: cfg.Gateway, GatewaySection: cfg.GatewaySection, HostTemplate: tmpl, RewriteHostname: cfg.RewriteHostname}
	p := &Publisher{
		cfg:     cfg,
		log:     log,
		clients: c,
		caches:  newCaches(c, cfg, route),
		queue:   newQueue(),
		health:  newWatchHealth(log),
	}
	if p.elector, err = newElector(cfg.LeaderElection, c.kube, log); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(v1beta1.AddToScheme(scheme))
	p.events = record.NewBroadcaster()
	p.recorder = &leaderRecorder{EventRecorder: p.events.NewRecorder(scheme, corev1.EventSource{Component: cfg.FieldManager}), leading: p.elector.leading}
	if cfg.HTTPAddress != "" || cfg.DebugAddress != "" {
		if p.http, err = newHTTPServer(cfg.HTTPAddress, cfg.DebugAddress, p.health, cfg.EnablePprof); err != nil {
			return nil, err
		}
		if cfg.Registerer == nil {
			cfg.Registerer = p.http.registry
			p.cfg.Registerer = p.http.registry
		}
	}
	p.metrics = newMetrics(p.cfg.Registerer)
	watchGauges(p.cfg.Registerer, p.elector.leading.Load, func() (int, time.Duration) { return p.caches.unpublished(time.Now()) }, p.caches.ramping)

	if cfg.sinkOn(SinkHTTPRoute) {
		p.sinks = append(p.sinks, httproute.NewSink(httproute.SinkConfig{Route: route, RequireAccepted: cfg.RequireRouteAccepted,
			RetainLastPositive: cfg.NoPositivePolicy == RetainLastPositive},
			httproute.NewWriter(c.kube, c.gateway, cfg.FieldManager), p.caches))
	}
	var peers func() []replicas.Report
	if le := p.elector.cfg; le.Enabled && cfg.sinkOn(SinkXDS) {
		p.board = lease.NewBoard(c.kube, le.Namespace, le.Name, le.Identity, func(keys []string) {
			for _, k := range keys {
				ns, name, _ := strings.Cut(k, "/")
				p.requeue(cache.NewObjectName(ns, name))
			}
		}, log.Named("replicas"))
		peers = p.board.Peers
	}
	if cfg.sinkOn(SinkXDS) {
		xs, err := xdssink.New(xdssink.Config{
			Address: cfg.XDSAddress, ListenerAddress: cfg.XDSListenerAddress,
			TLSCert: cfg.XDSTLSCert, TLSKey: cfg.XDSTLSKey, ClientCA: cfg.XDSClientCA, ClientNamespaces: cfg.XDSClientNamespaces,
			RequireAck: cfg.RequireXDSAck, MinClients: cfg.XDSMinClients, Registerer: p.cfg.Registerer,
			ReconnectGrace: cfg.XDSReconnectGrace,
			Plans:          planSource{inputs: p.caches, hosts: route, sinks: func() []model.Sink { return p.sinks }, reader: xdssink.Name},
			Requeue:        func(ns, name string) { p.requeue(cache.NewObjectName(ns, name)) },
			Peers:          peers,
		}, log.Named("xds"))
		if errors.Is(err, xdssink.ErrInvalidConfig) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if err != nil {
			return nil, err
		}
		p.sinks = append(p.sinks, xs)
		if p.board != nil {
			p.board.OnExpire = func(string) {
				if p.elector.leading.Load() {
					xs.Leading() // the replica's clients reconnect to the others: the reconnect grace again
				}
			}
			le := p.elector.cfg
			p.report = &lease.Writer{Kube: c.kube, Namespace: le.Namespace, Election: le.Name, Identity: le.Identity,
				Duration: le.LeaseDuration, FieldManager: cfg.FieldManager, Log: log.Named("replicas"),
				Build: func() replicas.Report { return xs.Report(p.caches.unconfirmed()) },
				// A replica that cannot renew its report stops serving before the leader
				// stops counting it, so its clients move to replicas that count.
				Fence: xs.Fence, Unfence: xs.Unfence}
			if p.http != nil {
				p.http.fenced = xs.Fenced // a fenced replica is not ready
			}
		}
	}
	p.rec = &reconciler{
		inputs:  p.caches,
		hosts:   route,
		sinks:   p.sinks,
		status:  newStatusWriter(clientStatusAPI{maps: c.maps, manager: cfg.FieldManager}, p.recorder, p.metrics),
		metrics: p.metrics,
		claims:  newClaimTable(), publisher: cfg.publisherName(), digest: cfg.optionsDigest(),
	}
	if !cfg.sinkOn(SinkHTTPRoute) {
		p.rec.record = &recordStore{kube: c.kube, manager: cfg.FieldManager, cached: p.caches.record}
	}
	p.registerHandlers()
	return p, nil
}

// XDSClients returns what each connected xDS client has ACKed and NACKed, or nil when the
// xDS sink is off.
func (p *Publisher) XDSClients() []xds.ClientState {
	for _, s := range p.sinks {
		if c, ok := s.(interface{ Clients() []xds.ClientState }); ok {
			return c.Clients()
		}
	}
	return nil
}

// XDSAddr is where the xDS server listens, or nil when the xDS sink is off.
func (p *Publisher) XDSAddr() net.Addr {
	for _, s := range p.sinks {
		if a, ok := s.(interface{ Addr() net.Addr }); ok {
			return a.Addr()
		}
	}
	return nil
}

// HTTPAddr is where /metrics, /healthz, /readyz (and, without DebugAddr, /debug/xds) are
// served, or nil when the HTTP server is off.
func (p *Publisher) HTTPAddr() net.Addr {
	if p.http == nil || p.http.listener == nil {
		return nil
	}
	return p.http.listener.Addr()
}

// DebugAddr is where /debug/* are served when Config.DebugAddress is set, nil otherwise.
func (p *Publisher) DebugAddr() net.Addr {
	if p.http == nil || p.http.debug == nil {
		return nil
	}
	return p.http.debug.Addr()
}

// Run serves /healthz at once, starts the informers, waits for their caches, starts the
// sinks, marks the publisher ready and runs the workers (while leading) until ctx is done.
// It returns an error when the APIs it needs are not served or the caches cannot sync.
func (p *Publisher) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer p.shutDownQueue()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { // workers blocked on an empty queue return once it is shut
		<-ctx.Done()
		p.shutDownQueue()
	}()
	if p.http != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.http.serve(ctx, p.log, p.debugHandlers())
		}()
	}
	p.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.clients.kube.CoreV1().Events("")})
	defer p.events.Shutdown()

	if err := p.checkAPIs(); err != nil {
		return err
	}
	var synced []cache.InformerSynced
	for _, group := range []struct {
		resource string
		infs     []cache.SharedIndexInformer
	}{
		{"trafficmaps.ome.io", p.caches.maps}, {"inferenceservices.ome.io", p.caches.isvcs},
		{"httproutes.gateway.networking.k8s.io", p.caches.routes}, {"services", p.caches.services},
		{"configmaps", p.caches.records},
	} {
		for _, inf := range group.infs {
			_ = inf.SetWatchErrorHandlerWithContext(p.health.handler(group.resource)) // cannot fail before it runs
			go inf.RunWithContext(ctx)
			synced = append(synced, inf.HasSynced)
		}
	}
	// The optional taint sources start while the caches above fill; no worker runs before
	// they have synced too.
	fleet, err := p.startTaintSources(ctx)
	if err != nil {
		return err
	}
	synced = append(synced, fleet...)
	if p.board != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.board.Run(ctx)
		}()
		synced = append(synced, p.board.HasSynced)
	}
	p.log.Info("waiting for informer caches", zap.Strings("namespaces", p.cfg.Namespaces))
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the caches synced: a normal stop
	}
	p.log.Info("caches synced; starting workers", zap.Int("workers", p.cfg.Workers))

	if p.report != nil {
		// Reported before any client is served: the leader counts this replica's clients
		// from the first one on.
		if err := p.report.First(ctx); err != nil {
			p.log.Info("first xds report not written; xds is fenced (no stream served) until a write lands", zap.Error(err))
		}
	}
	for _, s := range p.sinks {
		if st, ok := s.(model.Starter); ok {
			wait, err := st.Start(ctx)
			if err != nil {
				return fmt.Errorf("start %s sink: %w", s.Name(), err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				wait()
			}()
		}
	}
	if p.report != nil { // after the first snapshot: the report judges what is served
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.report.Run(ctx)
		}()
	}
	if p.http != nil {
		p.http.ready.Store(true)
	}
	err = p.elector.run(ctx, func(ctx context.Context) {
		for _, s := range p.sinks {
			if l, ok := s.(model.Leading); ok {
				l.Leading() // clients of the previous leader may be reconnecting here
			}
		}
		p.enqueueAll() // the previous leader may have left work undone
		p.workers(ctx)
	})
	cancel()
	p.shutDownQueue()
	wg.Wait()
	p.log.Info("stopped")
	return err
}

// workers runs cfg.Workers reconcile workers until ctx is done.
func (p *Publisher) workers(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.processNext(ctx) {
			}
		}()
	}
	wg.Wait()
}

func (p *Publisher) processNext(ctx context.Context) bool {
	key, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(key)
	if ctx.Err() != nil { // leadership lost while waiting: leave the key to the next leader
		p.queue.Add(key)
		return false
	}
	log := p.log.With(zap.String("trafficmap", key.String()))
	hold, err := p.rec.reconcile(ctx, key, log)
	p.passed(key)
	p.metrics.reconciled(err)
	if err != nil {
		level := zap.InfoLevel
		switch {
		case apierrors.IsConflict(err):
			level = zap.DebugLevel // a cache behind our own last write; the retry reads it
		case apierrors.IsForbidden(err):
			level = zap.ErrorLevel // an RBAC gap: say so loudly, it does not heal by itself
		}
		log.Log(level, "reconcile failed; retrying with backoff", zap.Error(err), zap.Int("retries", p.queue.NumRequeues(key)))
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	if hold > 0 {
		p.queue.AddAfter(key, hold)
	}
	return true
}

// debugHandlers are the sinks' debug endpoints.
func (p *Publisher) debugHandlers() map[string]http.Handler {
	out := map[string]http.Handler{}
	if p.board != nil {
		out["/debug/replicas"] = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(p.board.Replicas())
		})
	}
	for _, s := range p.sinks {
		if d, ok := s.(model.Debugger); ok {
			for path, h := range d.DebugHandlers() {
				out[path] = h
			}
		}
	}
	return out
}

// shutDownQueue shuts the work queue down; it may be called more than once (the queue's
// own ShutDown may not).
func (p *Publisher) shutDownQueue() { p.queueStop.Do(p.queue.ShutDown) }

// newQueue is the publisher's work queue of TrafficMap keys: deduplicated, one worker per
// key at a time, ordered by priority (see handle) and FIFO within a priority; retries back
// off per key (5 ms doubling to maxRetryDelay) and all together (newBucket).
func newQueue() priorityqueue.PriorityQueue[cache.ObjectName] {
	return priorityqueue.New("trafficmaps", func(o *priorityqueue.Opts[cache.ObjectName]) {
		o.RateLimiter = workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, maxRetryDelay),
			&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: newBucket()},
		)
	})
}
