// Package xdssink is the xDS sink: it serves every TrafficMap's plan from a go-control-plane
// server (package xds) and confirms a plan once the clients relevant to it (the xDS streams
// subscribed to its resources, each stream on its own) have ACKed a version carrying it.
// Translation is asynchronous: event handlers mark maps dirty (Changed), one loop rebuilds
// the snapshot from the dirty maps' current plans, paced in storms, and requeues the maps
// whose served content changed so their Published condition follows. A rebuild costs what
// changed: only the dirty maps are planned, checked for names another map serves,
// translated, recorded in the history and handed to the server.
//
// Build only what is consumed: a flavour's resources (Envoy or proxyless gRPC) are neither
// translated nor served until a client of that flavour has connected (xds.Tracker.Consumed);
// the first such client triggers a rebuild that builds the flavour from every served map,
// and it is answered only then, with the complete current content (the server answers no
// flavour before its first snapshot).
//
// Reconnect grace: for Config.ReconnectGrace after Start and after Leading, a plan that was
// not published before (model.Plan.PublishedBefore) is Pending whatever its clients say, so
// clients of the previous publisher still reconnecting with backoff ACK it before it is
// confirmed; the maps it held are requeued when the window ends. Content confirmed before
// keeps its condition through the window while its clients are still reconnecting or
// resubscribing, never while a client declared (or ACKed) older content of it.
//
// State: the rebuild loop alone uses the translator and the pacer; everything else that
// changes (dirty set, served content, invalid maps, client membership) is guarded by mu.
package xdssink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/util/workqueue"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/xds"
)

// Name is the sink's name in --sinks.
const Name = "xds"

// Reasons of the Published condition this sink reports (model.Reason constants).
const (
	// ReasonRejected: an xDS client NACKed a version carrying the map's content.
	ReasonRejected = model.ReasonXDSRejected
	// ReasonInvalid: the map's resources failed validation; its last good ones stay served.
	ReasonInvalid = model.ReasonXDSInvalid
)

// snapshotKey is the one key of the rebuild queue: every change enqueues it, so a burst
// of changes coalesces into one rebuild.
const snapshotKey = "snapshot"

// Plans is where the sink reads the maps' current plans from (the publisher's caches and
// planner, so both sinks publish the same computation).
type Plans interface {
	// Keys lists the namespace/name of every cached TrafficMap.
	Keys() []string
	// Plan returns the map's current plan; exists is false for a deleted map; a non-nil
	// error means the plan cannot be computed now or another enabled sink refuses it
	// (model.Sink.Check): the map's last good content stays served.
	Plan(namespace, name string) (plan *model.Plan, exists bool, err error)
}

// Config configures the sink.
type Config struct {
	// Address is where the xDS server listens.
	Address string
	// ListenerAddress is the Envoy listener's host:port ("" for the default).
	ListenerAddress string
	// TLSCert, TLSKey and ClientCA secure the port (optional; the CA turns on mutual TLS).
	TLSCert, TLSKey, ClientCA string
	// ClientNamespaces are the rules of an xds.ClientPolicy (need ClientCA).
	ClientNamespaces []string
	// RequireAck makes a plan Pending until every relevant client has ACKed it.
	RequireAck bool
	// MinClients makes a plan Pending until at least this many clients are connected.
	MinClients int
	// ReconnectGrace is how long after Start (and after Leading) a plan that was not
	// published before (model.Plan.PublishedBefore false) stays Pending, so clients of the
	// previous publisher that are still reconnecting count before it is confirmed; 0: none.
	ReconnectGrace time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Registerer receives the server's metrics (nil: none).
	Registerer prometheus.Registerer
	// Plans is where plans are read from.
	Plans Plans
	// Requeue asks the pipeline to reconcile a map again (its served content or its
	// clients changed).
	Requeue func(namespace, name string)
	// Peers returns the live reports of the other replicas (lease.Board.Peers); nil
	// without leader election. With RequireAck, a plan is InPlace only when the relevant
	// clients of every live replica ACKed its content too (replicas.Judge).
	Peers func() []replicas.Report
}

// ErrInvalidConfig marks a configuration the sink cannot start with.
var ErrInvalidConfig = errors.New("invalid xds sink configuration")

// Sink is the xDS sink. Create it with New.
type Sink struct {
	cfg      Config
	log      *zap.Logger
	server   *xds.Server
	listener net.Listener
	history  *xds.History
	queue    workqueue.TypedRateLimitingInterface[string]
	// translator, pacer and lastServed (when resources were last handed to the server) are
	// used by the rebuild loop alone.
	translator *xds.Translator
	pacer      pacer
	lastServed time.Time
	envoy      xds.EnvoyOptions

	// owner is which map serves each name (gRPC listener name, which covers the Envoy
	// domains), used by the rebuild loop alone (see exclusive).
	owner map[string]string

	mu      sync.Mutex
	dirty   map[string]bool        // maps whose plan may have changed since the last rebuild
	full    bool                   // the next rebuild rereads every map
	served  map[string]xds.Service // what is served (to the flavours consumed), by map key
	built   map[xds.Flavour]bool   // the flavours whose resources are served
	pending map[string]bool        // maps whose last confirmation waited for clients
	invalid map[string]error       // maps whose resources failed validation
	members uint64                 // the Tracker's Membership when the client set was last compared
	clients string                 // the client set then
	checked map[string]checked     // Check's last verdict, by map key
	grace   grace                  // the reconnect grace window
}

// grace is the window after a start or a leadership change in which only plans published
// before are confirmed.
type grace struct {
	start, end time.Time
	held       map[string]bool // maps held Pending by it, requeued when it ends
	timer      *time.Timer
}

// checked is Check's verdict on one map's content.
type checked struct {
	content string
	err     error
}

var (
	_ model.Sink     = (*Sink)(nil)
	_ model.Starter  = (*Sink)(nil)
	_ model.Notified = (*Sink)(nil)
	_ model.Debugger = (*Sink)(nil)
	_ model.Leading  = (*Sink)(nil)
)

// New validates cfg, loads TLS and listens on cfg.Address; nothing is served before Start.
func New(cfg Config, log *zap.Logger) (*Sink, error) {
	tlsCfg, err := xds.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA, cfg.ClientNamespaces...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	envoy := xds.DefaultEnvoyOptions
	if cfg.ListenerAddress != "" {
		host, port, err := splitHostPort(cfg.ListenerAddress)
		if err != nil {
			return nil, fmt.Errorf("%w: --xds-listener-address %q: %w", ErrInvalidConfig, cfg.ListenerAddress, err)
		}
		envoy.Address, envoy.Port = host, port
	}
	lis, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on --xds-address %s: %w", cfg.Address, err)
	}
	s := &Sink{
		cfg: cfg, log: log, listener: lis, translator: xds.NewTranslator(envoy), envoy: envoy,
		history: xds.NewHistory(64),
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "xds-snapshot"}),
		owner:   map[string]string{},
		dirty:   map[string]bool{},
		full:    true,
		served:  map[string]xds.Service{},
		built:   map[xds.Flavour]bool{},
		pending: map[string]bool{},
		invalid: map[string]error{},
		checked: map[string]checked{},
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	s.server = xds.NewServer(xds.ServerConfig{Log: log, TLS: tlsCfg, OnClientChange: s.onClientChange, Registerer: cfg.Registerer})
	return s, nil
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 32)
	if err != nil || p == 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q must be 1..65535", port)
	}
	return host, uint32(p), nil
}

// Name implements model.Sink.
func (s *Sink) Name() string { return Name }

// Addr is where the xDS server listens.
func (s *Sink) Addr() net.Addr { return s.listener.Addr() }

// Clients returns what each connected client has ACKed and NACKed.
func (s *Sink) Clients() []xds.ClientState { return s.server.Tracker().Clients() }

// DebugHandlers implements model.Debugger: /debug/xds lists the clients and versions, and
// per served map the clients relevant to it and those that ACKed its served content.
func (s *Sink) DebugHandlers() map[string]http.Handler {
	return map[string]http.Handler{"/debug/xds": s.server.DebugHandlerWith(s.debugMaps)}
}

// debugMaps judges every served map's content against clients, sorted by key.
func (s *Sink) debugMaps(clients []xds.ClientState) []xds.DebugMap {
	s.mu.Lock()
	served := maps.Clone(s.served)
	s.mu.Unlock()
	out := make([]xds.DebugMap, 0, len(served))
	for _, key := range slices.Sorted(maps.Keys(served)) {
		out = append(out, xds.DebugMapOf(clients, s.history, key, xds.ServedBy(s.envoy, served[key])))
	}
	return out
}

// Start implements model.Starter: it reads every map's plan from the synced caches (before
// any plan is judged; no flavour is built before a client of it connects), then serves and
// rebuilds until ctx is done.
func (s *Sink) Start(ctx context.Context) (func(), error) {
	if err := s.rebuild(ctx); err != nil {
		s.log.Error("first xds snapshot not built; retrying", zap.Error(err))
		s.queue.Add(snapshotKey)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.server.Serve(ctx, s.listener); err != nil {
			s.log.Error("xds server stopped", zap.Error(err))
		}
	}()
	go func() {
		defer wg.Done()
		for s.processNext(ctx) {
		}
	}()
	s.beginGrace()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
		s.mu.Lock()
		if s.grace.timer != nil {
			s.grace.timer.Stop()
		}
		s.mu.Unlock()
	}()
	s.log.Info("serving xds", zap.String("address", s.Addr().String()))
	return wg.Wait, nil
}

// Leading implements model.Leading: the reconnect grace starts again, since clients of the
// previous leader may be reconnecting to this replica.
func (s *Sink) Leading() { s.beginGrace() }

// beginGrace opens the reconnect grace window (Config.ReconnectGrace) from now; when it
// ends, the maps it held are requeued.
func (s *Sink) beginGrace() {
	d := s.cfg.ReconnectGrace
	if d <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	if s.grace.timer != nil {
		s.grace.timer.Stop()
	}
	s.grace.start, s.grace.end = now, now.Add(d)
	if s.grace.held == nil {
		s.grace.held = map[string]bool{}
	}
	s.grace.timer = time.AfterFunc(d, s.endGrace)
}

// endGrace requeues the maps the grace held, so their condition follows.
func (s *Sink) endGrace() {
	s.mu.Lock()
	held := s.grace.held
	s.grace.held = map[string]bool{}
	s.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(held)) {
		ns, name, _ := strings.Cut(key, "/")
		s.cfg.Requeue(ns, name)
	}
}

// graceOpen reports whether the reconnect grace window is open.
func (s *Sink) graceOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Now().Before(s.grace.end)
}

// waive reports whether the reconnect grace window is open, and if so marks the map to be
// requeued when it ends.
func (s *Sink) waive(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cfg.Now().Before(s.grace.end) {
		return false
	}
	s.grace.held[key] = true
	return true
}

// graceHolds reports whether the reconnect grace holds the map's plan Pending (it was not
// published before and the window is open), and if so marks it held and says why.
func (s *Sink) graceHolds(p *model.Plan) (string, bool) {
	if p.PublishedBefore {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cfg.Now().Before(s.grace.end) {
		return "", false
	}
	s.grace.held[p.Key().String()] = true
	return fmt.Sprintf("waiting for xds clients to reconnect: serving (or leading) since %s, the xds sink confirms content not published before that only from %s on (--xds-reconnect-grace %s), once every relevant client has ACKed it",
		s.grace.start.UTC().Format(time.RFC3339), s.grace.end.UTC().Format(time.RFC3339), s.cfg.ReconnectGrace), true
}

// Report is this replica's report on the maps keys (those whose Published condition it
// sees not True), sorted by key: per map it serves content for, that content and what its
// relevant client streams did with it. A map it serves nothing for is left out (its plan
// fails here, for example a missing service: nothing of it waits on this replica's
// clients, and the leader holds a map absent from a report while it is not Published).
// The report is bounded in bytes when encoded (replicas.Encode), not here.
func (s *Sink) Report(keys []string) replicas.Report {
	clients := s.server.Tracker().Clients()
	r := replicas.Report{Clients: len(clients)}
	keys = slices.Sorted(slices.Values(keys))
	served := make(map[string]xds.Service, len(keys))
	s.mu.Lock()
	for _, key := range keys {
		if svc, ok := s.served[key]; ok {
			served[key] = svc
		}
	}
	s.mu.Unlock()
	for _, key := range keys {
		svc, ok := served[key]
		if !ok {
			continue
		}
		m := replicas.Map{Key: key, Digest: svc.Digest()}
		by := xds.ServedBy(s.envoy, svc)
		for _, cl := range clients {
			v := xds.Judge(cl, s.history, key, by)
			if !v.Relevant {
				continue
			}
			m.Relevant++
			switch {
			case v.Acked:
				m.Acked++
			case len(m.Waiting) < replicas.MaxWaiting:
				m.Waiting = append(m.Waiting, cl.ID())
			}
			if v.Nack != nil && m.Nack == nil {
				m.Nack = &replicas.Nack{Client: cl.ID(), Version: v.Nack.Version, Type: v.Nack.TypeURL, Message: v.Nack.Message}
			}
		}
		r.Maps = append(r.Maps, m)
	}
	return r
}

// Fence stops serving: every xDS connection is closed and new streams are refused with
// reason (xds.Server.Fence), until Unfence. For a replica whose report the leader may no
// longer count (lease.Writer).
func (s *Sink) Fence(reason string) { s.server.Fence(reason) }

// Unfence serves again after Fence.
func (s *Sink) Unfence() { s.server.Unfence() }

// Fenced reports whether the sink is fenced (Fence without Unfence since).
func (s *Sink) Fenced() bool { return s.server.Fenced() }

// Changed implements model.Notified: the map's plan may have changed.
func (s *Sink) Changed(namespace, name string) {
	s.mu.Lock()
	s.dirty[namespace+"/"+name] = true
	s.mu.Unlock()
	s.queue.Add(snapshotKey)
}

// view is the sink's form of a plan.
func view(p *model.Plan) xds.Service {
	svc := xds.Service{Namespace: p.Namespace, Name: p.Name, Service: p.Service, Result: p.Result, Hostnames: p.Hostnames}
	for _, c := range p.Conflicts {
		svc.Withheld = append(svc.Withheld, c.Hostname)
	}
	return svc
}

// Carries implements model.Sink: the plan's content is what is served (to every flavour
// consumed, and what a flavour's first client will be built; the digest covers the
// hostnames, which decide whether the Envoy flavour carries the map).
func (s *Sink) Carries(p *model.Plan) bool {
	want := view(p).Digest()
	s.mu.Lock()
	defer s.mu.Unlock()
	svc, ok := s.served[p.Key().String()]
	return ok && svc.Digest() == want
}

// Check implements model.Sink: a plan whose resources fail validation on their own is
// Refused with ReasonInvalid. The verdict is kept per map while its content is unchanged,
// so a plan checked again costs no translation.
func (s *Sink) Check(p *model.Plan) *model.Confirmation {
	svc := view(p)
	key, content := svc.Key(), svc.Digest()+"\x00"+svc.Service
	s.mu.Lock()
	c, ok := s.checked[key]
	s.mu.Unlock()
	if !ok || c.content != content {
		_, invalid := xds.Partition(s.envoy, []xds.Service{svc})
		c = checked{content: content, err: invalid[key]}
		s.mu.Lock()
		s.checked[key] = c
		s.mu.Unlock()
	}
	if c.err == nil {
		return nil
	}
	return &model.Confirmation{Sink: Name, State: model.Refused, Reason: ReasonInvalid, Message: invalidMessage(key, c.err)}
}

func invalidMessage(key string, err error) string {
	return fmt.Sprintf("xds sink cannot serve trafficmap %s: %s; its last good resources stay served", key, joinLines(err))
}

// Apply implements model.Sink. Serving is the rebuild loop's work; Apply reports whether
// the plan is served and ACKed by the relevant clients: the streams subscribed to one of
// the map's resources (see xds.Judge), each stream a client of its own.
func (s *Sink) Apply(_ context.Context, p *model.Plan) (model.Confirmation, error) {
	svc := view(p)
	key := svc.Key()
	s.mu.Lock()
	invalid := s.invalid[key]
	if invalid == nil {
		// Marked before the clients are read: a client change from now on requeues the
		// map, so an ACK or NACK that lands while it is judged is never missed.
		s.pending[key] = true
	}
	s.mu.Unlock()
	if invalid != nil {
		return model.Confirmation{Sink: Name, State: model.Refused, Reason: ReasonInvalid, Message: invalidMessage(key, invalid)}, nil
	}
	clients, by := s.server.Tracker().Clients(), xds.ServedBy(s.envoy, svc)
	c := xds.Confirm(clients, s.history, key, by, s.cfg.MinClients)
	if c.Done || c.Nack != nil {
		s.mu.Lock()
		delete(s.pending, key)
		s.mu.Unlock()
	} else if p.Confirmed && s.graceOpen() {
		if old := holdingOld(clients, s.history, key, by); old > 0 {
			c.Message += fmt.Sprintf("; %d relevant xds client(s) hold older content (declared or ACKed on reconnecting), which --xds-reconnect-grace does not waive", old)
		} else if s.waive(key) {
			// Clients of the previous publisher are still reconnecting and resubscribing
			// (too few connected, or a stream that has neither declared nor ACKed a
			// version of the map's types yet): content confirmed before the start keeps
			// its condition through the window. A client that declared an older version
			// holds the map (see holdingOld). It stays pending, so ACKs and the window's
			// end judge it again by the usual rules.
			c.Done = true
			c.Message = fmt.Sprintf("content confirmed before the start; within --xds-reconnect-grace %d/%d reconnected clients ACKed it so far (%d connected, --xds-min-clients %d)",
				c.Acked, c.Total, c.Connected, s.cfg.MinClients)
		}
	}
	conf := model.Confirmation{Sink: Name, Message: c.Message,
		Progress: &model.Progress{Confirmed: c.Acked, Total: c.Total, Required: s.cfg.MinClients}}
	var fleet replicas.Verdict
	if s.cfg.Peers != nil && s.cfg.RequireAck {
		fleet = replicas.Judge(s.cfg.Peers(), key, svc.Digest(), p.Published)
		conf.Progress.Confirmed += fleet.Acked
		conf.Progress.Total += fleet.Total
		if fleet.Message != "" {
			conf.Message += "; " + fleet.Message
		}
	} else {
		fleet.Done = true
	}
	switch {
	case c.Nack != nil:
		conf.State, conf.Reason = model.Rejected, ReasonRejected
	case fleet.Nack != nil:
		conf.State, conf.Reason, conf.Message = model.Rejected, ReasonRejected, fleet.Message
	case !fleet.Done:
		conf.State = model.Pending
	case !c.Done && s.cfg.RequireAck:
		conf.State = model.Pending
	default:
		conf.State = model.InPlace
		if why, held := s.graceHolds(p); held {
			conf.State, conf.Message = model.Pending, why+"; "+c.Message
		}
	}
	return conf, nil
}

// holdingOld counts the clients relevant to the map key served as by that hold older
// content of it than the current one (xds.HoldsOld): the reconnect grace waives only
// clients still reconnecting or resubscribing, never one that routes by older content.
func holdingOld(clients []xds.ClientState, h *xds.History, key string, by map[xds.Flavour]xds.Served) int {
	n := 0
	for _, cl := range clients {
		if xds.HoldsOld(cl, h, key, by) {
			n++
		}
	}
	return n
}

// Delete implements model.Sink: the map's resources leave the next snapshot (Changed was
// called by the deletion event) and nothing about it is remembered.
func (s *Sink) Delete(_ context.Context, namespace, name string) (int, error) {
	s.mu.Lock()
	delete(s.pending, namespace+"/"+name)
	delete(s.checked, namespace+"/"+name)
	delete(s.grace.held, namespace+"/"+name)
	s.mu.Unlock()
	return 0, nil
}

// flavours are the flavours the sink can build.
var flavours = []xds.Flavour{xds.FlavourEnvoy, xds.FlavourGRPC}

// rebuild plans the maps marked dirty since the previous rebuild (every map on the first
// rebuild and after a failed one), hands the server the resources of those whose served
// content changed (every other map's stay as they were) for each flavour a client consumes,
// builds a flavour from every served map when its first client has connected, and requeues
// each map whose served content or validity changed. A map whose plan cannot be computed
// or whose resources fail validation keeps its last good content.
func (s *Sink) rebuild(ctx context.Context) (err error) {
	keys, full := s.takeDirty()
	defer func() {
		if err != nil {
			s.mu.Lock()
			s.full = true // what was taken is not served; the retry rereads everything
			s.mu.Unlock()
		}
	}()
	consumed := map[xds.Flavour]bool{}
	for _, f := range flavours {
		consumed[f] = s.server.Tracker().Consumed(f)
	}
	s.mu.Lock()
	prevServed, prevInvalid := s.served, s.invalid // written by this loop alone, under mu
	var build []xds.Flavour                        // consumed, not built yet
	serve := map[xds.Flavour]bool{}
	for _, f := range flavours {
		if consumed[f] && !s.built[f] {
			build = append(build, f)
		}
		serve[f] = consumed[f] || s.built[f]
	}
	s.mu.Unlock()
	if full {
		keys = map[string]bool{}
		for key := range prevServed {
			keys[key] = true
		}
		for key := range prevInvalid {
			keys[key] = true
		}
		for _, key := range s.cfg.Plans.Keys() {
			keys[key] = true
		}
		for _, key := range s.translator.Keys() { // a failed rebuild may have left some
			keys[key] = true
		}
	}
	next, nextInvalid := s.plan(keys, prevServed, prevInvalid)
	retry := s.exclusive(keys, full, prevServed, next, nextInvalid)
	if len(retry) > 0 {
		defer func() {
			s.mu.Lock()
			for _, key := range retry {
				s.dirty[key] = true // rebuilt again with the next change
			}
			s.mu.Unlock()
		}()
	}

	var changed []xds.Service
	var removed, requeue []string
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		a, hadA := prevServed[key]
		b, hasB := next[key]
		switch {
		case hasB && (!hadA || !reflect.DeepEqual(a, b)):
			changed = append(changed, b)
		case hadA && !hasB:
			removed = append(removed, key)
		}
		if hadA != hasB || (hasB && a.Digest() != b.Digest()) {
			requeue = append(requeue, key)
			continue
		}
		e, f := prevInvalid[key], nextInvalid[key]
		if (e == nil) != (f == nil) {
			requeue = append(requeue, key)
		}
	}
	if full {
		for _, key := range s.translator.Keys() {
			if _, ok := next[key]; !ok && !slices.Contains(removed, key) {
				removed = append(removed, key)
			}
		}
	}
	if wait := s.newOnlyWait(changed, removed, requeue, build, full, prevServed); wait > 0 {
		// Only maps no client could reach yet (a cold start journals them one reconcile at
		// a time): they go out with the ones after them, in one snapshot, within
		// coalesceNew of the last; a change to reachable content never waits.
		s.mu.Lock()
		for key := range keys {
			s.dirty[key] = true
		}
		s.mu.Unlock()
		s.queue.AddAfter(snapshotKey, wait)
		return nil
	}
	if len(changed) > 0 || len(removed) > 0 || len(build) > 0 || full {
		update := changed
		if full { // after a failed rebuild the translator may hold content never served
			update = slices.Collect(maps.Values(next))
		}
		s.translator.Update(update, removed)
		for _, f := range flavours {
			if !serve[f] {
				continue
			}
			res, err := s.translator.Resources(f)
			if err != nil {
				return fmt.Errorf("translate %s resources: %w", f, err)
			}
			versions, err := s.server.SetResources(ctx, f, res)
			if err != nil {
				return fmt.Errorf("serve %s resources: %w", f, err)
			}
			if slices.Contains(build, f) || full {
				s.history.Record(f, versions, ofFlavour(f, s.everyService(prevServed, keys, next)), removed)
			} else {
				s.history.Record(f, versions, ofFlavour(f, changed), append(removed, notOfFlavour(f, changed)...))
			}
		}
	}
	if len(changed) > 0 || len(removed) > 0 || len(build) > 0 || full {
		s.lastServed = time.Now()
	}
	s.commit(keys, next, nextInvalid, build)
	for _, key := range requeue {
		ns, name, _ := strings.Cut(key, "/")
		s.cfg.Requeue(ns, name)
	}
	return nil
}

// plan reads the plans of keys: what each would serve (a map absent serves nothing) and
// which fail validation (keeping their last good content), before name exclusivity.
func (s *Sink) plan(keys map[string]bool, prevServed map[string]xds.Service, prevInvalid map[string]error) (map[string]xds.Service, map[string]error) {
	next := make(map[string]xds.Service, len(keys))
	nextInvalid := map[string]error{}
	for key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		p, exists, err := s.cfg.Plans.Plan(ns, name)
		if !exists {
			continue
		}
		prev, had := prevServed[key]
		if err != nil { // the pipeline reports why; the last good content stays
			if had {
				next[key] = prev
			}
			if e := prevInvalid[key]; e != nil {
				nextInvalid[key] = e
			}
			continue
		}
		svc := view(p)
		if err := s.translator.Validate(svc); err != nil {
			nextInvalid[key] = err
			if had {
				next[key] = prev
			}
			continue
		}
		next[key] = svc.Sealed()
	}
	return next, nextInvalid
}

// everyService is every service served once next replaces the keys' content.
func (s *Sink) everyService(prevServed map[string]xds.Service, keys map[string]bool, next map[string]xds.Service) []xds.Service {
	out := make([]xds.Service, 0, len(prevServed)+len(next))
	for key, svc := range prevServed {
		if !keys[key] {
			out = append(out, svc)
		}
	}
	for _, svc := range next {
		out = append(out, svc)
	}
	return out
}

// ofFlavour are the services flavour serves: the Envoy flavour only those with hostnames.
func ofFlavour(f xds.Flavour, services []xds.Service) []xds.Service {
	if f != xds.FlavourEnvoy {
		return services
	}
	return slices.DeleteFunc(slices.Clone(services), func(svc xds.Service) bool { return len(svc.Hostnames) == 0 })
}

// notOfFlavour are the keys of the services flavour does not serve.
func notOfFlavour(f xds.Flavour, services []xds.Service) []string {
	var out []string
	for _, svc := range services {
		if f == xds.FlavourEnvoy && len(svc.Hostnames) == 0 {
			out = append(out, svc.Key())
		}
	}
	return out
}

// commit stores what the keys now serve and which are invalid, and the flavours built.
func (s *Sink) commit(keys map[string]bool, next map[string]xds.Service, nextInvalid map[string]error, build []xds.Flavour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range keys {
		if svc, ok := next[key]; ok {
			s.served[key] = svc
		} else {
			delete(s.served, key)
		}
		if e := nextInvalid[key]; e != nil {
			s.invalid[key] = e
		} else {
			delete(s.invalid, key)
		}
		if _, ok := next[key]; !ok && nextInvalid[key] == nil {
			delete(s.pending, key) // a deleted map leaves nothing behind
		}
	}
	for _, f := range build {
		s.built[f] = true
	}
}

// ErrNameTaken marks a map whose content would serve a name another map's served content
// has: the plans hand a name over in two steps (one map gives it up, the other takes it),
// which a rebuild may see half done.
var ErrNameTaken = errors.New("name served for another trafficmap")

// exclusive makes every name (gRPC listener name, which covers the Envoy domains) served
// for one map only, so the shared route configuration never has a duplicate domain and no
// listener name is served twice. Maps keep their names in this order: those not rebuilt
// now (not in keys), then the others by key. A rebuilt map that would take a name already
// kept falls back to its last good content when that does not, else serves nothing; it is
// marked invalid (ErrNameTaken) and returned, to be rebuilt with the next change. The
// index of names (s.owner) is kept from one rebuild to the next, so only the rebuilt maps'
// names are looked at (all of them when full).
func (s *Sink) exclusive(keys map[string]bool, full bool, prevServed, next map[string]xds.Service, invalid map[string]error) []string {
	if full {
		s.owner = map[string]string{}
	} else {
		for key := range keys {
			if prev, ok := prevServed[key]; ok {
				for _, n := range xds.ListenerNames(prev) {
					if s.owner[n] == key {
						delete(s.owner, n)
					}
				}
			}
		}
	}
	clash := func(key string, svc xds.Service) error {
		for _, n := range xds.ListenerNames(svc) {
			if other, ok := s.owner[n]; ok && other != key {
				return fmt.Errorf("%w: %q is served for trafficmap %s", ErrNameTaken, n, other)
			}
		}
		return nil
	}
	var retry []string
	for _, key := range slices.Sorted(maps.Keys(next)) {
		svc := next[key]
		if err := clash(key, svc); err != nil {
			retry = append(retry, key)
			invalid[key] = err
			prev, ok := prevServed[key]
			if !ok || clash(key, prev) != nil {
				delete(next, key)
				continue
			}
			svc = prev
			next[key] = prev
		}
		for _, n := range xds.ListenerNames(svc) {
			s.owner[n] = key
		}
	}
	return retry
}

// coalesceNew is how long after the last snapshot a rebuild whose only changes are maps
// no client could reach yet waits for more of them (see newOnlyWait).
const coalesceNew = time.Second

// newOnlyWait is how long the rebuild should wait before serving changed: zero unless every
// change is a map no client could reach before (not served, or served with every name
// withheld: a new map whose claim journal has just landed) and nothing else changed (no
// removal, no flavour to build, no full rebuild, nothing else to requeue), and the last
// snapshot is younger than coalesceNew. No client routes by such a map yet, and its
// Published condition waits for its content anyway; serving them together turns a cold
// start's one snapshot per few maps into one per coalesceNew.
func (s *Sink) newOnlyWait(changed []xds.Service, removed, requeue []string, build []xds.Flavour, full bool, prev map[string]xds.Service) time.Duration {
	if full || len(build) > 0 || len(removed) > 0 || len(changed) == 0 || len(requeue) != len(changed) || s.lastServed.IsZero() {
		return 0
	}
	for _, svc := range changed {
		if a, ok := prev[svc.Key()]; ok && len(xds.ListenerNames(a)) > 0 {
			return 0 // reachable: a change to it is served at once
		}
	}
	return max(0, coalesceNew-time.Since(s.lastServed))
}

// takeDirty returns and clears the maps marked dirty, and whether every map is.
func (s *Sink) takeDirty() (map[string]bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, full := s.dirty, s.full
	s.dirty, s.full = map[string]bool{}, false
	return keys, full
}

// processNext rebuilds the snapshot for one queued request, then waits as the pacer says;
// false once the queue is shut.
func (s *Sink) processNext(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	start := time.Now()
	if err := s.rebuild(ctx); err != nil {
		s.log.Info("xds snapshot not rebuilt; the last good one stays served; retrying", zap.Error(err))
		s.queue.AddRateLimited(key)
	} else {
		s.queue.Forget(key)
	}
	s.queue.Done(key)
	if pause := s.pacer.pause(start, time.Now()); pause > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return true
}

// onClientChange runs after every ACK, NACK, connect and disconnect: maps waiting for
// ACKs are reconciled again, and every map when the set of clients changed.
func (s *Sink) onClientChange() {
	tracker := s.server.Tracker()
	members := tracker.Membership()
	s.mu.Lock()
	known := members == s.members
	s.mu.Unlock()
	if !known { // a client may have joined or left: compare the sets
		s.mu.Lock()
		unbuilt := !s.built[xds.FlavourEnvoy] || !s.built[xds.FlavourGRPC]
		s.mu.Unlock()
		if unbuilt {
			for _, f := range flavours {
				s.mu.Lock()
				built := s.built[f]
				s.mu.Unlock()
				if !built && tracker.Consumed(f) {
					s.queue.Add(snapshotKey) // the first client of f: build f for it
				}
			}
		}
		var ids []string
		for _, c := range tracker.Clients() {
			ids = append(ids, c.ID())
		}
		set := strings.Join(ids, "\x00")
		s.mu.Lock()
		changed := set != s.clients
		s.clients, s.members = set, members
		s.mu.Unlock()
		if changed {
			for _, key := range s.cfg.Plans.Keys() {
				ns, name, _ := strings.Cut(key, "/")
				s.cfg.Requeue(ns, name)
			}
			return
		}
	}
	s.mu.Lock()
	waiting := make([]string, 0, len(s.pending))
	for key := range s.pending {
		waiting = append(waiting, key)
	}
	s.mu.Unlock()
	for _, key := range waiting {
		ns, name, _ := strings.Cut(key, "/")
		s.cfg.Requeue(ns, name)
	}
}

// joinLines flattens a joined error onto one line for a condition message.
func joinLines(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
