package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/model/untrusted"
)

// Server serves translated resources over xDS (ADS and per-type services, state of the
// world and delta) and tracks what each client ACKed. It serves nothing to a flavour until
// SetResources has given it a first snapshot, so a client never gets an empty configuration
// at start-up.
type Server struct {
	log     *zap.Logger
	tls     *TLS
	cache   *nackGuard
	tracker *Tracker
	grpc    *grpc.Server
	metrics *metrics
	// versioners version each flavour's snapshots, encoding only resources not seen in
	// that flavour's previous one.
	versioners map[Flavour]*versioner
	// validators validate each flavour's snapshots, re-checking only new resources.
	validators map[Flavour]*validator
	// setMu serializes SetResources.
	setMu sync.Mutex
	// onSet, when set (by tests), is called after each per-type snapshot is set.
	onSet func(flavour Flavour, typeURL, version string, names []string)
	// fence ends and refuses streams while the replica is fenced (see Fence).
	fence fence
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Log is the server's logger.
	Log *zap.Logger
	// TLS, when set (see LoadTLS), secures the xDS port, with mutual TLS when it has a
	// client CA. Serve reloads its certificate when the files change.
	TLS *TLS
	// OnClientChange is called after every client ACK, NACK, connect or disconnect.
	OnClientChange func()
	// Registerer, when set, receives the server's metrics.
	Registerer prometheus.Registerer
	// Limits bound what one client may make the server hold and do (zero fields: the
	// defaults).
	Limits Limits
	// DepartedGrace is how long a stream that went away is counted as holding what it
	// held (see Departed); 0: not at all.
	DepartedGrace time.Duration
}

// NewServer returns a server; call Serve to accept connections.
func NewServer(cfg ServerConfig) *Server {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{log: log, tls: cfg.TLS, versioners: map[Flavour]*versioner{FlavourEnvoy: {}, FlavourGRPC: {}},
		validators: map[Flavour]*validator{FlavourEnvoy: {}, FlavourGRPC: {}}}
	limits := cfg.Limits.withDefaults()
	s.tracker = NewTracker(cfg.OnClientChange)
	s.tracker.departed = newDepartures(cfg.DepartedGrace, nil)
	s.metrics = newMetrics(s, cfg.Registerer)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.tracker.departed)
	}
	s.tracker.observe, s.tracker.refused, s.tracker.limits = s.metrics.observe, s.metrics.refuse, limits
	s.cache = newNackGuard(s.tracker, log)
	s.tracker.served = func(node *corev3.Node, typeURL string) *typeCache {
		return s.cache.cache(NodeHash{}.ID(node), typeURL)
	}
	// Interceptors, outermost first: a panic ends its stream, not the process; a fenced
	// server refuses; TLS authenticates (and gives the stream its Access); a client's
	// connections are bounded.
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(limits.MaxStreamsPerConnection),
		grpc.MaxRecvMsgSize(limits.MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.recoverUnary),
		grpc.ChainStreamInterceptor(s.recoverStream, s.fence.intercept),
		grpc.ForceServerCodecV2(newCodec()),
	}
	if cfg.TLS != nil {
		opts = append(opts, cfg.TLS.serverOptions(log)...)
	}
	conns := &connLimiter{max: limits.MaxConnectionsPerClient, refused: s.metrics.refuse}
	opts = append(opts, grpc.ChainStreamInterceptor(conns.intercept))
	s.grpc = grpc.NewServer(opts...)
	// Ordered ADS: a state-of-the-world ADS stream is sent responses in the order the
	// snapshots are set (delta streams always are), which make-before-break relies on.
	xds := serverv3.NewServer(context.Background(), s.cache, s.tracker.Callbacks(), sotw.WithOrderedADS())
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.grpc, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(s.grpc, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(s.grpc, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(s.grpc, xds)
	return s
}

// Tracker returns the server's ACK tracker.
func (s *Server) Tracker() *Tracker { return s.tracker }

// Serve accepts xDS connections on lis until ctx is done, then stops the gRPC server. With
// TLS, it watches the certificate and key files meanwhile and serves new connections the
// certificate as it is on disk.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if s.tls != nil {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() { defer close(watched); s.tls.watch(wctx, s.log) }()
		defer func() { stop(); <-watched }()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(s.fence.listener(lis)) }()
	select {
	case <-ctx.Done():
		// Stop, not GracefulStop: xDS streams never end on their own, and clients keep
		// their last configuration and reconnect.
		s.grpc.Stop()
		<-errc
		s.tracker.departed.stop()
		return nil
	case err := <-errc:
		return fmt.Errorf("serve xds: %w", err)
	}
}

// Versions are the versions of one snapshot, by type URL. Each type's version is a digest of
// that type's content alone, so a change that touches only route configurations (a drain)
// keeps the listener and cluster versions: state-of-the-world clients are sent only the
// changed type, and an ACK of an unchanged type still counts for the new content.
type Versions map[string]string

// SetResources validates res and makes it flavour's snapshot, each type versioned by its
// content. An invalid set is not served (the last good one stays) and the error says why.
// Only the types whose content changed are set, and within a type only the resources whose
// content changed: setting the same content again changes nothing and sends nothing, and a
// drain is answered only to the route watches that include the drained route (every
// wildcard one, and the named ones of that name).
//
// Clusters are made before routes use them and broken after routes stop using them: new
// clusters are set before the listeners and routes, and clusters that go are removed only
// after the listeners and routes without them are set. When a set both adds and removes
// clusters, the union of the old and the new clusters is set first (a version of its own)
// and the new clusters last. A client that handles the updates in the order it is sent them
// therefore never has a route naming a cluster it does not know.
func (s *Server) SetResources(ctx context.Context, flavour Flavour, res Resources) (Versions, error) {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	if err := s.validators[flavour].validate(res); err != nil {
		s.metrics.invalid.Inc()
		return nil, err
	}
	if lieplant.On && lieplant.Is(lieplant.KindDroppedCluster) && flavour == FlavourGRPC && len(res.Clusters) > 0 {
		res.Clusters = res.Clusters[1:] // a copy of the slice header: the translator's stays whole
	}
	byType, versions, err := s.snapshot(flavour, res)
	if err != nil {
		return nil, err
	}
	steps := make([]typeSet, 0, 4)
	var last *typeSet // the clusters that go, after the routes stop using them
	if s.cache.version(string(flavour), resource.ClusterType) != versions[resource.ClusterType] {
		final := byType(resource.ClusterType)
		union, added, removed, err := s.clusterUnion(flavour, final)
		if err != nil {
			return nil, err
		}
		switch {
		case removed && added:
			steps = append(steps, union)
			last = &final
		case removed:
			last = &final
		default:
			steps = append(steps, final)
		}
	}
	for _, typ := range []string{resource.ListenerType, resource.RouteType} {
		if s.cache.version(string(flavour), typ) != versions[typ] {
			steps = append(steps, byType(typ))
		}
	}
	if last != nil {
		steps = append(steps, *last)
	}
	sum := s.versioners[flavour].summer()
	for _, st := range steps {
		if err := s.cache.set(flavour, st, sum); err != nil {
			return nil, fmt.Errorf("set %s %s resources: %w", flavour, typeLabel(st.typ), err)
		}
		if s.onSet != nil {
			s.onSet(flavour, st.typ, st.version, st.names())
		}
	}
	if len(steps) > 0 {
		s.log.Info("serving snapshot", zap.String("flavour", string(flavour)), zap.String("listeners", versions[resource.ListenerType]),
			zap.String("routes", versions[resource.RouteType]), zap.String("clusters", versions[resource.ClusterType]))
	}
	return versions, nil
}

// typeSet is one type's resources set at a version: as messages, or held encoded.
type typeSet struct {
	typ, version string
	msgs         []types.Resource
	held         []heldResource
}

// names are the names of the set's resources.
func (st typeSet) names() []string {
	out := make([]string, 0, len(st.msgs)+len(st.held))
	for _, r := range st.msgs {
		out = append(out, cachev3.GetResourceName(r))
	}
	for _, r := range st.held {
		out = append(out, r.GetName())
	}
	return out
}

// snapshot versions res and returns its versions and a function that gives a type's
// resources at its version (made only for the types set).
func (s *Server) snapshot(flavour Flavour, res Resources) (func(typ string) typeSet, Versions, error) {
	var versions Versions
	var route *envoyRoute
	var err error
	if res.envoy != nil { // the Envoy flavour held encoded
		versions, route, err = s.versioners[flavour].encodedVersions(res)
	} else {
		versions, err = s.versioners[flavour].versions(res)
	}
	if err != nil {
		return nil, nil, err
	}
	return func(typ string) typeSet {
		st := typeSet{typ: typ, version: versions[typ]}
		switch {
		case typ == resource.ListenerType:
			st.msgs = toResources(res.Listeners)
		case res.envoy == nil && typ == resource.RouteType:
			st.msgs = toResources(res.Routes)
		case res.envoy == nil:
			st.msgs = toResources(res.Clusters)
		case typ == resource.RouteType:
			st.held = []heldResource{route}
		default:
			st.held = make([]heldResource, len(res.envoy.clusters))
			for i, c := range res.envoy.clusters {
				st.held[i] = c
			}
		}
		return st
	}, versions, nil
}

// clusterUnion compares next (the clusters) with the clusters flavour serves now:
// union is next followed by the served clusters next drops, by name, at a version of its
// own; added and removed say whether next has a cluster name not served now and drops
// one served now.
func (s *Server) clusterUnion(flavour Flavour, next typeSet) (union typeSet, added, removed bool, err error) {
	served := s.cache.cache(string(flavour), resource.ClusterType).entries()
	nextNames := next.names()
	names := make(map[string]bool, len(nextNames))
	for _, name := range nextNames {
		names[name] = true
		if _, ok := served[name]; !ok {
			added = true
		}
	}
	var gone []*entry
	for name, e := range served {
		if !names[name] {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 || !added {
		return typeSet{}, added, len(gone) > 0, nil
	}
	slices.SortFunc(gone, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	union = typeSet{typ: resource.ClusterType}
	if next.held != nil {
		union.held = slices.Clone(next.held)
		for _, e := range gone {
			r, err := heldOf(e)
			if err != nil {
				return typeSet{}, false, false, err
			}
			union.held = append(union.held, r)
		}
		union.version = digestHeld(union.held)
		return union, true, true, nil
	}
	clusters := make([]*clusterv3.Cluster, 0, len(next.msgs)+len(gone))
	for _, r := range next.msgs {
		clusters = append(clusters, r.(*clusterv3.Cluster))
	}
	for _, e := range gone {
		c, err := clusterOf(e)
		if err != nil {
			return typeSet{}, false, false, err
		}
		clusters = append(clusters, c)
	}
	if union.version, err = s.versioners[flavour].clusterVersion(clusters); err != nil {
		return typeSet{}, false, false, err
	}
	union.msgs = toResources(clusters)
	return union, true, true, nil
}

func toResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, r := range in {
		out[i] = r
	}
	return out
}

// nackGuard is the server's cache: one typeCache per flavour and resource type (see
// typeCache: each resource encoded once and shared, updates answered per name). It also
// stops the NACK resend loop of state-of-the-world wildcard streams: after a NACK, such a
// client re-requests with its old version, and the cache would resend the rejected version
// at once, forever. The guard parks such a request until the type's version changes. The
// version rejected is the one sent on the NACKing stream itself (Tracker.Rejected), never
// another stream's of the same node id: many clients may share one.
type nackGuard struct {
	caches  map[cacheKey]*typeCache
	other   *typeCache // never updated: watches of types the publisher does not serve wait
	tracker *Tracker
	log     *zap.Logger

	// mu guards parked, and is held from a NACKed request's version check until its watch
	// is parked, so a snapshot set meanwhile releases it (release takes mu after the set).
	mu     sync.Mutex
	parked map[*parkedWatch]struct{}

	// Test hooks, when set: checked runs after a NACKed request's version check (mu held);
	// releasing runs after a snapshot is set, before its release takes mu; released after
	// the release has looked at the parked watches.
	checked             func()
	releasing, released func(typeURL string)
}

// cacheKey names one typeCache: the node hash (the flavour) and the type URL.
type cacheKey struct{ hash, typeURL string }

func newNackGuard(tracker *Tracker, log *zap.Logger) *nackGuard {
	g := &nackGuard{caches: map[cacheKey]*typeCache{}, other: newTypeCache(""), tracker: tracker, log: log}
	for _, f := range []Flavour{FlavourEnvoy, FlavourGRPC} {
		for _, typ := range servedTypes {
			g.caches[cacheKey{string(f), typ}] = newTypeCache(typ)
		}
	}
	return g
}

// cache is the node hash's cache of typeURL, the never-answering one for other types.
func (g *nackGuard) cache(hash, typeURL string) *typeCache {
	if c, ok := g.caches[cacheKey{hash, typeURL}]; ok {
		return c
	}
	return g.other
}

// version is the version of typeURL served to the node hash, "" when none.
func (g *nackGuard) version(hash, typeURL string) string {
	return g.cache(hash, typeURL).current()
}

// set serves st's resources as flavour's type at its version, updating only the resources whose
// content changed, moves the tracker's streams that the change does not concern to the
// new version, and releases parked watches of that type.
func (g *nackGuard) set(flavour Flavour, st typeSet, sum func(types.Resource) (string, error)) error {
	typeURL, version := st.typ, st.version
	c := g.cache(string(flavour), typeURL)
	var changed []*entry
	var removed []string
	if st.held != nil {
		changed, removed = c.diffHeld(st.held)
	} else {
		var err error
		if changed, removed, err = c.diff(st.msgs, sum); err != nil {
			return err
		}
	}
	from := c.current()
	c.update(version, changed, removed)
	touched := make(map[string]struct{}, len(changed)+len(removed))
	for _, e := range changed {
		touched[e.name] = struct{}{}
	}
	for _, name := range removed {
		touched[name] = struct{}{}
	}
	g.tracker.advance(flavour, typeURL, from, version, touched)
	g.release(string(flavour), typeURL, version)
	return nil
}

type parkedWatch struct {
	hash     string
	rejected string
	req      *cachev3.Request
	sub      cachev3.Subscription
	value    chan cachev3.Response

	mu     sync.Mutex
	cancel func() // the inner watch's cancel once released
	done   bool
}

// CreateWatch implements cachev3.ConfigWatcher.
func (g *nackGuard) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, value chan cachev3.Response) (func(), error) {
	if req.GetErrorDetail() != nil {
		hash := NodeHash{}.ID(req.GetNode())
		rejected, sent := g.tracker.Rejected(req)
		w := &parkedWatch{hash: hash, rejected: rejected, req: req, sub: sub, value: value}
		if sent && g.park(w) {
			g.log.Info("client rejected the current version; not resending it until the content changes",
				zap.String("node", nodeField(req.GetNode())), zap.String("type", typeLabel(req.GetTypeUrl())),
				zap.String("version", rejected), zap.String("error", untrusted.Quote(req.GetErrorDetail().GetMessage(), untrusted.MaxMessage)))
			return func() { g.drop(w) }, nil
		}
	}
	return g.cache(NodeHash{}.ID(req.GetNode()), req.GetTypeUrl()).createWatch(req, sub, value), nil
}

// CreateDeltaWatch implements cachev3.ConfigWatcher.
func (g *nackGuard) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, value chan cachev3.DeltaResponse) (func(), error) {
	return g.cache(NodeHash{}.ID(req.GetNode()), req.GetTypeUrl()).createDeltaWatch(req, sub, value), nil
}

// Fetch implements cachev3.ConfigFetcher: the publisher serves streams only.
func (g *nackGuard) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("fetch is not served")
}

// park parks w when its type is still served at the rejected version, and reports whether
// it did. The check and the parking are one step under mu: a snapshot set after the check
// releases w, and one set before it is seen by the check.
func (g *nackGuard) park(w *parkedWatch) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.version(w.hash, w.req.GetTypeUrl()) != w.rejected {
		return false
	}
	if g.checked != nil {
		g.checked()
	}
	if g.parked == nil {
		g.parked = map[*parkedWatch]struct{}{}
	}
	g.parked[w] = struct{}{}
	return true
}

func (g *nackGuard) drop(w *parkedWatch) {
	g.mu.Lock()
	delete(g.parked, w)
	g.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.cancel != nil {
		w.cancel()
	}
}

// release re-issues parked watches of hash and typeURL now that it is served at version.
func (g *nackGuard) release(hash, typeURL, version string) {
	if g.releasing != nil {
		g.releasing(typeURL)
	}
	g.mu.Lock()
	var ready []*parkedWatch
	for w := range g.parked {
		if w.hash == hash && w.req.GetTypeUrl() == typeURL && version != w.rejected {
			ready = append(ready, w)
			delete(g.parked, w)
		}
	}
	g.mu.Unlock()
	if g.released != nil {
		g.released(typeURL)
	}
	for _, w := range ready {
		w.mu.Lock()
		if !w.done {
			w.cancel = g.cache(w.hash, w.req.GetTypeUrl()).createWatch(w.req, w.sub, w.value)
		}
		w.mu.Unlock()
	}
}

var _ cachev3.Cache = (*nackGuard)(nil)
