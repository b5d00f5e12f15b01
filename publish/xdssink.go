package publish

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

// xdsSnapshotKey is the one key of the xDS snapshot queue: every input change enqueues it,
// so a burst of changes coalesces into one rebuild.
const xdsSnapshotKey = "snapshot"

// xdsSink serves every TrafficMap's effective weights over xDS and answers, per map,
// whether the connected clients have ACKed them.
type xdsSink struct {
	cfg      Config
	log      *zap.Logger
	server   *xds.Server
	listener net.Listener
	history  *xds.History
	queue    workqueue.TypedRateLimitingInterface[string]
	envoy    xds.EnvoyOptions
	// translator is used by rebuildXDS alone, which runs on one goroutine at a time.
	translator *xds.Translator

	mu       sync.Mutex
	lastGood map[string]xds.Service // by map key: what is served while a map is invalid
	digests  map[string]map[xds.Flavour]string
	pending  map[string]bool  // maps waiting for client ACKs
	invalid  map[string]error // maps whose resources failed validation
}

func newXDSSink(cfg Config, log *zap.Logger, onClientChange func()) (*xdsSink, error) {
	tlsCfg, err := xds.LoadTLS(cfg.XDSTLSCert, cfg.XDSTLSKey, cfg.XDSClientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	envoy := xds.DefaultEnvoyOptions
	if cfg.XDSListenerAddress != "" {
		host, port, err := splitHostPort(cfg.XDSListenerAddress)
		if err != nil {
			return nil, fmt.Errorf("%w: --xds-listener-address %q: %w", ErrInvalidConfig, cfg.XDSListenerAddress, err)
		}
		envoy.Address, envoy.Port = host, port
	}
	lis, err := net.Listen("tcp", cfg.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("listen on --xds-address %s: %w", cfg.XDSAddress, err)
	}
	return &xdsSink{
		cfg: cfg, log: log, listener: lis, envoy: envoy, translator: xds.NewTranslator(envoy),
		server:   xds.NewServer(xds.ServerConfig{Log: log, TLS: tlsCfg, OnClientChange: onClientChange, Registerer: cfg.Registerer}),
		history:  xds.NewHistory(64),
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "xds-snapshot"}),
		lastGood: map[string]xds.Service{},
		digests:  map[string]map[xds.Flavour]string{},
		pending:  map[string]bool{},
	}, nil
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var p uint32
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p == 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q must be 1..65535", port)
	}
	return host, p, nil
}

// Addr is where the xDS server listens.
func (x *xdsSink) Addr() net.Addr { return x.listener.Addr() }

// xdsService returns the xDS view of one map, from the same computation the HTTPRoute sink
// uses; ok is false when the map cannot be computed (its last good view is kept).
func (p *Publisher) xdsService(tm *v1beta1.TrafficMap) (xds.Service, bool) {
	g, err := p.gather(tm)
	if err != nil {
		return xds.Service{}, false
	}
	computed, err := Compute(g.inputs)
	if err != nil {
		return xds.Service{}, false
	}
	return p.xdsView(tm, g.src, computed.Result), true
}

// xdsView is the xDS sink's view of a map with these effective weights.
func (p *Publisher) xdsView(tm *v1beta1.TrafficMap, src httproute.Source, res weights.Result) xds.Service {
	svc := xds.Service{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service, Result: res}
	if host, err := p.sink.Hostname(src); err == nil {
		svc.Hostnames = []string{host}
	}
	return svc
}

// rebuildXDS translates every cached TrafficMap and serves the result, then enqueues each
// map whose served content changed so that its Published condition follows.
func (p *Publisher) rebuildXDS(ctx context.Context) error {
	x := p.xds
	current := map[string]xds.Service{}
	for _, inf := range p.maps {
		for _, obj := range inf.GetStore().List() {
			tm, ok := obj.(*v1beta1.TrafficMap)
			if !ok || tm.DeletionTimestamp != nil {
				continue
			}
			key := tm.Namespace + "/" + tm.Name
			if svc, ok := p.xdsService(tm); ok {
				current[key] = svc
			} else if last, ok := x.lastGoodService(key); ok {
				current[key] = last
			}
		}
	}
	// A map whose resources fail validation keeps its last good content on the wire.
	services := make([]xds.Service, 0, len(current))
	for _, s := range current {
		services = append(services, s)
	}
	_, invalid := x.translator.Partition(services)
	for key := range invalid {
		delete(current, key)
		if last, ok := x.lastGoodService(key); ok {
			current[key] = last
		}
	}
	var all, withHosts []xds.Service
	for _, s := range current {
		all = append(all, s)
		if len(s.Hostnames) > 0 {
			withHosts = append(withHosts, s)
		}
	}
	envoyRes, err := x.translator.Envoy(withHosts)
	if err != nil {
		return fmt.Errorf("translate envoy resources: %w", err)
	}
	grpcRes, err := x.translator.GRPC(all)
	if err != nil {
		return fmt.Errorf("translate grpc resources: %w", err)
	}
	x.translator.Prune()
	for _, f := range []struct {
		flavour  xds.Flavour
		res      xds.Resources
		services []xds.Service
	}{{xds.FlavourEnvoy, envoyRes, withHosts}, {xds.FlavourGRPC, grpcRes, all}} {
		versions, err := x.server.SetResources(ctx, f.flavour, f.res)
		if err != nil {
			return fmt.Errorf("serve %s resources: %w", f.flavour, err)
		}
		x.history.Record(f.flavour, versions, f.services)
	}

	for _, key := range x.remember(current, withHosts, invalid) {
		ns, name, _ := strings.Cut(key, "/")
		p.queue.Add(cache.NewObjectName(ns, name)) // not p.enqueue: that would queue another rebuild
	}
	return nil
}

func (x *xdsSink) lastGoodService(key string) (xds.Service, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.lastGood[key]
	return s, ok
}

// remember stores what is now served and which maps are invalid, and returns the keys whose
// digests or validity changed.
func (x *xdsSink) remember(current map[string]xds.Service, withHosts []xds.Service, invalid map[string]error) []string {
	envoy := map[string]bool{}
	for _, s := range withHosts {
		envoy[s.Key()] = true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var changed []string
	next := map[string]map[xds.Flavour]string{}
	for key, s := range current {
		d := map[xds.Flavour]string{xds.FlavourGRPC: s.Digest()}
		if envoy[key] {
			d[xds.FlavourEnvoy] = d[xds.FlavourGRPC]
		}
		next[key] = d
		if old := x.digests[key]; old[xds.FlavourGRPC] != d[xds.FlavourGRPC] || len(old) != len(d) {
			changed = append(changed, key)
		}
	}
	for key := range invalid {
		if x.invalid[key] == nil {
			changed = append(changed, key)
		}
	}
	for key := range x.invalid {
		if invalid[key] == nil {
			changed = append(changed, key)
		}
	}
	x.digests, x.lastGood, x.invalid = next, current, invalid
	return changed
}

// invalidErr is why the map's xDS resources are not served, nil when they are.
func (x *xdsSink) invalidErr(key string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.invalid[key]
}

// confirm is the xDS side of a map's Published condition for svc, its current content.
func (x *xdsSink) confirm(svc xds.Service) xds.Confirmation {
	d := map[xds.Flavour]string{xds.FlavourGRPC: svc.Digest()}
	if len(svc.Hostnames) > 0 {
		d[xds.FlavourEnvoy] = d[xds.FlavourGRPC]
	}
	c := xds.Confirm(x.server.Tracker().Clients(), x.history, svc.Key(), d, x.cfg.XDSMinClients)
	x.mu.Lock()
	if c.Done {
		delete(x.pending, svc.Key())
	} else {
		x.pending[svc.Key()] = true
	}
	x.mu.Unlock()
	return c
}

// pendingKeys are the maps waiting for client ACKs.
func (x *xdsSink) pendingKeys() []cache.ObjectName {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]cache.ObjectName, 0, len(x.pending))
	for key := range x.pending {
		ns, name, _ := strings.Cut(key, "/")
		out = append(out, cache.NewObjectName(ns, name))
	}
	return out
}

// processXDS rebuilds the snapshot for one queued request; false once the queue is shut.
func (p *Publisher) processXDS(ctx context.Context) bool {
	key, shutdown := p.xds.queue.Get()
	if shutdown {
		return false
	}
	defer p.xds.queue.Done(key)
	if err := p.rebuildXDS(ctx); err != nil {
		p.xds.log.Info("xds snapshot not rebuilt; the last good one stays served; retrying", zap.Error(err))
		p.xds.queue.AddRateLimited(key)
		return true
	}
	p.xds.queue.Forget(key)
	return true
}

// onXDSClientChange runs after every ACK, NACK, connect and disconnect: maps waiting for
// ACKs are reconciled again, and every map when the set of clients changed.
func (p *Publisher) onXDSClientChange() {
	var ids []string
	for _, c := range p.xds.server.Tracker().Clients() {
		ids = append(ids, c.NodeID)
	}
	set := strings.Join(ids, "\x00")
	p.xds.mu.Lock()
	changed := set != p.xdsClients
	p.xdsClients = set
	p.xds.mu.Unlock()
	if changed {
		for _, inf := range p.maps {
			for _, key := range inf.GetStore().ListKeys() {
				ns, name, _ := strings.Cut(key, "/")
				p.queue.Add(cache.NewObjectName(ns, name))
			}
		}
		return
	}
	for _, key := range p.xds.pendingKeys() {
		p.queue.Add(key)
	}
}
