package publish

import (
	"context"
	"fmt"
	"maps"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	pacer      pacer // used by processXDS alone

	mu       sync.Mutex
	dirty    map[string]bool        // maps whose xDS view may have changed since the last rebuild
	full     bool                   // the next rebuild rereads every map
	lastGood map[string]xds.Service // by map key: what is served (a map's last good content while it is invalid)
	digests  map[string]map[xds.Flavour]string
	pending  map[string]bool                // maps waiting for client ACKs
	progress map[cache.ObjectName]time.Time // when a waiting message was last written
	members  uint64                         // the Tracker's Membership when the client set was last compared
	invalid  map[string]error               // maps whose resources failed validation
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
		dirty:    map[string]bool{},
		full:     true,
		lastGood: map[string]xds.Service{},
		digests:  map[string]map[xds.Flavour]string{},
		pending:  map[string]bool{},
		progress: map[cache.ObjectName]time.Time{},
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

// rebuildXDS translates the maps marked dirty since the previous rebuild (every cached map
// on the first rebuild and after a failed one), serves the result with every other map's
// resources as they were, then enqueues each map whose served content changed so that its
// Published condition follows. A map that cannot be computed or whose resources fail
// validation keeps its last good content on the wire.
func (p *Publisher) rebuildXDS(ctx context.Context) (err error) {
	x := p.xds
	keys, full := x.takeDirty()
	defer func() {
		if err != nil {
			x.markAllDirty() // what was taken is not served; the retry rereads everything
		}
	}()
	x.mu.Lock()
	prevServed, prevInvalid := x.lastGood, x.invalid // replaced, never modified, by remember
	x.mu.Unlock()
	served, invalid := maps.Clone(prevServed), maps.Clone(prevInvalid)
	if full {
		keys = map[string]bool{}
		for key := range served {
			keys[key] = true
		}
		for key := range invalid {
			keys[key] = true
		}
		for _, inf := range p.maps {
			for _, key := range inf.GetStore().ListKeys() {
				keys[key] = true
			}
		}
	}
	for key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		tm, err := p.trafficMap(ns, name)
		if err != nil {
			return fmt.Errorf("read trafficmap %s from the cache: %w", key, err)
		}
		if tm == nil || tm.DeletionTimestamp != nil {
			delete(served, key)
			delete(invalid, key)
			continue
		}
		svc, ok := p.xdsService(tm)
		if !ok {
			continue // the reconcile reports why; the last good content stays
		}
		if err := x.translator.Validate(svc); err != nil {
			invalid[key] = err
			continue
		}
		served[key] = svc.Sealed()
		delete(invalid, key)
	}
	if !full && unchanged(keys, prevServed, served, prevInvalid, invalid) {
		return nil // e.g. the publisher's own route write: nothing to serve or confirm anew
	}

	var all, withHosts []xds.Service
	for _, s := range served {
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

	for _, key := range x.remember(served, withHosts, invalid) {
		ns, name, _ := strings.Cut(key, "/")
		p.queue.Add(cache.NewObjectName(ns, name)) // not p.enqueue: that would queue another rebuild
	}
	return nil
}

// unchanged reports whether every key serves and fails as it did.
func unchanged(keys map[string]bool, prevServed, served map[string]xds.Service, prevInvalid, invalid map[string]error) bool {
	for key := range keys {
		a, hadA := prevServed[key]
		b, hasB := served[key]
		if hadA != hasB || !reflect.DeepEqual(a, b) {
			return false
		}
		e, hadE := prevInvalid[key]
		f, hasF := invalid[key]
		if hadE != hasF || (hadE && e.Error() != f.Error()) {
			return false
		}
	}
	return true
}

// markDirty records that the map at key may serve different xDS content.
func (x *xdsSink) markDirty(key string) {
	x.mu.Lock()
	x.dirty[key] = true
	x.mu.Unlock()
}

// markAllDirty makes the next rebuild reread every map.
func (x *xdsSink) markAllDirty() {
	x.mu.Lock()
	x.full = true
	x.mu.Unlock()
}

// takeDirty returns and clears the maps marked dirty, and whether every map is.
func (x *xdsSink) takeDirty() (map[string]bool, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	keys, full := x.dirty, x.full
	x.dirty, x.full = map[string]bool{}, false
	return keys, full
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

// progressInterval is how often at most a map's Published message is rewritten only to
// update how many xDS clients have ACKed: with C clients a rollout would otherwise cost up
// to C status writes per map.
const progressInterval = time.Second

// holdProgress returns how long to wait before writing msg as tm's Published message when
// that write would only change the ACK count of a waiting message written less than
// progressInterval ago (0: write now, and the time is recorded).
func (x *xdsSink) holdProgress(key cache.ObjectName, tm *v1beta1.TrafficMap, msg string, now time.Time) time.Duration {
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	progress := c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonPublishing &&
		c.ObservedGeneration == tm.Generation &&
		strings.HasPrefix(c.Message, xds.WaitingPrefix) && strings.HasPrefix(msg, xds.WaitingPrefix)
	if c != nil && c.Message == msg {
		return 0 // nothing to rewrite
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if last, ok := x.progress[key]; progress && ok && now.Sub(last) < progressInterval {
		return progressInterval - now.Sub(last)
	}
	x.progress[key] = now
	return 0
}

// forgetProgress drops what holdProgress recorded for a deleted map.
func (x *xdsSink) forgetProgress(key cache.ObjectName) {
	x.mu.Lock()
	delete(x.progress, key)
	x.mu.Unlock()
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

// pacer keeps the xDS rebuild to a share of one core in a storm of changes (a cold start,
// a fleet-wide drain), so that the API writes and the clients' updates keep their CPU, and
// each rebuild carries more changes (those that arrive meanwhile coalesce in the queue). A
// rebuild after a quiet period starts at once: the pacer is a leaky bucket that fills by
// rebuildCost times each rebuild's duration, drains with wall time, and pauses the next
// rebuild only for what exceeds rebuildBurst, at most maxRebuildPause.
type pacer struct {
	debt time.Duration
	last time.Time
}

const (
	rebuildCost     = 2 // in a storm, rebuilds take at most half a core
	rebuildBurst    = 500 * time.Millisecond
	maxRebuildPause = time.Second
)

// pause accounts for a rebuild that started at start and ended at end, and returns how
// long to wait before the next.
func (p *pacer) pause(start, end time.Time) time.Duration {
	if !p.last.IsZero() {
		p.debt = max(0, p.debt-start.Sub(p.last))
	}
	// rebuildCost times the rebuild's duration fills it; the rebuild's own time drains it.
	p.debt += (rebuildCost - 1) * end.Sub(start)
	p.last = end
	return min(max(0, p.debt-rebuildBurst), maxRebuildPause)
}

// processXDS rebuilds the snapshot for one queued request, then waits as the pacer says;
// false once the queue is shut.
func (p *Publisher) processXDS(ctx context.Context) bool {
	key, shutdown := p.xds.queue.Get()
	if shutdown {
		return false
	}
	start := time.Now()
	if err := p.rebuildXDS(ctx); err != nil {
		p.xds.log.Info("xds snapshot not rebuilt; the last good one stays served; retrying", zap.Error(err))
		p.xds.queue.AddRateLimited(key)
	} else {
		p.xds.queue.Forget(key)
	}
	p.xds.queue.Done(key)
	if pause := p.xds.pacer.pause(start, time.Now()); pause > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return true
}

// onXDSClientChange runs after every ACK, NACK, connect and disconnect: maps waiting for
// ACKs are reconciled again, and every map when the set of clients changed.
func (p *Publisher) onXDSClientChange() {
	tracker := p.xds.server.Tracker()
	members := tracker.Membership()
	p.xds.mu.Lock()
	known := members == p.xds.members
	p.xds.mu.Unlock()
	if !known { // a client may have joined or left: compare the sets
		var ids []string
		for _, c := range tracker.Clients() {
			ids = append(ids, c.NodeID)
		}
		set := strings.Join(ids, "\x00")
		p.xds.mu.Lock()
		changed := set != p.xdsClients
		p.xdsClients, p.xds.members = set, members
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
	}
	for _, key := range p.xds.pendingKeys() {
		p.queue.Add(key)
	}
}
