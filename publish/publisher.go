package publish

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/trafficmap/publisher/api/tmclient"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/xds"
)

// Index names on the TrafficMap informer.
const (
	indexByService   = "byService"   // namespace/spec.service
	indexByRouteName = "byRouteName" // namespace/route name
	indexBySource    = "bySource"    // on owned Services: their TrafficMap's namespace/name
)

// maxRetryDelay caps the per-key retry backoff, so that after an API server outage every
// key is retried within this long of the API coming back.
const maxRetryDelay = 5 * time.Second

// Publisher runs the control loop. Create it with New and start it with Run.
type Publisher struct {
	cfg      Config
	log      *zap.Logger
	clients  clients
	sink     httproute.Config
	writer   *httproute.Writer
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder record.EventRecorder
	events   record.EventBroadcaster

	maps     []cache.SharedIndexInformer // one per watched namespace ("" = all)
	isvcs    []cache.SharedIndexInformer
	routes   []cache.SharedIndexInformer
	services []cache.SharedIndexInformer
	scopes   []string

	// The optional taint sources (cluster-scoped), nil while their API is not served. Set in
	// Run before any worker starts.
	inferenceClusters cache.SharedIndexInformer
	workloadClusters  cache.SharedIndexInformer

	// xds is the xDS sink, nil when it is off.
	xds *xdsSink
	// http serves metrics, health and debug endpoints; nil when off.
	http *httpServer
	// metrics records the publisher's own metrics; nil without a registry.
	metrics *metrics
	// xdsClients is the set of connected xDS node ids last seen, to spot (dis)connections.
	xdsClients string
}

type clients struct {
	kube    kubernetes.Interface
	gateway gwclient.Interface
	maps    *tmclient.Clientset
	meta    metadata.Interface
	dyn     dynamic.Interface
}

// New validates cfg and builds a Publisher talking to the API server at rc. It does not
// contact the API server; Run does.
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

	var c clients
	if c.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	if c.gateway, err = gwclient.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("build gateway api client: %w", err)
	}
	if c.maps, err = tmclient.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("build trafficmap client: %w", err)
	}
	if c.meta, err = metadata.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("build metadata client: %w", err)
	}
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("build dynamic client: %w", err)
	}

	p := &Publisher{
		cfg:     cfg,
		log:     log,
		clients: c,
		sink: httproute.Config{
			Gateway:         cfg.Gateway,
			GatewaySection:  cfg.GatewaySection,
			HostTemplate:    tmpl,
			RewriteHostname: cfg.RewriteHostname,
		},
		writer: httproute.NewWriter(c.kube, c.gateway, cfg.FieldManager),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](5*time.Millisecond, maxRetryDelay),
				&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: newBucket()},
			),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "trafficmaps"},
		),
		scopes: cfg.Namespaces,
	}
	if len(p.scopes) == 0 {
		p.scopes = []string{corev1.NamespaceAll}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(v1beta1.AddToScheme(scheme))
	p.events = record.NewBroadcaster()
	p.recorder = p.events.NewRecorder(scheme, corev1.EventSource{Component: cfg.FieldManager})
	p.buildInformers()
	if cfg.HTTPAddress != "" {
		if p.http, err = newHTTPServer(cfg.HTTPAddress); err != nil {
			return nil, err
		}
		if cfg.Registerer == nil {
			cfg.Registerer = p.http.registry
			p.cfg.Registerer = p.http.registry
		}
	}
	p.metrics = newMetrics(p.cfg.Registerer)
	if cfg.sinkOn(SinkXDS) {
		if p.xds, err = newXDSSink(cfg, log.Named("xds"), p.onXDSClientChange); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// XDSClients returns what each connected xDS client has ACKed and NACKed, or nil when the
// xDS sink is off.
func (p *Publisher) XDSClients() []xds.ClientState {
	if p.xds == nil {
		return nil
	}
	return p.xds.server.Tracker().Clients()
}

// XDSAddr is where the xDS server listens, or nil when the xDS sink is off.
func (p *Publisher) XDSAddr() net.Addr {
	if p.xds == nil {
		return nil
	}
	return p.xds.Addr()
}

func (p *Publisher) buildInformers() {
	resync := p.cfg.ResyncPeriod
	managed := labels.SelectorFromSet(labels.Set{httproute.LabelManagedBy: httproute.ManagedByValue}).String()
	for _, ns := range p.scopes {
		maps := cache.NewSharedIndexInformer(
			&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return p.clients.maps.TrafficMaps(ns).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return p.clients.maps.TrafficMaps(ns).Watch(ctx, o)
				},
			},
			&v1beta1.TrafficMap{}, resync,
			cache.Indexers{
				cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
				indexByService:       indexTrafficMapByService,
				indexByRouteName:     indexTrafficMapByRoute,
				indexByCluster:       indexTrafficMapByCluster,
			},
		)
		isvcs := metadatainformer.NewFilteredMetadataInformer(p.clients.meta, v1beta1.InferenceServicesResource, ns, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
		routes := gwinformers.NewSharedInformerFactoryWithOptions(p.clients.gateway, resync, gwinformers.WithNamespace(ns)).
			Gateway().V1().HTTPRoutes().Informer()
		services := kubeinformers.NewSharedInformerFactoryWithOptions(p.clients.kube, resync, kubeinformers.WithNamespace(ns),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managed })).
			Core().V1().Services().Informer()

		_ = services.AddIndexers(cache.Indexers{indexBySource: indexServiceBySource}) // cannot fail before it runs
		for _, inf := range []cache.SharedIndexInformer{maps, isvcs, routes, services} {
			_ = inf.SetTransform(dropManagedFields) // cannot fail before the informer runs
		}
		p.handle(maps, p.onTrafficMap)
		p.handle(isvcs, p.onInferenceService)
		p.handleTolerationEvents(isvcs)
		if p.cfg.sinkOn(SinkHTTPRoute) {
			p.handle(routes, p.onRoute)
			p.handle(services, p.onOwnedObject)
			p.routes = append(p.routes, routes)
			p.services = append(p.services, services)
		}
		p.maps = append(p.maps, maps)
		p.isvcs = append(p.isvcs, isvcs)
	}
}

// dropManagedFields is every informer's transform: the publisher never reads
// metadata.managedFields, which is often the larger part of a cached object, so the caches
// do not keep it. It edits the freshly decoded object before it enters the cache.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Run starts the informers, waits for their caches, runs the workers and blocks until ctx
// is done. It returns an error only when the caches cannot sync.
func (p *Publisher) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer p.queue.ShutDown()
	p.events.StartRecordingToSink(eventSink{sink: &typedcorev1.EventSinkImpl{Interface: p.clients.kube.CoreV1().Events("")}, log: p.log})
	defer p.events.Shutdown()

	if err := p.checkAPIs(); err != nil {
		return err
	}
	var synced []cache.InformerSynced
	for _, group := range []struct {
		resource string
		infs     []cache.SharedIndexInformer
	}{
		{"trafficmaps.ome.io", p.maps}, {"inferenceservices.ome.io", p.isvcs},
		{"httproutes.gateway.networking.k8s.io", p.routes}, {"services", p.services},
	} {
		for _, inf := range group.infs {
			p.reportWatchErrors(inf, group.resource)
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
	p.log.Info("waiting for informer caches", zap.Strings("namespaces", p.cfg.Namespaces))
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopped before the caches synced: a normal stop
	}
	p.log.Info("caches synced; starting workers", zap.Int("workers", p.cfg.Workers))

	var wg sync.WaitGroup
	if p.http != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.http.serve(ctx, p)
		}()
	}
	if p.xds != nil {
		// The first snapshot is built from synced caches before any client is answered or
		// any map's confirmation is judged.
		if err := p.rebuildXDS(ctx); err != nil {
			p.log.Error("first xds snapshot not built; retrying", zap.Error(err))
			p.xds.queue.Add(xdsSnapshotKey)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.xds.server.Serve(ctx, p.xds.listener); err != nil {
				p.log.Error("xds server stopped", zap.Error(err))
			}
		}()
		go func() {
			defer wg.Done()
			for p.processXDS(ctx) {
			}
		}()
		p.log.Info("serving xds", zap.String("address", p.xds.Addr().String()))
	}
	if p.http != nil {
		p.http.ready.Store(true)
	}
	var workErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		workErr = p.runWorkers(ctx)
	}()
	<-ctx.Done()
	p.queue.ShutDown()
	if p.xds != nil {
		p.xds.queue.ShutDown()
	}
	wg.Wait()
	p.log.Info("stopped")
	return workErr
}

// reportWatchErrors logs an informer's list and watch failures through the publisher's
// logger (client-go logs them only to klog), a permission error as an error that names the
// resource and points at RBAC.
func (p *Publisher) reportWatchErrors(inf cache.SharedIndexInformer, resource string) {
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsForbidden(err) {
			p.log.Error("permission denied: cannot list or watch "+resource+"; check the publisher's RBAC", zap.String("resource", resource), zap.Error(err))
			return
		}
		p.log.Info("list or watch failed; retrying", zap.String("resource", resource), zap.Error(err))
	})
}

func (p *Publisher) runWorker(ctx context.Context) {
	for p.processNext(ctx) {
	}
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
	err := p.reconcile(ctx, key, log)
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
	return true
}
