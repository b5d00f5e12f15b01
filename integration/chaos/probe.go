package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// probeTypes are the types every probe subscribes to, in the order of its first requests.
var probeTypes = []string{resource.ListenerType, resource.ClusterType, resource.RouteType}

// Reconnect backoff of a probe: from probeMinBackoff doubling to probeMaxBackoff, each wait
// jittered to between half and all of it.
const (
	probeMinBackoff = 50 * time.Millisecond
	probeMaxBackoff = time.Second
)

// Kinds of heldEvent.
const (
	eventHeld         = "held"
	eventConnected    = "connected"
	eventDisconnected = "disconnected"
)

// mapRef names one TrafficMap a gRPC-flavour probe dials: its listener
// "<Service>.<Namespace>", its route configuration "<Namespace>/<Name>" and the xDS
// clusters of its entries Clusters (see names.go). Hostname and Endpoints are what its
// chain must hold, in both flavours (see chain.held).
type mapRef struct {
	Namespace, Name, Service string
	Clusters                 []string
	// Hostname is the map's hostname from the host template; the workload's hostname
	// operation gives it names under it ("h-N.<Hostname>"), so an Envoy virtual host of the
	// map must have Hostname or a name under it among its domains. "": any domain.
	Hostname string
	// Endpoints are the entries' endpoint URLs by cluster (spec.entries[].endpoint): each
	// weighted cluster's one endpoint must be at the URL's address. A cluster absent: any
	// one endpoint.
	Endpoints map[string]string
}

// Key is the map's key, "<namespace>/<name>" (also its route configuration's and virtual
// host's name in both flavours).
func (m mapRef) Key() string { return m.Namespace + "/" + m.Name }

// probeConfig configures a probe.
type probeConfig struct {
	NodeID string // may be 2 KB long
	Delta  bool
	// Envoy: the Envoy flavour (wildcard listeners and clusters, the shared route
	// configuration by name; Maps are only what their virtual hosts must hold); else the
	// proxyless gRPC flavour, by name per map in Maps.
	Envoy bool
	// TLS is the client TLS (mutual or anonymous); nil dials in plaintext (tests only: the
	// publisher's xDS port is always TLS in the chaos run).
	TLS *tls.Config
	// Maps are what a gRPC-flavour probe subscribes to. Without a map (or a cluster) its
	// first subscription of the type has no name, which the server reads as a wildcard.
	Maps []mapRef
	// Addr says where to connect now; "" means none is up: wait and retry.
	Addr     func() string
	NACKText int  // bytes of error_detail.message when NACKing (default 64)
	NeverACK bool // subscribes and never ACKs (answers nothing after its first requests)
}

// heldEvent is one entry of a map's history in a probe: a change of what the probe holds
// (ACKed) for the map ("held"), or a connect or disconnect of its stream, with the map's
// held state at that moment.
type heldEvent struct {
	At   time.Time
	Kind string // "held", "connected", "disconnected"
	// Weights are the map's canonical positive weights "c1=w1,c2=w2" sorted by cluster
	// (entry cluster names); "" when none (a 503 route, or no route).
	Weights string
	// Present: the map's route is held and its whole chain is intact (listener, route
	// configuration, virtual host and domains, clusters, endpoints; see chain.held).
	Present bool
	// Broken names the chain's first failing link ("" when intact or nothing is held); the
	// map is then not Present, whatever its Weights.
	Broken string
	// Domains are its virtual host's domains, sorted; Endpoints its weighted clusters'
	// endpoints "entry=host:port", sorted.
	Domains, Endpoints []string
}

// probeStats count a probe's protocol events since it started.
type probeStats struct {
	Responses, ACKs, NACKs, Connects int64
	// Refused counts streams refused: at the TLS handshake (never connected) or with
	// Unauthenticated or PermissionDenied (such a stream opened and sent its first
	// requests, so it shows as a connect and a disconnect milliseconds apart).
	Refused int64
}

// heldState is what a probe holds for one map (see heldEvent).
type heldState struct {
	weights            string
	present            bool
	broken             string
	domains, endpoints []string
}

// equal reports whether h and o are the same state (a change of any is a "held" event).
func (h heldState) equal(o heldState) bool {
	return h.weights == o.weights && h.present == o.present && h.broken == o.broken &&
		slices.Equal(h.domains, o.domains) && slices.Equal(h.endpoints, o.endpoints)
}

// event is h as a "held" event at at.
func (h heldState) event(at time.Time) heldEvent {
	return heldEvent{At: at, Kind: eventHeld, Weights: h.weights, Present: h.present, Broken: h.broken, Domains: h.domains, Endpoints: h.endpoints}
}

// probe is a protocol-level ADS client of the chaos run: the invariant checker's eyes on
// the xDS sink (what a client that ACKs holds for each map, when) and, configured so, a
// faulty or adversarial client (disconnects, freezes, NACKs, never ACKs, no credentials,
// oversized node id and NACK text). Like a real client it keeps what it holds across
// reconnects and declares it when reconnecting.
//
// Locking: mu guards the fields below it and is never held across a network call; wire
// is touched only by Run's goroutine. Run is called once.
type probe struct {
	cfg  probeConfig
	id   string
	wire *probeWire

	mu          sync.Mutex
	held        map[string]heldState   // per map key, what is held now
	history     map[string][]heldEvent // per map key, its "held" events
	links       []heldEvent            // the "connected" and "disconnected" events (no map state)
	stats       probeStats
	cancel      context.CancelFunc // ends the current stream; nil between streams
	frozenUntil time.Time
	nacksLeft   int
}

// newProbe returns a probe; Run connects it.
func newProbe(cfg probeConfig) *probe {
	w := &probeWire{names: map[string][]string{}, versions: map[string]string{},
		resources: map[string]map[string]string{}, chain: newChain(), envoy: cfg.Envoy, expect: map[string]mapExpect{}}
	p := &probe{cfg: cfg, wire: w, held: map[string]heldState{}, history: map[string][]heldEvent{}}
	for _, m := range cfg.Maps {
		w.expect[m.Key()] = newMapExpect(m)
	}
	flavour, kind := flavourGRPC, "grpc"
	if cfg.Envoy {
		flavour, kind = flavourEnvoy, "envoy"
		w.names[resource.RouteType] = []string{envoyRouteConfig}
	} else {
		for _, m := range cfg.Maps {
			w.names[resource.ListenerType] = append(w.names[resource.ListenerType], grpcListenerName(m.Service, m.Namespace))
			w.names[resource.RouteType] = append(w.names[resource.RouteType], grpcRouteConfigName(m.Namespace, m.Name))
			for _, c := range m.Clusters {
				w.names[resource.ClusterType] = append(w.names[resource.ClusterType], xdsClusterName(m.Namespace, m.Name, c))
			}
		}
	}
	stream := "sotw"
	if cfg.Delta {
		stream = "delta"
	}
	id := cfg.NodeID
	if len(id) > 40 {
		id = id[:40]
	}
	p.id = id + " " + kind + "-" + stream
	w.node = &corev3.Node{Id: cfg.NodeID, UserAgentName: "trafficmap-chaos", Metadata: &structpb.Struct{
		Fields: map[string]*structpb.Value{flavourMetadataKey: structpb.NewStringValue(flavour)}}}
	n := cfg.NACKText
	if n <= 0 {
		n = 64
	}
	w.nack = strings.Repeat("chaos probe rejects this response; ", n/35+1)[:n]
	return p
}

// ID is a short label: the node id truncated to 40 characters, the flavour and the stream
// kind.
func (p *probe) ID() string { return p.id }

// Run connects and reconnects (backoff 50ms..1s, jittered; reset after a stream that was
// connected and not refused) until ctx ends.
func (p *probe) Run(ctx context.Context) {
	wait := probeMinBackoff
	for ctx.Err() == nil {
		if addr := p.cfg.Addr(); addr != "" && p.session(ctx, addr) {
			wait = probeMinBackoff
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, probeMaxBackoff)
	}
}

// Subscribes reports whether the probe subscribes to the map with key: an Envoy-flavour
// probe to every map (the shared route configuration), a gRPC-flavour one to its Maps.
func (p *probe) Subscribes(key string) bool {
	return p.cfg.Envoy || slices.ContainsFunc(p.cfg.Maps, func(m mapRef) bool { return m.Key() == key })
}

// Disconnect ends the current stream now; Run reconnects.
func (p *probe) Disconnect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
}

// Freeze stops reading and ACKing for d (from now, or longer if already frozen longer);
// the stream stays open.
func (p *probe) Freeze(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.frozenUntil) {
		p.frozenUntil = until
	}
}

// NACK makes the probe NACK the next n responses (error_detail of NACKText bytes),
// keeping its previous state, then ACK again.
func (p *probe) NACK(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nacksLeft += n
}

// StopNACKs ends what NACK asked for and returns how many of those NACKs are left undone
// (no response came meanwhile): they must not fall on the responses of a later stream.
func (p *probe) StopNACKs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := p.nacksLeft
	p.nacksLeft = 0
	return left
}

// Stats returns the probe's counters.
func (p *probe) Stats() probeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// History returns the map's history in order: every change of what the probe holds for
// it and every connect and disconnect (with the map's held state then). The slice is the
// caller's.
func (p *probe) History(key string) []heldEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := p.history[key]
	out := make([]heldEvent, 0, len(held)+len(p.links))
	var cur heldEvent
	i, j := 0, 0
	for i < len(held) || j < len(p.links) {
		if j == len(p.links) || (i < len(held) && !held[i].At.After(p.links[j].At)) {
			cur = held[i]
			out = append(out, cur)
			i++
			continue
		}
		e := p.links[j]
		e.Weights, e.Present, e.Broken, e.Domains, e.Endpoints = cur.Weights, cur.Present, cur.Broken, cur.Domains, cur.Endpoints
		out = append(out, e)
		j++
	}
	return out
}

// HeldAt returns what the probe held (ACKed) for the map at t, and whether it was
// connected then (stream open and first requests sent).
func (p *probe) HeldAt(key string, t time.Time) (weights string, present, connected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := lastAt(p.history[key], t); ok {
		weights, present = e.Weights, e.Present
	}
	if e, ok := lastAt(p.links, t); ok {
		connected = e.Kind == eventConnected
	}
	return weights, present, connected
}

// lastAt returns the last of events (in time order) at or before t.
func lastAt(events []heldEvent, t time.Time) (heldEvent, bool) {
	i := sort.Search(len(events), func(i int) bool { return events[i].At.After(t) })
	if i == 0 {
		return heldEvent{}, false
	}
	return events[i-1], true
}

// session runs one stream to addr until it ends, and reports whether it was connected and
// not refused.
func (p *probe) session(ctx context.Context, addr string) bool {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	var alert atomic.Bool
	creds := insecure.NewCredentials()
	if p.cfg.TLS != nil {
		creds = alertCreds{TransportCredentials: credentials.NewTLS(p.cfg.TLS), alert: &alert}
	}
	connected := false
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err == nil {
		ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
		if p.cfg.Delta {
			connected, err = p.wire.serveDelta(sctx, p, ads)
		} else {
			connected, err = p.wire.serveSotW(sctx, p, ads)
		}
		_ = conn.Close()
	}
	code := status.Code(err)
	refused := alert.Load() || code == codes.Unauthenticated || code == codes.PermissionDenied
	p.mu.Lock()
	p.cancel = nil
	if refused {
		p.stats.Refused++
	}
	p.mu.Unlock()
	if connected {
		p.link(eventDisconnected)
	}
	return connected && !refused
}

// link records a connect (the stream is open and its first requests sent) or a disconnect.
func (p *probe) link(kind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links = append(p.links, heldEvent{At: time.Now(), Kind: kind})
	if kind == eventConnected {
		p.stats.Connects++
	}
}

// received counts a response and waits out a freeze; it reports whether to NACK it
// (taking one of the NACKs asked for) and whether to answer it at all.
func (p *probe) received(ctx context.Context) (nack, answer bool, err error) {
	p.mu.Lock()
	p.stats.Responses++
	p.mu.Unlock()
	if p.cfg.NeverACK {
		return false, false, nil
	}
	if err := p.thaw(ctx); err != nil {
		return false, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nacksLeft > 0 {
		p.nacksLeft--
		return true, true, nil
	}
	return false, true, nil
}

// thaw returns once the probe is not frozen, or with ctx's error.
func (p *probe) thaw(ctx context.Context) error {
	for {
		p.mu.Lock()
		d := time.Until(p.frozenUntil)
		p.mu.Unlock()
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// answered counts an answer sent (a NACK when nack) and, for an ACK (next, what the chain
// held then gives every map, non-nil), records the maps whose held state changed, at the
// time the ACK was sent.
func (p *probe) answered(nack bool, next map[string]heldState) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if nack {
		p.stats.NACKs++
		return
	}
	p.stats.ACKs++
	if next == nil {
		return
	}
	for key := range p.held {
		if _, ok := next[key]; !ok {
			p.history[key] = append(p.history[key], heldEvent{At: now, Kind: eventHeld})
		}
	}
	for key, h := range next {
		if prev, ok := p.held[key]; !ok || !prev.equal(h) {
			p.history[key] = append(p.history[key], h.event(now))
		}
	}
	p.held = next
}

// probeWire is what a probe holds at the protocol level (what it ACKed), kept across
// reconnects and declared when reconnecting, and what it subscribes to. Only the probe's
// Run goroutine uses it.
type probeWire struct {
	node  *corev3.Node
	names map[string][]string // per type URL the names subscribed; a type absent is a wildcard
	nack  string              // the error_detail message of a NACK

	versions  map[string]string            // SotW: per type the version_info last ACKed
	resources map[string]map[string]string // delta: per type the resources held, by name, with their versions
	chain     chain                        // the listeners, route configurations and clusters held, decoded
	envoy     bool                         // the Envoy flavour
	expect    map[string]mapExpect         // per map key, what its chain must hold (the probe's Maps)
}

// heldMaps is what the chain held gives each map.
func (w *probeWire) heldMaps() map[string]heldState {
	return w.chain.held(w.envoy, w.expect)
}

// nackDetail is the error_detail of a NACK: the decoding error, else the probe's text.
func (w *probeWire) nackDetail(err error) *statuspb.Status {
	msg := w.nack
	if err != nil {
		msg = err.Error()
	}
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
}

// serveSotW runs a state-of-the-world stream for p: its first requests declare the version
// held of each type; it reports whether it got that far.
func (w *probeWire) serveSotW(ctx context.Context, p *probe, ads discoveryv3.AggregatedDiscoveryServiceClient) (bool, error) {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open sotw stream: %w", err)
	}
	for _, t := range probeTypes {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: w.node, TypeUrl: t, ResourceNames: w.names[t], VersionInfo: w.versions[t]}); err != nil {
			return false, fmt.Errorf("subscribe %s: %w", t, err)
		}
	}
	p.link(eventConnected)
	for {
		if err := p.thaw(ctx); err != nil {
			return true, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return true, fmt.Errorf("receive: %w", err)
		}
		nack, answer, err := p.received(ctx)
		if err != nil {
			return true, err
		}
		if !answer {
			continue
		}
		t := resp.GetTypeUrl()
		// A state-of-the-world response (wildcard or by name) carries every resource of its
		// type the probe subscribes to: it is the whole set held.
		d, derr := decodeResources(t, resp.GetResources())
		req := &discoveryv3.DiscoveryRequest{Node: w.node, TypeUrl: t, ResourceNames: w.names[t], VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if nack || derr != nil {
			req.VersionInfo, req.ErrorDetail = w.versions[t], w.nackDetail(derr)
		}
		if err := stream.Send(req); err != nil {
			return true, fmt.Errorf("answer %s: %w", t, err)
		}
		if req.ErrorDetail != nil {
			p.answered(true, nil)
			continue
		}
		w.versions[t] = resp.GetVersionInfo()
		w.chain.replace(d)
		p.answered(false, w.heldMaps())
	}
}

// serveDelta runs a delta stream for p: its first requests declare the resources held
// (initial_resource_versions); it reports whether it got that far.
func (w *probeWire) serveDelta(ctx context.Context, p *probe, ads discoveryv3.AggregatedDiscoveryServiceClient) (bool, error) {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open delta stream: %w", err)
	}
	for _, t := range probeTypes {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: w.node, TypeUrl: t, ResourceNamesSubscribe: w.names[t],
			InitialResourceVersions: maps.Clone(w.resources[t])}); err != nil {
			return false, fmt.Errorf("subscribe %s: %w", t, err)
		}
	}
	p.link(eventConnected)
	for {
		if err := p.thaw(ctx); err != nil {
			return true, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return true, fmt.Errorf("receive: %w", err)
		}
		nack, answer, err := p.received(ctx)
		if err != nil {
			return true, err
		}
		if !answer {
			continue
		}
		t := resp.GetTypeUrl()
		anys := make([]*anypb.Any, 0, len(resp.GetResources()))
		for _, r := range resp.GetResources() {
			if r.GetResource() != nil {
				anys = append(anys, r.GetResource())
			}
		}
		d, derr := decodeResources(t, anys)
		req := &discoveryv3.DeltaDiscoveryRequest{Node: w.node, TypeUrl: t, ResponseNonce: resp.GetNonce()}
		if nack || derr != nil {
			req.ErrorDetail = w.nackDetail(derr)
		}
		if err := stream.Send(req); err != nil {
			return true, fmt.Errorf("answer %s: %w", t, err)
		}
		if req.ErrorDetail != nil {
			p.answered(true, nil)
			continue
		}
		w.applyDelta(resp, d)
		p.answered(false, w.heldMaps())
	}
}

// applyDelta takes an ACKed delta response into the state held: its resources' versions,
// its removals, and its resources (d, decoded).
func (w *probeWire) applyDelta(resp *discoveryv3.DeltaDiscoveryResponse, d decodedSet) {
	t := resp.GetTypeUrl()
	held := w.resources[t]
	if held == nil {
		held = map[string]string{}
		w.resources[t] = held
	}
	for _, r := range resp.GetResources() {
		held[r.GetName()] = r.GetVersion()
	}
	for _, name := range resp.GetRemovedResources() {
		delete(held, name)
	}
	w.chain.apply(t, d, resp.GetRemovedResources())
}

// alertCreds are TLS credentials that note a TLS alert from the server (a refused client
// certificate arrives as one, with TLS 1.3 after the client's side of the handshake).
type alertCreds struct {
	credentials.TransportCredentials
	alert *atomic.Bool
}

// ClientHandshake performs the handshake and watches the connection's reads for an alert.
func (c alertCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		noteAlert(err, c.alert)
		return nil, nil, err
	}
	return alertConn{Conn: conn, alert: c.alert}, info, nil
}

// Clone keeps the alert flag.
func (c alertCreds) Clone() credentials.TransportCredentials {
	return alertCreds{TransportCredentials: c.TransportCredentials.Clone(), alert: c.alert}
}

// alertConn notes a TLS alert read from the server.
type alertConn struct {
	net.Conn
	alert *atomic.Bool
}

func (c alertConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		noteAlert(err, c.alert)
	}
	return n, err
}

// noteAlert sets flag when err is an alert the TLS peer sent (crypto/tls reports it as a
// net.OpError of Op "remote error").
func noteAlert(err error, flag *atomic.Bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		flag.Store(true)
	}
}
