package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
)

// SinkName is the sink's name in --sinks.
const SinkName = "xds"

// The reasons of the Published condition this sink reports are model.Reason constants:
// ReasonXDSRejected (a client NACKed the content) and ReasonXDSInvalid (the resources failed
// validation; the last good ones stay served).

// SinkConfig configures the sink.
type SinkConfig struct {
	// Address is where the xDS server listens.
	Address string
	// ListenerAddress is the Envoy listener's host:port ("" for the default).
	ListenerAddress string
	// TLSCert, TLSKey and ClientCA secure the port (optional; the CA turns on mutual TLS).
	TLSCert, TLSKey, ClientCA string
	// ClientNamespaces are the rules of a ClientPolicy (need ClientCA).
	ClientNamespaces []string
	// RequireAck makes a plan Pending until every relevant client has ACKed it.
	RequireAck bool
	// MinClients makes a plan Pending until at least this many clients are connected.
	MinClients int
	// ReconnectGrace is how long after Start (and after Leading) a plan that was not
	// published before (model.Standing.PublishedBefore false) stays Pending, so clients of the
	// previous publisher that are still reconnecting count before it is confirmed; 0: none.
	ReconnectGrace time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Registerer receives the server's metrics (nil: none).
	Registerer prometheus.Registerer
	// Peers returns the live reports of the other replicas (lease.Board.Peers); nil
	// without leader election. With RequireAck, a plan is InPlace only when the relevant
	// clients of every live replica ACKed its content too (replicas.Judge).
	Peers func() []replicas.Report
	// Limits bound what one client may make the server hold and do (zero fields: the
	// defaults).
	Limits Limits
	// DepartedGrace is how long a client stream that went away without confirming a map's
	// current content holds the map Pending (see Departed); 0: not at all.
	DepartedGrace time.Duration
}

// ErrInvalidSinkConfig marks a configuration the sink cannot start with.
var ErrInvalidSinkConfig = errors.New("invalid xds sink configuration")

// Sink is the xDS sink: it serves every TrafficMap's plan the pipeline gives it (Serve on
// every replica, Apply on the leader) from a go-control-plane server, and confirms a plan
// once the clients relevant to it (the xDS streams subscribed to its resources, each stream
// on its own) have ACKed a version carrying it. It never plans: the given plans are its
// only input.
//
// Translation is asynchronous: a given plan whose content differs from the one given before
// marks its map dirty, and one loop (rebuilder) serves the dirty maps' given content, paced
// in storms, naming the maps whose served content changed to the pipeline (Updated) so their
// Published condition follows. A rebuild costs what changed: only the dirty maps are
// validated, checked for names another map serves, translated, recorded in the history and
// handed to the server.
//
// Build only what is consumed: a flavour's resources (Envoy or proxyless gRPC) are neither
// translated nor served until a client of that flavour has connected (Tracker.Consumed);
// the first such client triggers a rebuild that builds the flavour, and it is answered
// only then, with the complete current content (the server answers no flavour before its
// first snapshot). The Envoy flavour carries every served map with hostnames. The gRPC
// flavour carries a map only while a gRPC stream subscribes to one of the names its content
// serves (ServedBy; any type), or every map while one subscribes to a type by wildcard: a
// change of the gRPC streams' subscriptions (Tracker.Demand; an ACK alone never changes
// it) rebuilds, which translates, serves and records in the history the maps newly
// demanded, and drops the maps demanded by no stream for DemandLinger (removed from the
// served resources, their translation freed). A rebuild looks at the maps whose content or
// subscribers changed, not at the fleet. Relevance does not depend on what is built: a
// stream subscribed to a map's names is relevant to it, built or not, and confirms it only
// once it ACKed a version the history says carries it.
//
// Reconnect grace: for SinkConfig.ReconnectGrace after Start and after Leading, a plan that
// was not published before (model.Standing.PublishedBefore) is Pending whatever its
// clients say, so clients of the previous publisher still reconnecting with backoff ACK it
// before it is confirmed; the maps it held are named to the pipeline when the window ends.
// Content confirmed before keeps its condition through the window while its clients are
// still reconnecting or resubscribing, never while a client declared (or ACKed) older
// content of it.
//
// Teardown (model.Retiring): a map being deleted is first handed at weight 0 (Apply with
// model.Standing.Finalizing, which gives nothing for a map the sink was not given), then
// Retired: withdrawn like a deleted map, and confirmed once every client that held its
// resources ACKed a version served after their removal (ConfirmRemoval).
//
// State: the given plans (wants), the news for the pipeline (news) and the grace window
// have a lock each; what is served, which maps are invalid, wait for clients or were
// retired, the flavours built and Check's verdicts are guarded by mu; the rebuild loop
// alone writes what is served.
type Sink struct {
	cfg      SinkConfig
	log      *zap.Logger
	server   *Server
	listener net.Listener
	history  *History
	envoy    EnvoyOptions
	wants    *wants
	news     *model.News
	grace    *reconnectGrace
	loop     *rebuilder
	watch    *clientWatch

	mu      sync.Mutex
	served  map[string]Service            // what is served (to the flavours consumed), by map key
	built   map[Flavour]bool              // the flavours whose resources are served (the gRPC flavour's demanded maps: rebuilder.demand)
	pending map[string]bool               // maps whose last confirmation waited for clients
	invalid map[string]error              // maps whose resources failed validation
	checked map[string]checked            // Check's last verdict, by map key
	retired map[string]map[Flavour]Served // maps withdrawn by Retire: what each flavour served of them then
}

// checked is Check's verdict on one map's content.
type checked struct {
	content string
	err     error
}

var (
	_ model.Sink     = (*Sink)(nil)
	_ model.Starter  = (*Sink)(nil)
	_ model.Serving  = (*Sink)(nil)
	_ model.Updater  = (*Sink)(nil)
	_ model.Debugger = (*Sink)(nil)
	_ model.Leading  = (*Sink)(nil)
	_ model.Retiring = (*Sink)(nil)
)

// NewSink validates cfg, loads TLS and listens on cfg.Address; nothing is served before Start.
func NewSink(cfg SinkConfig, log *zap.Logger) (*Sink, error) {
	tlsCfg, err := LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA, cfg.ClientNamespaces...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSinkConfig, err)
	}
	envoy := DefaultEnvoyOptions
	if cfg.ListenerAddress != "" {
		host, port, err := splitHostPort(cfg.ListenerAddress)
		if err != nil {
			return nil, fmt.Errorf("%w: --xds-listener-address %q: %w", ErrInvalidSinkConfig, cfg.ListenerAddress, err)
		}
		envoy.Address, envoy.Port = host, port
	}
	lis, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on --xds-address %s: %w", cfg.Address, err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sink{
		cfg: cfg, log: log, listener: lis, envoy: envoy,
		history: NewHistory(64),
		wants:   newWants(),
		news:    model.NewNews(),
		served:  map[string]Service{},
		built:   map[Flavour]bool{},
		pending: map[string]bool{},
		invalid: map[string]error{},
		checked: map[string]checked{},
		retired: map[string]map[Flavour]Served{},
	}
	s.grace = &reconnectGrace{d: cfg.ReconnectGrace, now: cfg.Now, news: s.news}
	s.loop = newRebuilder(s)
	s.watch = newClientWatch(s)
	s.server = NewServer(ServerConfig{Log: log, TLS: tlsCfg, OnClientChange: s.watch.signal, Registerer: cfg.Registerer, Limits: cfg.Limits,
		DepartedGrace: cfg.DepartedGrace})
	s.server.tracker.departed.now = cfg.Now
	s.server.tracker.departed.onEnd = func() { s.news.Add(s.watch.waiting()...) } // the maps a grace held
	s.history.Follow(s.server.Tracker())                                          // a stalled client's version stays judged
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
func (s *Sink) Name() string { return SinkName }

// Addr is where the xDS server listens.
func (s *Sink) Addr() net.Addr { return s.listener.Addr() }

// DebugHandlers implements model.Debugger: /debug/xds lists the clients and versions, and
// per served map the clients relevant to it and those that ACKed its served content.
func (s *Sink) DebugHandlers() map[string]http.Handler {
	debugMaps := func(clients []ClientState) []DebugMap { // every served map, sorted by key
		s.mu.Lock()
		served := maps.Clone(s.served)
		s.mu.Unlock()
		out := make([]DebugMap, 0, len(served))
		for _, key := range slices.Sorted(maps.Keys(served)) {
			out = append(out, DebugMapOf(clients, s.history, key, ServedBy(s.envoy, served[key])))
		}
		return out
	}
	return map[string]http.Handler{"/debug/xds": s.server.DebugHandlerWith(debugMaps)}
}

// Start implements model.Starter: it serves the plans given so far (the pipeline gives every
// cached map's plan before it starts the sink; no flavour is built before a client of it
// connects), then serves and rebuilds until ctx is done.
func (s *Sink) Start(ctx context.Context) (func(), error) {
	if err := s.loop.rebuild(ctx); err != nil {
		s.log.Error("first xds snapshot not built; retrying", zap.Error(err))
		s.loop.kick()
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.watch.run(ctx) })
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.server.Serve(ctx, s.listener); err != nil {
			s.log.Error("xds server stopped", zap.Error(err))
		}
	}()
	go func() {
		defer wg.Done()
		for s.loop.processNext(ctx) {
		}
	}()
	s.grace.begin()
	go func() {
		<-ctx.Done()
		s.loop.queue.ShutDown()
		s.grace.stop()
	}()
	s.log.Info("serving xds", zap.String("address", s.Addr().String()))
	return wg.Wait, nil
}

// Leading implements model.Leading: the reconnect grace starts again, since clients of the
// previous leader may be reconnecting to this replica.
func (s *Sink) Leading() { s.grace.begin() }

// Replica is the sink's side of the replicas' exchange (package lease): its report and its
// fence.
func (s *Sink) Replica() *Replica { return &Replica{s: s} }

// Serve implements model.Serving: plan is the map's wanted content from now on. When it
// differs from the content given before, the map is rebuilt; Serve itself only records.
func (s *Sink) Serve(p *model.Plan) {
	if s.wants.give(view(p).Sealed()) {
		s.loop.kick()
	}
}

// Withdraw implements model.Serving: the map is deleted; its resources leave the next
// snapshot.
func (s *Sink) Withdraw(key types.NamespacedName) {
	s.wants.forget(key.String())
	s.loop.kick()
}

// Updates implements model.Updater: it signals when Updated has maps.
func (s *Sink) Updates() <-chan struct{} { return s.news.Updates() }

// Updated implements model.Updater: the maps whose served content or validity changed, whose
// clients ACKed, NACKed, connected or left, or that the reconnect grace held until its end,
// since the previous call, sorted.
func (s *Sink) Updated() []types.NamespacedName { return s.news.Updated() }

// view is the sink's form of a plan.
func view(p *model.Plan) Service {
	svc := Service{Namespace: p.Namespace, Name: p.Name, Service: p.Service, Result: p.Result, Hostnames: p.Hostnames}
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
// Refused with model.ReasonXDSInvalid. The verdict is kept per map while its content is unchanged,
// so a plan checked again costs no translation.
func (s *Sink) Check(p *model.Plan) *model.Confirmation {
	svc := view(p)
	key, content := svc.Key(), svc.Digest()+"\x00"+svc.Service
	s.mu.Lock()
	c, ok := s.checked[key]
	s.mu.Unlock()
	if !ok || c.content != content {
		_, invalid := Partition(s.envoy, []Service{svc})
		c = checked{content: content, err: invalid[key]}
		s.mu.Lock()
		s.checked[key] = c
		s.mu.Unlock()
	}
	if c.err == nil {
		return nil
	}
	return &model.Confirmation{Sink: SinkName, State: model.Refused, Reason: model.ReasonXDSInvalid, Message: invalidMessage(key, c.err)}
}

func invalidMessage(key string, err error) string {
	return fmt.Sprintf("xds sink cannot serve trafficmap %s: %s; its last good resources stay served", key, joinLines(err))
}

// Apply implements model.Sink: it gives the plan (Serve; serving is the rebuild loop's
// work) and reports whether the plan is served and ACKed by the relevant clients: the
// streams subscribed to one of the map's resources (see Judge), each stream a client of its
// own, judged with the map's standing.
func (s *Sink) Apply(_ context.Context, p *model.Plan, st model.Standing) (model.Confirmation, error) {
	svc := view(p).Sealed()
	key := svc.Key()
	if _, given := s.wants.get(key); st.Finalizing && !given { // creates nothing for a map being deleted
		return model.Confirmation{Sink: SinkName, State: model.InPlace, Message: "xds serves nothing of trafficmap " + key}, nil
	}
	if s.wants.give(svc) {
		s.loop.kick()
	}
	s.mu.Lock()
	invalid := s.invalid[key]
	if invalid == nil {
		// Marked before the clients are read: a client change from now on names the
		// map, so an ACK or NACK that lands while it is judged is never missed.
		s.pending[key] = true
	}
	s.mu.Unlock()
	if invalid != nil {
		return model.Confirmation{Sink: SinkName, State: model.Refused, Reason: model.ReasonXDSInvalid, Message: invalidMessage(key, invalid)}, nil
	}
	clients, by := s.server.Tracker().Clients(), ServedBy(s.envoy, svc)
	c := Confirm(clients, s.history, key, by, s.cfg.MinClients)
	if c.Done && !s.Carries(p) {
		// No relevant client to wait for, but the server does not serve this content yet
		// (the rebuild loop paces snapshots): a client that connects now would get older
		// content, so the map waits for the snapshot, whose rebuild names it (Updated).
		c.Done = false
		c.Message = "waiting for the xds server to serve these weights in its next snapshot; " + c.Message
	}
	if c.Done || c.Nack != nil {
		s.mu.Lock()
		delete(s.pending, key)
		s.mu.Unlock()
	} else if st.Confirmed && s.grace.open() {
		if old := holdingOld(clients, s.history, key, by); old > 0 {
			c.Message += fmt.Sprintf("; %d relevant xds client(s) hold older content (declared or ACKed on reconnecting), which --xds-reconnect-grace does not waive", old)
		} else if s.grace.waive(key) {
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
	holdDeparted(s, key, by, &c) // never waived: a departed client holds what it held
	conf := model.Confirmation{Sink: SinkName, Message: c.Message,
		Progress: &model.Progress{Confirmed: c.Acked, Total: c.Total, Required: s.cfg.MinClients}}
	fleet := judgeFleet(s, key, svc.Digest(), st.Published, &conf)
	switch {
	case c.Nack != nil:
		conf.State, conf.Reason = model.Rejected, model.ReasonXDSRejected
	case fleet.Nack != nil:
		conf.State, conf.Reason, conf.Message = model.Rejected, model.ReasonXDSRejected, fleet.Message
	case !fleet.Done:
		conf.State = model.Pending
	case !c.Done && s.cfg.RequireAck:
		conf.State = model.Pending
	default:
		conf.State = model.InPlace
		if why, held := s.grace.holds(key, st.PublishedBefore); held {
			conf.State, conf.Message = model.Pending, why+"; "+c.Message
		}
	}
	return conf, nil
}

// judgeFleet is the other replicas' verdict on the map key at digest (Done when the sink
// does not count them), added to conf's progress and message. A map they hold is marked
// waiting, so a peer that stops counting has it judged again (Replica.PeerLeft).
func judgeFleet(s *Sink, key, digest string, published bool, conf *model.Confirmation) replicas.Verdict {
	if s.cfg.Peers == nil || !s.cfg.RequireAck {
		return replicas.Verdict{Done: true}
	}
	fleet := replicas.Judge(s.cfg.Peers(), key, digest, published)
	conf.Progress.Confirmed += fleet.Acked
	conf.Progress.Total += fleet.Total
	if fleet.Message != "" {
		conf.Message += "; " + fleet.Message
	}
	if !fleet.Done && fleet.Nack == nil {
		s.mu.Lock()
		s.pending[key] = true
		s.mu.Unlock()
	}
	return fleet
}

// holdingOld counts the clients relevant to the map key served as by that hold older
// content of it than the current one (HoldsOld): the reconnect grace waives only
// clients still reconnecting or resubscribing, never one that routes by older content.
func holdingOld(clients []ClientState, h *History, key string, by map[Flavour]Served) int {
	n := 0
	for _, cl := range clients {
		if HoldsOld(cl, h, key, by) {
			n++
		}
	}
	return n
}

// Delete implements model.Sink: the map's resources leave the next snapshot and nothing
// about it is remembered (what Retire remembered of it neither).
func (s *Sink) Delete(_ context.Context, namespace, name string) (int, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	s.Withdraw(key)
	s.mu.Lock()
	delete(s.pending, key.String())
	delete(s.checked, key.String())
	delete(s.retired, key.String())
	s.mu.Unlock()
	s.grace.forget(key.String())
	s.history.ForgetRemoval(key.String())
	return 0, nil
}

// joinLines flattens a joined error onto one line for a condition message.
func joinLines(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
