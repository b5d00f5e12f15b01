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
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
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
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/publish/lease"
	"github.com/trafficmap/publisher/resolve"
	"github.com/trafficmap/publisher/xds"
)

// maxRetryDelay caps the per-key retry backoff, so that after an API server outage every
// key is retried within this long of the API coming back.
const maxRetryDelay = 5 * time.Second

// Publisher is the controller: it wires the informers (caches) through the event handlers
// (router) to one rate-limited queue of TrafficMap keys, and runs the pipeline (reconciler)
// on its workers: all of it while this replica leads (elector), its first floors otherwise.
// Create it with New and start it with Run.
type Publisher struct {
	cfg     Config
	log     *zap.Logger
	clients clients
	caches  *caches
	queue   priorityqueue.PriorityQueue[cache.ObjectName]
	router  *router
	work    *workers
	events  record.EventBroadcaster
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
	// classes, resolver and envoyBackends serve the HTTPRoute sink's backend kinds
	// (backends.go); nil / unset without that sink. Run starts classes and resolver.
	classes       *gatewayClasses
	resolver      *resolve.Cache
	envoyBackends atomic.Bool // Envoy Gateway's Backend API is served (read in Run)
}

type clients struct {
	kube    kubernetes.Interface
	gateway gwclient.Interface
	maps    omeclient.Interface
	meta    metadata.Interface
	dyn     dynamic.Interface
}

// newClients builds the publisher's clients over rc. The built-in kinds (Services, Events,
// Leases, ConfigMaps) travel as protobuf, as kube-controller-manager's do: their watch
// events and write responses cost the API server and the publisher a fraction of JSON's
// decoding (at 10,000 maps, 80,000 Services). Custom resources only speak JSON.
func newClients(rc *rest.Config) (clients, error) {
	var c clients
	var err error
	if c.kube, err = kubernetes.NewForConfig(asProtobuf(rc)); err != nil {
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

// asProtobuf returns a copy of rc that asks for and sends protobuf, JSON accepted too.
func asProtobuf(rc *rest.Config) *rest.Config {
	pc := rest.CopyConfig(rc)
	pc.ContentType = runtime.ContentTypeProtobuf
	pc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return pc
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
	wire(p)
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
	watchGauges(p.cfg.Registerer, p.elector.leading.Load, func() int { return mapCount(p.caches.maps) }, func() (int, time.Duration) { return p.caches.unpublished(time.Now()) }, func() int { return ramping(p.caches.maps) },
		func() map[model.FallbackReason]int { return countFallbacks(p.caches.maps) })

	addRouteSinks(p, route)
	if cfg.sinkOn(SinkXDS) {
		if err := addXDSSink(p); err != nil {
			return nil, err
		}
	}
	p.rec = &reconciler{
		inputs:  p.caches,
		hosts:   route,
		sinks:   p.sinks,
		status:  newStatusWriter(clientStatusAPI{maps: c.maps, manager: cfg.FieldManager}, p.recorder, p.metrics),
		metrics: p.metrics,
		claims:  newScopedClaimTable(p.caches.scoped), publisher: cfg.publisherName(), digest: cfg.optionsDigest(), takeOverFrom: cfg.TakeOverFrom,
		known: cfg.KnownPublishers, holders: newHolderLog(), ignored: newHolderLog(), grants: p.caches.claimRecords, claimPolicy: cfg.claimPolicy(),
		teardowns: newTeardownClock(cfg.TeardownTimeout),
		lagging:   func() bool { return len(p.health.failing(time.Now())) > 0 },
		watches:   func(ns string) bool { return watches(p.caches, ns) },
	}
	if !cfg.sinkOn(SinkHTTPRoute) {
		p.rec.record = &recordStore{kube: c.kube, manager: cfg.FieldManager, cached: p.caches.record}
	}
	p.work.rec, p.work.metrics, p.work.n = p.rec, p.metrics, cfg.Workers
	p.router.register(p.handleTolerationEvents)
	return p, nil
}

// addRouteSinks adds the HTTPRoute sink or, with it off, the sink that retires what it wrote
// before (httproute.RetiringSink).
func addRouteSinks(p *Publisher, route httproute.Config) {
	cfg, c := p.cfg, p.clients
	if cfg.sinkOn(SinkHTTPRoute) {
		var sink *httproute.Sink // set below; the writer asks it whether the gateway serves a route
		serves := func(r *gwapiv1.HTTPRoute) bool { return !cfg.RequireRouteAccepted || sink.Serves(r) }
		writer := httproute.NewWriter(c.kube, c.gateway, cfg.FieldManager).WithBackendKinds(c.dyn, p.envoyBackends.Load,
			serves) // the old kind's objects go once the gateway serves the new ones
		p.classes = newGatewayClasses(c.gateway, p.router.enqueueAll)
		p.resolver = newResolver(cfg, p)
		if cfg.adoptsFromOME() {
			// OME's Services go once the gateway accepted the route without them (at once
			// when acceptance is not required: nothing reports it then).
			writer = writer.AdoptingFromOME(serves)
		}
		sink = httproute.NewSink(httproute.SinkConfig{Route: route, RequireAccepted: cfg.RequireRouteAccepted,
			RetainLastPositive: cfg.NoPositivePolicy == RetainLastPositive, BackendKind: cfg.BackendKind,
			ControllerNames: p.classes.controllerName, Resolver: p.resolver, Settle: cfg.RouteSettle}, writer, sinkStore{p.caches})
		p.sinks = append(p.sinks, sink)
	}
	if !cfg.sinkOn(SinkHTTPRoute) {
		// What the HTTPRoute sink wrote before it was turned off goes in order (weights,
		// then removal) before a map is Published without it.
		p.sinks = append(p.sinks, httproute.NewRetiringSink(httproute.SinkConfig{Route: route, RequireAccepted: cfg.RequireRouteAccepted},
			httproute.NewWriter(c.kube, c.gateway, cfg.FieldManager), sinkStore{p.caches}))
	}
}

// wire builds the publisher's event handlers and workers around its caches and queue.
func wire(p *Publisher) {
	p.work = &workers{log: p.log, queue: p.queue, maps: p.caches}
	p.router = &router{caches: p.caches, enqueue: p.enqueue}
}

// addXDSSink adds the xDS sink and, with leader election, the replicas' exchange of its
// confirmations (package lease).
func addXDSSink(p *Publisher) error {
	cfg, log := p.cfg, p.log
	var peers func() []replicas.Report
	le := p.elector.cfg
	if le.Enabled {
		p.board = lease.NewBoard(p.clients.kube, le.Namespace, le.Name, le.Identity, func(keys []string) {
			for _, k := range keys { // the peers' reports on these maps changed
				ns, name, _ := strings.Cut(k, "/")
				p.work.requeue(cache.NewObjectName(ns, name))
			}
		}, log.Named("replicas"))
		peers = p.board.Peers
	}
	xs, err := xds.NewSink(xds.SinkConfig{
		Address: cfg.XDSAddress, ListenerAddress: cfg.XDSListenerAddress,
		TLSCert: cfg.XDSTLSCert, TLSKey: cfg.XDSTLSKey, ClientCA: cfg.XDSClientCA, ClientNamespaces: cfg.XDSClientNamespaces,
		RequireAck: cfg.RequireXDSAck, MinClients: cfg.XDSMinClients, Registerer: p.cfg.Registerer,
		ReconnectGrace: cfg.XDSReconnectGrace,
		DepartedGrace:  cfg.XDSDepartedGrace,
		Peers:          peers,
		Limits: xds.Limits{MaxNames: cfg.XDSMaxNames, MaxRequestBytes: cfg.XDSMaxRequestBytes,
			MaxStreamsPerConnection: uint32(cfg.XDSMaxStreamsPerConnection), // validated: 0..MaxInt32
			MaxConnectionsPerClient: cfg.XDSMaxConnectionsPerClient},
	}, log.Named("xds"))
	if errors.Is(err, xds.ErrInvalidSinkConfig) {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err != nil {
		return err
	}
	p.sinks = append(p.sinks, xs)
	if p.board == nil {
		return nil
	}
	p.board.Grace = cfg.XDSPeerGrace
	p.board.OnExpire = func(string) {
		if p.elector.leading.Load() {
			xs.Leading() // the replica's clients reconnect to the others: the reconnect grace again
			xs.Replica().PeerLeft()
		}
	}
	p.board.OnArrived = func(tags []string) {
		if p.elector.leading.Load() {
			xs.Replica().PeerArrived(tags) // a client that left this replica may be counted there now
		}
	}
	p.board.OnBack = func(string) {
		if p.elector.leading.Load() {
			xs.Leading() // the clients it fenced or lost reconnect: the reconnect grace again
		}
	}
	replica := xs.Replica()
	p.report = &lease.Writer{Kube: p.clients.kube, Namespace: le.Namespace, Election: le.Name, Identity: le.Identity,
		Duration: le.LeaseDuration, FieldManager: cfg.FieldManager, Log: log.Named("replicas"),
		Build: func() replicas.Report { return replica.Report(p.caches.unconfirmed()) },
		// A replica that cannot renew its report stops serving before the leader
		// stops counting it, so its clients move to replicas that count.
		Fence: replica.Fence, Unfence: replica.Unfence}
	if p.http != nil {
		p.http.fenced = replica.Fenced // a fenced replica is not ready
	}
	return nil
}

// XDSClients returns what each connected xDS client has ACKed and NACKed, or nil when the
// xDS sink is off.
func (p *Publisher) XDSClients() []xds.ClientState {
	for _, s := range p.sinks {
		if x, ok := s.(*xds.Sink); ok {
			return x.Replica().Clients()
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

// Run serves /healthz at once, starts the informers, waits for their caches, hands every
// cached map's plan to the sinks that serve on every replica, starts the sinks, marks the
// publisher ready and runs the workers until ctx is done: the whole pipeline while leading,
// its first floors otherwise. It returns an error when the APIs it needs are not served or
// the caches cannot sync.
func (p *Publisher) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer p.work.shutDown()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	goWith := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	goWith(func() { // workers blocked on an empty queue return once it is shut
		<-ctx.Done()
		p.work.shutDown()
	})
	if p.http != nil {
		goWith(func() { p.http.serve(ctx, p.log, debugHandlers(p.board, p.sinks)) })
	}
	p.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.clients.kube.CoreV1().Events("")})
	defer p.events.Shutdown()

	if err := p.checkAPIs(); err != nil {
		return err
	}
	synced, err := startInformers(ctx, p, goWith)
	if err != nil {
		return err
	}
	p.log.Info("waiting for informer caches", zap.Strings("namespaces", p.cfg.Namespaces))
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the caches synced: a normal stop
	}
	p.log.Info("caches synced; starting workers", zap.Int("workers", p.cfg.Workers))
	if err := startSinks(ctx, p, goWith); err != nil {
		return err
	}
	if p.resolver != nil {
		p.envoyBackends.Store(envoyBackendsServed(p.clients.kube.Discovery()))
		goWith(func() { p.resolver.Run(ctx) })
		goWith(func() { p.classes.run(ctx) })
	}
	if p.http != nil {
		p.http.ready.Store(true)
	}
	goWith(func() { p.work.run(ctx) })
	goWith(func() {
		returnIdleMemory(ctx, p.log, backlogQuiet, idleEvery, p.work.queue.Len, runtimeHeapIdle, freeOSMemory)
	})
	err = p.elector.run(ctx, func(lctx context.Context) {
		for _, s := range p.sinks {
			if l, ok := s.(model.Leading); ok {
				l.Leading() // clients of the previous leader may be reconnecting here
			}
		}
		if !p.leadClaims(lctx) { // the upgrade import comes before the leader's first reconcile
			return
		}
		p.work.leadTerm(lctx, p.router.enqueueAll) // the previous leader may have left work undone
	})
	cancel()
	p.work.shutDown()
	wg.Wait()
	p.log.Info("stopped")
	return err
}

// startInformers starts the informers, the optional taint sources and the replicas' board
// (each with goWith), and returns what must sync before any worker runs.
func startInformers(ctx context.Context, p *Publisher, goWith func(func())) ([]cache.InformerSynced, error) {
	var synced []cache.InformerSynced
	for _, group := range []struct {
		resource string
		infs     []cache.SharedIndexInformer
	}{
		{"trafficmaps.ome.io", p.caches.maps}, {"inferenceservices.ome.io", p.caches.isvcs},
		{"httproutes.gateway.networking.k8s.io", p.caches.routes}, {"services", p.caches.services},
		{"configmaps", p.caches.records}, {"configmaps", []cache.SharedIndexInformer{p.caches.claimRecords.inf}},
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
		return nil, err
	}
	synced = append(synced, fleet...)
	if p.board != nil {
		goWith(func() { p.board.Run(ctx) })
		synced = append(synced, p.board.HasSynced)
	}
	return synced, nil
}

// startSinks primes the sinks that serve on every replica with every cached map's plan,
// writes this replica's first report, and starts the sinks (each with goWith); the
// replicas' report is written from then on.
func startSinks(ctx context.Context, p *Publisher, goWith func(func())) error {
	var keys []cache.ObjectName
	for _, key := range p.caches.keys() {
		ns, name, _ := strings.Cut(key, "/")
		keys = append(keys, cache.NewObjectName(ns, name))
	}
	p.work.prime(keys) // the first snapshot is complete: no map is missing from it
	if p.report != nil {
		// Reported before any client is served: the leader counts this replica's clients
		// from the first one on.
		if err := p.report.First(ctx); err != nil {
			p.log.Info("first xds report not written; xds is fenced (no stream served) until a write lands", zap.Error(err))
		}
	}
	for _, s := range p.sinks {
		if u, ok := s.(model.Updater); ok {
			goWith(func() { p.work.listen(ctx, u) })
		}
		if st, ok := s.(model.Starter); ok {
			wait, err := st.Start(ctx)
			if err != nil {
				return fmt.Errorf("start %s sink: %w", s.Name(), err)
			}
			goWith(wait)
		}
	}
	if p.report != nil { // after the first snapshot: the report judges what is served
		goWith(func() { p.report.Run(ctx) })
	}
	return nil
}

// debugHandlers are the replicas' board's and the sinks' debug endpoints.
func debugHandlers(board *lease.Board, sinks []model.Sink) map[string]http.Handler {
	out := map[string]http.Handler{}
	if board != nil {
		out["/debug/replicas"] = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(board.Replicas())
		})
	}
	for _, s := range sinks {
		if d, ok := s.(model.Debugger); ok {
			for path, h := range d.DebugHandlers() {
				out[path] = h
			}
		}
	}
	return out
}

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
