package xds

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/peer"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/replicas"
)

// ClientState is what one connected client has done with each resource type. Every xDS
// stream is its own client: pods started from one bootstrap share a node id, and their
// streams are never merged. A per-type (non-ADS) client has one ClientState per stream.
type ClientState struct {
	NodeID  string
	Flavour Flavour
	// Stream names the stream, "sotw-<id>" or "delta-<id>" (go-control-plane numbers each
	// kind on its own).
	Stream string
	// Peer is the stream's remote address, "" when unknown.
	Peer string
	// Access is what the stream may see, from its verified client certificate (see
	// AccessOf); a client counts only for the maps it may see (MaySee).
	Access Access
	// TypeURL is the stream's one resource type for per-type xDS, "" for ADS.
	TypeURL string
	// Acked is the last version the client ACKed, per type URL. A stream subscribed by name
	// that an update of other names leaves alone holds the new version too (its resources
	// are the same in both), so it is moved to it without a response. Shared with the
	// tracker: read it, never modify it.
	Acked map[string]string
	// Nacked is the last NACK per type URL. A state-of-the-world stream's is cleared by a
	// later ACK of that type; a delta stream's stays while a resource of the type stays
	// rejected (see Unacked). Shared with the tracker: read it, never modify it.
	Nacked map[string]Nack
	// Unacked, for a delta stream (nil for state of the world), are per type URL the
	// resources sent to the stream whose latest content it has not ACKed (see Unanswered).
	// Every other resource of the type the stream subscribes to, it holds as in
	// Acked[type]. An ACK of a response counts only for the resources that response
	// carried, so the ACK of one map's change never clears another map's rejection. Shared
	// with the tracker: read it, never modify it.
	Unacked map[string]map[string]Unanswered
	// Stale, for a delta stream, are per type URL the resources it declared, when it
	// opened (initial_resource_versions), at a version other than the one served then: the
	// client holds older content of them until it ACKs a response carrying them. Shared
	// with the tracker: read it, never modify it.
	Stale map[string]map[string]struct{}
	// Subscribed is what the stream subscribed to, per type URL; a type absent here has no
	// subscription. The map is shared with the tracker: read it, never modify it.
	Subscribed map[string]Subscription
	// Fresh are per type URL the resources the stream subscribed to by name after its
	// first subscription of the type and holds nothing of yet, whatever version it ACKed
	// (a version is type-wide, and it ACKed it for its subscription then): a
	// state-of-the-world stream until it ACKs a response sent after it subscribed, a
	// delta stream each until a response carries it (it is then Unacked, held as in no
	// version). Shared with the tracker: read it, never modify it.
	Fresh map[string]map[string]struct{}
	// tracker is the Tracker the state is of (nil for a state made by hand): it tells
	// which later versions left given resources as they were (see unchanged).
	tracker *Tracker
}

// unchanged are version of typeURL and the versions served after it to c's flavour, in
// order, that changed none of names: a client that holds names as in version holds them
// as in each of these. Just version when the updates since are not known (c was made by
// hand, or they are older than the tracker remembers).
func (c ClientState) unchanged(typeURL, version string, names []string) []string {
	if c.tracker == nil || version == "" {
		return []string{version}
	}
	t := c.tracker
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.steps.chain(stepKey{c.Flavour, typeURL}, version, func(touched map[string]struct{}) bool {
		for _, n := range names {
			if _, ok := touched[n]; ok {
				return true
			}
		}
		return false
	})
}

// ID names the client uniquely among the connected ones: its node id and stream.
func (c ClientState) ID() string { return c.NodeID + "/" + c.Stream }

// Unanswered is one resource a delta stream was sent and has not ACKed the latest content
// of: until it does, it holds the resource as in Held (the version of the type it held it
// at when it was first sent again: its Acked version then, "" when it held none) or as in
// a version sent since (a client may apply a response before it answers it). Nack is nil
// while the response is unanswered, the rejection once the stream NACKed it (it then
// holds the resource as in Held).
type Unanswered struct {
	Held string
	Nack *Nack
}

// holding is what a stream holds of one service's resources of one type.
type holding struct {
	// acked: some of them are held as in ClientState.Acked[type].
	acked bool
	// none: some of them are not held at all, nor sent yet (ClientState.Fresh).
	none bool
	// since are the versions (distinct) the others were held at when they were sent again
	// (Unanswered.Held): each of them is held as in that version or a later one.
	since []string
	// nack is the rejection that concerns them, if rejected.
	nack     Nack
	rejected bool
}

// held is what the stream holds of names (one service's resources) of typeURL, and the
// rejection that concerns them, if any: for a delta stream the first of names (in their
// order) that it NACKed, for a state-of-the-world stream the type's last NACK. A stream
// holds them as in Acked[typeURL], but the fresh ones (see Fresh) as in no version, and a
// delta stream those it has not ACKed the latest content of as their Unanswered says (one
// map's change of a resource that carries many, such as the Envoy flavour's one route
// configuration, leaves the others' content where it was).
func (c ClientState) held(typeURL string, names []string) holding {
	var h holding
	if c.Unacked == nil {
		h.nack, h.rejected = c.Nacked[typeURL]
	}
	unacked, fresh := c.Unacked[typeURL], c.Fresh[typeURL]
	if len(unacked) == 0 && len(fresh) == 0 {
		h.acked = true
		return h
	}
	since := func(v string) {
		if !slices.Contains(h.since, v) {
			h.since = append(h.since, v)
		}
	}
	for _, n := range names {
		if r, ok := unacked[n]; ok {
			since(r.Held)
			if r.Nack != nil && !h.rejected {
				h.nack, h.rejected = *r.Nack, true
			}
			continue
		}
		if _, ok := fresh[n]; ok {
			h.none = true
			continue
		}
		h.acked = true
	}
	return h
}

// Subscription is what one stream subscribed to of one resource type, as go-control-plane
// reads it: a first state-of-the-world request (or delta subscription) without names is a
// wildcard (legacy wildcard) until the stream names resources, and "*" is an explicit
// wildcard.
type Subscription struct {
	// Wildcard subscribes to every resource of the type.
	Wildcard bool
	// Names are the resources subscribed to by name. The map is shared and never modified.
	Names map[string]struct{}
}

// IncludesAny reports whether the subscription includes any of names.
func (s Subscription) IncludesAny(names []string) bool {
	if len(names) == 0 {
		return false
	}
	if s.Wildcard {
		return true
	}
	for _, n := range names {
		if _, ok := s.Names[n]; ok {
			return true
		}
	}
	return false
}

// SortedNames returns the names subscribed to by name, sorted.
func (s Subscription) SortedNames() []string {
	return slices.Sorted(maps.Keys(s.Names))
}

// Nack is a client's rejection of one version (model.XDSNack).
type Nack = model.XDSNack

// maxNackMessage bounds the bytes of a NACK's error_detail message the tracker keeps: the
// text is client-chosen, and it is copied into conditions, reports and the debug page.
const maxNackMessage = 1024

// boundMessage cuts a client's NACK message to maxNackMessage bytes, at a UTF-8 boundary,
// marking the cut.
func boundMessage(m string) string {
	if len(m) <= maxNackMessage {
		return m
	}
	const mark = "…(truncated)"
	cut := maxNackMessage - len(mark)
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut] + mark
}

// Tracker records, from the xDS server's callbacks, which version each stream ACKed or
// NACKed per type URL and what it subscribed to. ACK and NACK are read from the protocol: a
// state-of-the-world request that answers the latest nonce sent on its stream, with
// error_detail for a NACK; a delta request that answers any response the stream has not
// answered yet, counting for exactly the resources that response carried (see
// ClientState.Unacked);
// a delta stream that opens declaring, in initial_resource_versions, the current version of
// everything it subscribes to has ACKed the current version (the server sends it nothing).
// Safe for concurrent use.
type Tracker struct {
	mu       sync.Mutex
	streams  map[streamKey]*stream
	onChange func()
	observe  func(typeURL string, nack bool) // metrics hook; nil means none
	// limits bound what a stream's requests may name (see Limits); refused, when set,
	// counts a refused request by reason (metrics hook).
	limits  Limits
	refused func(reason string)
	members uint64             // see Membership
	demand  map[Flavour]uint64 // see Demand
	// served returns the cache serving a node's flavour a type; nil means none is known
	// (the delta reconnect rule then never applies).
	served func(node *corev3.Node, typeURL string) *typeCache
	// clients is what Clients returns until a stream changes (nil: build it again).
	clients []ClientState
	// flavours are the flavours a stream has identified itself as since the tracker started.
	flavours map[Flavour]bool
	// steps are the last updates per flavour and type (see advance).
	steps stepLog
	// departed remembers the identified streams that closed (see Departed); nil: none.
	departed *departures
}

// streamKey names a stream: go-control-plane numbers state-of-the-world and delta streams
// with separate counters, so an id alone is ambiguous in a mixed fleet.
type streamKey struct {
	delta bool
	id    int64
}

func (k streamKey) String() string {
	if k.delta {
		return "delta-" + strconv.FormatInt(k.id, 10)
	}
	return "sotw-" + strconv.FormatInt(k.id, 10)
}

type stream struct {
	delta   bool
	node    *corev3.Node
	flavour Flavour // of node
	peer    string
	access  Access
	typeURL string                  // the stream's type, for non-ADS streams
	sent    map[string]string       // type URL -> latest nonce sent
	version map[string]string       // nonce -> version sent with it
	acked   map[string]string       // replaced, never modified, on every change
	nacked  map[string]Nack         // replaced, never modified, on every change
	subs    map[string]Subscription // replaced, never modified, on every change
	named   map[string]bool         // types the stream has named resources of (legacy wildcard over)
	subGen  uint64                  // counts setSub calls (resubscribe compares only after one)
	// identified is when the stream first identified itself (its node), by the departures'
	// clock (see arrivals).
	identified time.Time
	// fresh is ClientState.Fresh (replaced, never modified, on every change); freshAt, per
	// type URL, when its names or a switch to a wildcard were last subscribed to (see
	// stream.subscribed).
	fresh   map[string]map[string]struct{}
	freshAt map[string]freshMark
	// unserved are the initial_resource_versions a delta stream declared, per type URL,
	// before its flavour's type was first served: judged when it is (see advance).
	unserved map[string]map[string]string
	// req is the state-of-the-world request the stream's goroutine handles now (the server
	// calls the request callback, then the cache, in that goroutine): see Rejected.
	req *discoveryv3.DiscoveryRequest
	// Delta streams only (see deltaState).
	deltaState
}

// deltaState is what a delta stream holds of each resource: an ACK or a NACK of a delta
// response applies to exactly the resources that response carried, so the tracker maps
// each nonce to the resources it carried until the stream answers it.
type deltaState struct {
	seq         uint64                       // counts the stream's responses
	outstanding map[string]deltaSent         // nonce -> response not answered yet
	order       []string                     // nonces of outstanding, oldest first
	ackedSeq    map[string]uint64            // type URL -> seq of the newest response ACKed
	latest      map[string]map[string]uint64 // type URL -> name -> seq of the latest response carrying it, for the names in unacked
	// unacked and stale are the ClientState's: the outer maps are replaced on every
	// change, an inner map is changed in place until Clients hands it out (shared), then
	// cloned before its next change.
	unacked map[string]map[string]Unanswered
	stale   map[string]map[string]struct{}
	shared  map[string]bool // the types whose inner unacked map Clients handed out
	// helds counts, per type URL, the unacked resources by their Unanswered.Held version.
	helds map[string]map[string]int
}

// deltaSent is one delta response not answered yet.
type deltaSent struct {
	typeURL string
	seq     uint64
	version string   // the type version it brought the stream to (see forward)
	names   []string // the resources it carried and removed
}

// maxOutstanding bounds the delta responses a stream may leave unanswered that the
// tracker remembers; the resources of older ones stay unacked until they are sent again
// (a client that does not answer holds the maps it subscribes to).
const maxOutstanding = 128

// NewTracker returns a Tracker that calls onChange (if not nil) after every ACK, NACK,
// connect and disconnect, outside its lock.
func NewTracker(onChange func()) *Tracker {
	return &Tracker{streams: map[streamKey]*stream{}, onChange: onChange, demand: map[Flavour]uint64{}, limits: Limits{}.withDefaults()}
}

// Callbacks returns the server callbacks that feed the tracker, for SotW and delta.
func (t *Tracker) Callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			t.open(streamKey{id: id}, peerOf(ctx), AccessOf(ctx), typeURL)
			return nil
		},
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			t.open(streamKey{delta: true, id: id}, peerOf(ctx), AccessOf(ctx), typeURL)
			return nil
		},
		StreamClosedFunc:      func(id int64, _ *corev3.Node) { t.close(streamKey{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { t.close(streamKey{delta: true, id: id}) },
		// Every request is checked (see checkSotW, checkDelta) before anything is made of
		// it; a refused one ends its stream with the refusal's status.
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			if r := checkSotW(req, t.limits); r != nil {
				return r.counted(t.refused)
			}
			return t.request(trackedRequest{key: streamKey{id: id}, node: req.GetNode(), typeURL: req.GetTypeUrl(), nonce: req.GetResponseNonce(),
				version: req.GetVersionInfo(), message: req.GetErrorDetail().GetMessage(), nack: req.GetErrorDetail() != nil,
				subscribe: func(s *stream, typeURL string) *refusal {
					s.req = req
					s.subscribeSotW(typeURL, req.GetResourceNames())
					return nil
				}}).counted(t.refused)
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			t.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
		},
		// The delta request callback runs before the server fills in node and type URL: the
		// tracker remembers the node from the stream's first request and the type from open.
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			if r := checkDelta(req, t.limits); r != nil {
				return r.counted(t.refused)
			}
			key := streamKey{delta: true, id: id}
			pre := prepareDelta(t, key, req)
			return t.request(trackedRequest{key: key, node: req.GetNode(), typeURL: req.GetTypeUrl(), nonce: req.GetResponseNonce(),
				message: req.GetErrorDetail().GetMessage(), nack: req.GetErrorDetail() != nil, added: nonNil(req.GetResourceNamesSubscribe()),
				subscribe: func(s *stream, typeURL string) *refusal {
					if r := s.subscribeDelta(typeURL, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), t.limits.MaxNames, pre); r != nil {
						return r
					}
					if len(req.GetInitialResourceVersions()) > 0 && req.GetResponseNonce() == "" {
						s.declare(servingCache(t.served, s, typeURL), typeURL, req.GetInitialResourceVersions())
					}
					return nil
				}}).counted(t.refused)
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			names := make([]string, 0, len(resp.GetResources())+len(resp.GetRemovedResources()))
			for _, r := range resp.GetResources() {
				names = append(names, r.GetName())
			}
			names = append(names, resp.GetRemovedResources()...)
			t.deltaResponse(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo(), names)
		},
	}
}

// nonNil is names, an empty list when nil (a delta request that subscribes to nothing
// adds nothing).
func nonNil(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (t *Tracker) open(key streamKey, peer string, access Access, typeURL string) {
	t.mu.Lock()
	t.clients = nil
	t.streams[key] = &stream{delta: key.delta, peer: peer, access: access, typeURL: typeURL, sent: map[string]string{}, version: map[string]string{},
		acked: map[string]string{}, nacked: map[string]Nack{}, subs: map[string]Subscription{}, named: map[string]bool{}}
	t.mu.Unlock()
	t.changed()
}

func (t *Tracker) close(key streamKey) {
	t.mu.Lock()
	t.clients = nil
	if s := t.streams[key]; s != nil && s.node != nil {
		t.members++
		t.demand[s.flavour]++
		t.departed.add(stateOf(t, key, s)) // it holds what it held
	}
	delete(t.streams, key)
	t.mu.Unlock()
	t.changed()
}

// sentOn returns the stream of key among streams and the type URL a response of typeURL
// was sent for (a stream's own type when typeURL is empty: a single-type stream); nil for a
// closed stream. The Tracker's mu is held.
func sentOn(streams map[streamKey]*stream, key streamKey, typeURL string) (*stream, string) {
	s := streams[key]
	if s != nil && typeURL == "" {
		typeURL = s.typeURL
	}
	return s, typeURL
}

func (t *Tracker) response(key streamKey, typeURL, nonce, version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, typeURL := sentOn(t.streams, key, typeURL)
	if s == nil {
		return
	}
	if old, ok := s.sent[typeURL]; ok {
		delete(s.version, old)
	}
	s.sent[typeURL] = nonce
	s.version[nonce] = t.steps.forward(s, typeURL, version)
}

// deltaResponse records a delta response: the resources it carries (and removes) are
// unacked by the stream until it ACKs this response or a later one that carries them.
func (t *Tracker) deltaResponse(key streamKey, typeURL, nonce, version string, names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, typeURL := sentOn(t.streams, key, typeURL)
	if s == nil {
		return
	}
	d := &s.deltaState
	if d.outstanding == nil {
		d.outstanding, d.ackedSeq, d.latest = map[string]deltaSent{}, map[string]uint64{}, map[string]map[string]uint64{}
	}
	d.seq++
	d.outstanding[nonce] = deltaSent{typeURL: typeURL, seq: d.seq, version: t.steps.forward(s, typeURL, version), names: names}
	d.order = append(d.order, nonce)
	if len(d.order) > maxOutstanding {
		delete(d.outstanding, d.order[0])
		d.order = slices.Delete(d.order, 0, 1)
	}
	if len(names) == 0 {
		return
	}
	latest := d.latest[typeURL]
	if latest == nil {
		latest = make(map[string]uint64, len(names))
		d.latest[typeURL] = latest
	}
	var unacked map[string]Unanswered
	isNew := s.unfresh(typeURL, names)
	for _, n := range names {
		latest[n] = d.seq
		r, ok := d.unacked[typeURL][n]
		held := r.Held // a rejected resource is held as it was
		if !ok {
			held = s.acked[typeURL] // it held the resource as in its ACKed version
		}
		if isNew(n) {
			held = "" // it held nothing of it
		}
		if ok && r.Nack == nil && r.Held == held {
			continue // already unanswered: what the ClientState says is unchanged
		}
		if unacked == nil {
			unacked = d.writable(typeURL, len(names))
		}
		if ok {
			d.countHeld(typeURL, r.Held, -1)
		}
		d.countHeld(typeURL, held, 1)
		unacked[n] = Unanswered{Held: held}
	}
	if unacked != nil {
		t.clients = nil
	}
}

// writable returns the stream's unacked map of typeURL for a change: the outer map is
// replaced, the inner one cloned when Clients handed it out. Called with t.mu held.
func (d *deltaState) writable(typeURL string, hint int) map[string]Unanswered {
	outer := make(map[string]map[string]Unanswered, len(d.unacked)+1)
	maps.Copy(outer, d.unacked)
	inner := outer[typeURL]
	switch {
	case inner == nil:
		inner = make(map[string]Unanswered, hint)
	case d.shared[typeURL]:
		inner = maps.Clone(inner)
		delete(d.shared, typeURL)
	}
	outer[typeURL] = inner
	d.unacked = outer
	return inner
}

// countHeld adds delta to the unacked resources of typeURL held as in version.
func (d *deltaState) countHeld(typeURL, version string, delta int) {
	if d.helds == nil {
		d.helds = map[string]map[string]int{}
	}
	byVersion := d.helds[typeURL]
	if byVersion == nil {
		byVersion = map[string]int{}
		d.helds[typeURL] = byVersion
	}
	if byVersion[version] += delta; byVersion[version] <= 0 {
		delete(byVersion, version)
	}
}

// heldVersions are, per type URL, the versions the identified streams of flavour f hold
// resources as in, or may come to: the version each ACKed, the one last sent and not
// answered, a delta stream's unanswered responses' versions and the versions its
// unanswered resources are held as in (Unanswered.Held). What a History follows keeps them
// (History.Follow). A function, not a method: the Tracker has its 15.
func heldVersions(t *Tracker, f Flavour) map[string]map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]map[string]bool{}
	add := func(typeURL, version string) {
		if version == "" {
			return
		}
		if out[typeURL] == nil {
			out[typeURL] = map[string]bool{}
		}
		out[typeURL][version] = true
	}
	for _, s := range t.streams {
		if s.node == nil || s.flavour != f {
			continue
		}
		for typ, v := range s.acked {
			add(typ, v)
		}
		for typ, nonce := range s.sent {
			add(typ, s.version[nonce])
		}
		for _, rec := range s.outstanding {
			add(rec.typeURL, rec.version)
		}
		for typ, byVersion := range s.helds {
			for v := range byVersion {
				add(typ, v)
			}
		}
	}
	return out
}

// answer applies a delta stream's ACK or NACK of the response sent with nonce to exactly
// the resources that response carried (those no later response carried again), and
// reports whether it was one. Called with t.mu held.
func (t *Tracker) answer(s *stream, nonce string, rejected bool, message string) (typeURL string, ok bool) {
	d := &s.deltaState
	rec, ok := d.outstanding[nonce]
	if !ok {
		return "", false
	}
	var nack *Nack
	if rejected {
		nack = &Nack{Version: rec.version, Message: message}
	}
	delete(d.outstanding, nonce)
	if i := slices.Index(d.order, nonce); i >= 0 {
		d.order = slices.Delete(d.order, i, i+1)
	}
	typeURL = rec.typeURL
	latest := d.latest[typeURL]
	var unacked map[string]Unanswered
	var stale map[string]struct{}
	for _, n := range rec.names {
		if latest[n] != rec.seq {
			continue // sent again since: the later response's answer counts
		}
		if unacked == nil {
			unacked = d.writable(typeURL, 0)
		}
		if nack != nil {
			unacked[n] = Unanswered{Held: unacked[n].Held, Nack: nack}
			continue
		}
		delete(latest, n)
		d.countHeld(typeURL, unacked[n].Held, -1)
		delete(unacked, n)
		if _, ok := d.stale[typeURL][n]; ok {
			if stale == nil {
				stale = maps.Clone(d.stale[typeURL])
			}
			delete(stale, n)
		}
	}
	if stale != nil {
		outer := maps.Clone(d.stale)
		if len(stale) == 0 {
			delete(outer, typeURL)
		} else {
			outer[typeURL] = stale
		}
		d.stale = outer
	}
	if nack != nil {
		nacked := maps.Clone(s.nacked)
		nacked[typeURL] = *nack
		s.nacked = nacked
		return typeURL, true
	}
	s.settled(typeURL, nonce, rec.seq)
	if rec.seq > d.ackedSeq[typeURL] {
		d.ackedSeq[typeURL] = rec.seq
		s.ack(typeURL, t.steps.forward(s, typeURL, rec.version))
	} else {
		s.clearNack(typeURL)
	}
	return typeURL, true
}

// subscribeSotW records a state-of-the-world request's resource names: they replace the
// subscription of the type. A first request without names is a wildcard for every type, as
// the server is configured (go-control-plane's default answers it with every resource of
// the type; Envoy sends it for listeners and clusters), until the stream names resources.
func (s *stream) subscribeSotW(typeURL string, names []string) {
	if len(names) == 0 && !s.named[typeURL] {
		if _, seen := s.subs[typeURL]; !seen || s.subs[typeURL].Wildcard {
			s.setSub(typeURL, Subscription{Wildcard: true})
			return
		}
	}
	s.named[typeURL] = true
	sub := Subscription{Names: make(map[string]struct{}, len(names))}
	for _, n := range names {
		if n == "*" {
			sub.Wildcard = true
			continue
		}
		sub.Names[n] = struct{}{}
	}
	s.setSub(typeURL, sub)
}

// deltaNext is a delta request's subscription of one type: what it makes of the stream's
// subscription sub (seen: the stream has one) and named flag. set: the request sets next
// (false: it changes nothing); named: it makes the stream name resources of the type
// (subscribeDelta refuses a next beyond --xds-max-names). Pure: it reads only its
// arguments, so it may run outside the Tracker's lock (see prepareDelta).
type deltaNext struct {
	next       Subscription
	set, named bool
}

func nextDelta(old Subscription, seen, named bool, subscribe, unsubscribe []string) deltaNext {
	switch {
	case len(subscribe) == 0 && !named:
		if !seen {
			old = Subscription{Wildcard: true}
		}
		if len(unsubscribe) == 0 {
			return deltaNext{next: old, set: true}
		}
	case !named:
		named = true
		old.Wildcard = false // the legacy wildcard ends when the stream names resources
	case seen && !deltaChanges(old, subscribe, unsubscribe):
		return deltaNext{}
	}
	sub := Subscription{Wildcard: old.Wildcard, Names: maps.Clone(old.Names)}
	if sub.Names == nil {
		sub.Names = map[string]struct{}{}
	}
	for _, n := range subscribe {
		if n == "*" {
			sub.Wildcard = true
			continue
		}
		sub.Names[n] = struct{}{}
	}
	for _, n := range unsubscribe {
		if n == "*" {
			sub.Wildcard = false
			continue
		}
		delete(sub.Names, n)
	}
	return deltaNext{next: sub, set: true, named: named}
}

// preparedDelta is a delta request's subscription computed outside the Tracker's lock from
// the stream's subscription at generation gen (see prepareDelta).
type preparedDelta struct {
	ok      bool
	typeURL string
	gen     uint64
	deltaNext
}

// prepareDelta computes a delta request's subscription outside the Tracker's lock, so that
// copying a large subscription does not hold up every other stream: the lock is taken only
// to find the stream. The stream's subscriptions (subs, named, subGen) are written only by
// its own goroutine, the one that runs its request callbacks and so this, under the lock:
// reading them here without it is safe, and they are what subscribeDelta will see unless
// subGen moved.
func prepareDelta(t *Tracker, key streamKey, req *discoveryv3.DeltaDiscoveryRequest) preparedDelta {
	t.mu.Lock()
	s := t.streams[key]
	t.mu.Unlock()
	if s == nil {
		return preparedDelta{}
	}
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		typeURL = s.typeURL
	}
	old, seen := s.subs[typeURL]
	next := nextDelta(old, seen, s.named[typeURL], req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	return preparedDelta{ok: true, typeURL: typeURL, gen: s.subGen, deltaNext: next}
}

// subscribeDelta applies a delta request's subscribe and unsubscribe lists (as prepared,
// unless the subscription changed since), or refuses a subscription of more than maxNames
// names (changing nothing). A request that changes nothing (an ACK, a repeated name)
// copies nothing: its cost is its own lists'. Called with the Tracker's mu held.
func (s *stream) subscribeDelta(typeURL string, subscribe, unsubscribe []string, maxNames int, pre preparedDelta) *refusal {
	next := pre.deltaNext
	if !pre.ok || pre.typeURL != typeURL || pre.gen != s.subGen {
		old, seen := s.subs[typeURL]
		next = nextDelta(old, seen, s.named[typeURL], subscribe, unsubscribe)
	}
	if next.set && len(next.next.Names) > maxNames {
		return subscriptionTooLarge(typeURL, len(next.next.Names), maxNames)
	}
	if next.named {
		s.named[typeURL] = true
	}
	if next.set {
		s.setSub(typeURL, next.next)
	}
	return nil
}

// deltaChanges reports whether subscribing to subscribe and unsubscribing from unsubscribe
// may change sub (false: it surely does not), in the time of the two lists.
func deltaChanges(sub Subscription, subscribe, unsubscribe []string) bool {
	for _, n := range subscribe {
		if _, ok := sub.Names[n]; !ok && (n != "*" || !sub.Wildcard) {
			return true
		}
	}
	for _, n := range unsubscribe {
		if _, ok := sub.Names[n]; ok || (n == "*" && sub.Wildcard) {
			return true
		}
	}
	return false
}

// resubscribe applies a request's subscription of typeURL (subscribe) sent with nonce:
// subscribed reports a change of what the stream subscribes to, judged one of what it is
// judged to hold (its ACKed version, its stale names). go-control-plane's
// state-of-the-world server ignores a request whose nonce is not the one it last sent of
// the type (the client had not seen that response yet): its names change nothing it
// sends, so they change nothing the stream is judged by either; the client repeats them
// with its answer to the response.
//
// A refused subscription (see Limits) changes nothing of it, and ends the stream. A request
// that sets no subscription (a delta ACK) costs nothing per name subscribed.
func (s *stream) resubscribe(typeURL, nonce string, subscribe func(*stream, string) *refusal, candidates []string) (subscribed, judged bool, refused *refusal) {
	if !s.delta && s.sent[typeURL] != "" && nonce != s.sent[typeURL] {
		return false, false, nil
	}
	before, had := s.subs[typeURL]
	beforeAcked, beforeStale, gen := s.acked[typeURL], len(s.stale[typeURL]), s.subGen
	if refused := subscribe(s, typeURL); refused != nil {
		return false, false, refused
	}
	after := s.subs[typeURL]
	subscribed = !had || (s.subGen != gen && (before.Wildcard != after.Wildcard || len(before.Names) != len(after.Names) ||
		!maps.Equal(before.Names, after.Names)))
	if had && subscribed {
		s.subscribed(typeURL, before, after, candidates)
	}
	return subscribed, beforeAcked != s.acked[typeURL] || beforeStale != len(s.stale[typeURL]), nil
}

// freshMark is when a stream last subscribed to new resources of a type: the nonce last
// sent then (state of the world), the number of delta responses sent then, and whether it
// switched to a wildcard.
type freshMark struct {
	nonce    string
	seq      uint64
	wildcard bool
}

// subscribed records a change of an existing subscription of typeURL from before to after:
// the names it adds (not covered by a wildcard before) are fresh, held as in no version
// (ClientState.Fresh); names it drops are fresh no longer. A switch to a wildcard makes the
// resources a delta stream is sent until it ACKs a later response held as in no version
// (they may be new to it); judging the ones it is not sent by its ACKed version, as
// before the switch, is left as is. Only an addition or a switch moves the mark: a change
// that only drops names leaves the names still fresh waiting for the response they waited
// for (a request that drops names and ACKs the response carrying the added ones settles
// them; moving the mark to that response would wait for one that never comes).
//
// candidates, when not nil, are the only names the change may have added (a delta
// request's subscribe list): then only they are looked at, not every name of after.
func (s *stream) subscribed(typeURL string, before, after Subscription, candidates []string) {
	fresh := map[string]struct{}{}
	for n := range s.fresh[typeURL] {
		if _, ok := after.Names[n]; ok && !after.Wildcard {
			fresh[n] = struct{}{}
		}
	}
	added := false
	if !before.Wildcard && !after.Wildcard {
		isNew := func(n string) {
			_, was := before.Names[n]
			if _, is := after.Names[n]; is && !was {
				fresh[n], added = struct{}{}, true
			}
		}
		if candidates != nil {
			for _, n := range candidates {
				isNew(n)
			}
		} else {
			for n := range after.Names {
				isNew(n)
			}
		}
	}
	s.setFresh(typeURL, fresh)
	mark, marked := s.freshAt[typeURL]
	switched := after.Wildcard && !before.Wildcard
	wildcard := after.Wildcard && (switched || mark.wildcard)
	if len(fresh) == 0 && !wildcard {
		delete(s.freshAt, typeURL)
		return
	}
	if s.freshAt == nil {
		s.freshAt = map[string]freshMark{}
	}
	if marked && !added && !switched {
		mark.wildcard = wildcard
		s.freshAt[typeURL] = mark
		return
	}
	s.freshAt[typeURL] = freshMark{nonce: s.sent[typeURL], seq: s.deltaState.seq, wildcard: wildcard}
}

// setFresh replaces the fresh names of typeURL (none when empty).
func (s *stream) setFresh(typeURL string, names map[string]struct{}) {
	if len(names) == 0 && len(s.fresh[typeURL]) == 0 {
		return
	}
	fresh := maps.Clone(s.fresh)
	if fresh == nil {
		fresh = map[string]map[string]struct{}{}
	}
	if len(names) == 0 {
		delete(fresh, typeURL)
	} else {
		fresh[typeURL] = names
	}
	s.fresh = fresh
}

// unfresh is called when a delta stream is sent names of typeURL in response seq: it
// reports whether each is new to the stream (fresh, or sent after a switch to a wildcard
// the stream has not ACKed a response since), and keeps fresh only the names not sent.
func (s *stream) unfresh(typeURL string, names []string) func(string) bool {
	m, ok := s.freshAt[typeURL]
	if !ok {
		return func(string) bool { return false }
	}
	was := s.fresh[typeURL]
	rest := maps.Clone(was)
	for _, n := range names {
		delete(rest, n)
	}
	s.setFresh(typeURL, rest)
	if len(rest) == 0 && !m.wildcard {
		delete(s.freshAt, typeURL)
	}
	return func(n string) bool {
		_, fresh := was[n]
		return fresh || m.wildcard
	}
}

// settled is called when a stream ACKs a response of typeURL: a state-of-the-world one sent
// after the last new subscription (not the nonce last sent then) carried every name the
// stream subscribes to, so none is fresh any more; a delta one (seq) after a switch to a
// wildcard ends the switch.
func (s *stream) settled(typeURL, nonce string, seq uint64) {
	m, ok := s.freshAt[typeURL]
	switch {
	case !ok:
	case !s.delta && m.nonce != nonce:
		s.setFresh(typeURL, nil)
		delete(s.freshAt, typeURL)
	case s.delta && m.wildcard && seq > m.seq:
		if len(s.fresh[typeURL]) == 0 {
			delete(s.freshAt, typeURL)
		} else {
			m.wildcard = false
			s.freshAt[typeURL] = m
		}
	}
}

func (s *stream) setSub(typeURL string, sub Subscription) {
	subs := maps.Clone(s.subs)
	subs[typeURL] = sub
	s.subs = subs
	s.subGen++
}

// servingCache is the cache serving s's flavour typeURL as served tells, nil when served
// is nil, s has not identified itself yet, or no cache is known.
func servingCache(served func(*corev3.Node, string) *typeCache, s *stream, typeURL string) *typeCache {
	if served == nil || s.node == nil {
		return nil
	}
	return served(s.node, typeURL)
}

// declare handles a delta stream's initial_resource_versions for typeURL, served by c (nil:
// no cache known, nothing is judged): when every resource of typeURL that the stream
// subscribes to and the flavour's snapshot holds is declared at its current version, the
// server sends nothing and the stream holds the current version, as if it had ACKed it. A
// stream that declares versions before its flavour is first served (the publisher builds a
// flavour for its first client) is judged when the type is first served (see
// Tracker.advance). Called with the Tracker's mu held, after the subscription was recorded.
func (s *stream) declare(c *typeCache, typeURL string, versions map[string]string) {
	if c == nil {
		return
	}
	sub := s.subs[typeURL]
	version, served, current, stale := c.declared(sub.Wildcard, sub.Names, versions)
	if !served {
		if s.unserved == nil {
			s.unserved = map[string]map[string]string{}
		}
		s.unserved[typeURL] = versions
		return
	}
	if current {
		s.ack(typeURL, version)
		return
	}
	if len(stale) > 0 {
		outer := maps.Clone(s.stale)
		if outer == nil {
			outer = map[string]map[string]struct{}{}
		}
		outer[typeURL] = stale
		s.stale = outer
	}
}

// ack records an ACK of version for typeURL, which clears its NACK (a delta stream's
// only once no resource of the type stays rejected).
func (s *stream) ack(typeURL, version string) {
	acked := maps.Clone(s.acked)
	acked[typeURL] = version
	s.acked = acked
	s.clearNack(typeURL)
}

// clearNack clears the type's last NACK, unless the stream is a delta one with a
// resource of the type still rejected.
func (s *stream) clearNack(typeURL string) {
	if _, ok := s.nacked[typeURL]; !ok {
		return
	}
	for _, r := range s.deltaState.unacked[typeURL] {
		if r.Nack != nil {
			return
		}
	}
	nacked := maps.Clone(s.nacked)
	delete(nacked, typeURL)
	s.nacked = nacked
}

// advance moves the streams of flavour subscribed to typeURL by name, none of them in
// touched, from version from to version to: the update between them changed only touched
// names, so such a stream holds the same resources in both and is sent nothing. Its
// outstanding response at from, if any, is recorded as one at to, so its ACK counts for to.
//
// A response or ACK recorded later at from (the update's responses race with it) is moved
// the same way when it is recorded (forward).
//
// The first update of a type (from "") judges the versions its streams declared before it.
func (t *Tracker) advance(flavour Flavour, typeURL, from, to string, touched map[string]struct{}) {
	if from == "" {
		t.firstServed(flavour, typeURL)
		return
	}
	if from == to {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.steps.record(stepKey{flavour, typeURL}, step{from: from, to: to, touched: touched})
	for _, s := range t.streams {
		if s.node == nil || s.flavour != flavour || (s.typeURL != "" && s.typeURL != typeURL) {
			continue
		}
		sub, ok := s.subs[typeURL]
		if !ok || sub.Wildcard || sub.includesAnyOf(touched) {
			continue
		}
		if s.acked[typeURL] == from {
			s.ack(typeURL, to)
			t.clients = nil
		}
		if nonce, ok := s.sent[typeURL]; ok && s.version[nonce] == from {
			s.version[nonce] = to
		}
		for nonce, rec := range s.outstanding {
			if rec.typeURL == typeURL && rec.version == from {
				rec.version = to
				s.outstanding[nonce] = rec
			}
		}
	}
}

// firstServed judges the initial_resource_versions that streams of flavour declared for
// typeURL before it was served, now that it is (see stream.declare).
func (t *Tracker) firstServed(flavour Flavour, typeURL string) {
	t.mu.Lock()
	changed := false
	for _, s := range t.streams {
		versions, ok := s.unserved[typeURL]
		if !ok || s.flavour != flavour {
			continue
		}
		delete(s.unserved, typeURL)
		before, staleBefore := s.acked[typeURL], len(s.stale[typeURL])
		s.declare(servingCache(t.served, s, typeURL), typeURL, versions)
		if s.acked[typeURL] != before || len(s.stale[typeURL]) != staleBefore {
			t.clients = nil
			changed = true
		}
	}
	t.mu.Unlock()
	if changed {
		t.changed()
	}
}

// maxSteps bounds the updates the tracker remembers per flavour and type for forward.
const maxSteps = 256

// stepKey names one flavour's resource type.
type stepKey struct {
	flavour Flavour
	typeURL string
}

// step is one update of a type: from one version to the next, changing the touched names.
type step struct {
	from, to string
	touched  map[string]struct{}
}

// stepLog is the last updates per flavour and type, oldest first, at most maxSteps each.
// Guarded by the Tracker's mu.
type stepLog struct {
	byType map[stepKey][]step
}

// record appends st to the updates of k, dropping the oldest beyond maxSteps.
func (l *stepLog) record(k stepKey, st step) {
	if l.byType == nil {
		l.byType = map[stepKey][]step{}
	}
	l.byType[k] = append(l.byType[k], st)
	if len(l.byType[k]) > maxSteps {
		l.byType[k] = slices.Delete(l.byType[k], 0, len(l.byType[k])-maxSteps)
	}
}

// forward is the version a stream holds when it holds version of typeURL: the latest
// version reached from it by updates that changed none of the names the stream subscribes
// to by name (a wildcard stream gets every update, so it holds what it was sent).
func (l *stepLog) forward(s *stream, typeURL, version string) string {
	sub, ok := s.subs[typeURL]
	if !ok || sub.Wildcard || version == "" {
		return version
	}
	versions := l.chain(stepKey{s.flavour, typeURL}, version, sub.includesAnyOf)
	return versions[len(versions)-1]
}

// chain is version and the versions of k it was followed by, in order, through the
// updates none of whose touched names touches reports true for: they changed nothing
// touches looks at. It ends at the first update that did, or at one not remembered.
func (l *stepLog) chain(k stepKey, version string, touches func(map[string]struct{}) bool) []string {
	out := []string{version}
	steps := l.byType[k]
	start := -1 // the first step after the latest one at version
	for i := len(steps) - 1; i >= 0 && start < 0; i-- {
		switch version {
		case steps[i].to:
			start = i + 1
		case steps[i].from:
			start = i
		}
	}
	if start < 0 {
		return out
	}
	for _, st := range steps[start:] {
		if st.from != version || touches(st.touched) {
			break
		}
		version = st.to
		out = append(out, version)
	}
	return out
}

// includesAnyOf reports whether the subscription includes any of names.
func (s Subscription) includesAnyOf(names map[string]struct{}) bool {
	if s.Wildcard {
		return len(names) > 0
	}
	small, large := s.Names, names
	if len(small) > len(large) {
		small, large = large, small
	}
	for n := range small {
		if _, ok := large[n]; ok {
			return true
		}
	}
	return false
}

// trackedRequest is one request as the tracker reads it; subscribe applies its
// subscription of a type to the stream (with the Tracker's mu held), or refuses it.
type trackedRequest struct {
	key                              streamKey
	node                             *corev3.Node
	typeURL, nonce, version, message string
	nack                             bool
	subscribe                        func(s *stream, typeURL string) *refusal
	// added, when not nil, are the only names the request may add to the subscription
	// (a delta request's subscribe list; nil: any, a state-of-the-world request's).
	added []string
}

// request records a request of a stream (see Tracker), or refuses it (see checkStreamType,
// Limits) before anything of it is recorded.
func (t *Tracker) request(r trackedRequest) *refusal {
	typeURL, changed, answered, refused := record(t, r)
	if refused != nil {
		return refused
	}
	if answered && t.observe != nil {
		t.observe(typeURL, r.nack)
	}
	if changed {
		t.changed()
	}
	return nil
}

// identify records the node a stream identified itself as, and reports whether it is the
// first stream of its flavour. Called with the Tracker's mu held.
func identify(t *Tracker, s *stream, node *corev3.Node) (first bool) {
	s.node, s.flavour, s.identified = node, FlavourOf(node), t.departed.clock()
	t.departed.returned(ClientState{NodeID: node.GetId(), Access: s.access}) // it counts as any client again
	t.members++
	t.demand[s.flavour]++
	t.clients = nil
	if t.flavours[s.flavour] {
		return false
	}
	if t.flavours == nil {
		t.flavours = map[Flavour]bool{}
	}
	t.flavours[s.flavour] = true
	return true
}

// record applies r to its stream under the Tracker's mu (released however it returns):
// typeURL is the type it answered, changed and answered whether it changed what Clients
// says and answered a response.
func record(t *Tracker, r trackedRequest) (typeURL string, changed, answered bool, refused *refusal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.streams[r.key]
	if s == nil {
		return "", false, false, nil
	}
	if refused := checkStreamType(r.typeURL, s.typeURL); refused != nil {
		return "", false, false, refused
	}
	typeURL, nonce, version, nack := r.typeURL, r.nonce, r.version, r.nack
	if s.node == nil && r.node != nil {
		changed = identify(t, s, r.node)
	}
	if typeURL == "" {
		typeURL = s.typeURL
	}
	if r.subscribe != nil && typeURL != "" {
		subscribed, judged, refused := s.resubscribe(typeURL, nonce, r.subscribe, r.added)
		if refused != nil {
			return "", false, false, refused // the stream ends: nothing of it counts
		}
		if subscribed && s.node != nil {
			t.demand[s.flavour]++
		}
		changed = changed || subscribed || judged
	}
	message := boundMessage(r.message)
	switch {
	case nonce == "" && version != "" && !nack:
		// A stream's first request carries the version the client last accepted (for
		// example from a publisher process before a restart): it holds that version.
		s.ack(typeURL, version)
		changed, answered = true, true
	case s.delta && nonce != "":
		// Every delta response is answered on its own, and its answer counts for the
		// resources it carried, whichever response was sent last.
		if typ, ok := t.answer(s, nonce, nack, message); ok {
			typeURL = typ
			changed, answered = true, true
		}
	case nonce != "" && s.sent[typeURL] == nonce:
		// Only an answer to the latest nonce sent counts; the server drops stale ones.
		sentVersion := s.version[nonce]
		if nack {
			nacked := maps.Clone(s.nacked)
			nacked[typeURL] = Nack{Version: sentVersion, Message: message}
			s.nacked = nacked
		} else {
			if version == "" { // delta requests carry no version: the ACK is of what was sent
				version = sentVersion
			}
			s.ack(typeURL, t.steps.forward(s, typeURL, version))
			s.settled(typeURL, nonce, 0)
		}
		changed, answered = true, true
	}
	if changed {
		t.clients = nil
	}
	return typeURL, changed, answered, nil
}

func (t *Tracker) changed() {
	if t.onChange != nil {
		t.onChange()
	}
}

// Demand changes whenever what the identified streams of flavour f subscribe to may have
// changed: a stream of f identified itself, changed a subscription or closed. While it
// stays the same, so does Demanded(f, Clients()), so a caller can skip computing it on a
// mere ACK. The change is counted before the OnClientChange call that follows it.
func (t *Tracker) Demand(f Flavour) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.demand[f]
}

// Consumed reports whether a client of flavour f has identified itself since the tracker
// started. Until one has, nothing of that flavour needs to be built (Server.SetResources
// for it can wait); the call that makes it true is followed by the OnClientChange call.
func (t *Tracker) Consumed(f Flavour) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flavours[f]
}

// Membership changes whenever a client may have joined or left (a stream made itself known
// or closed): while it stays the same, the set of Clients' node IDs does too, so a caller
// can skip building Clients on a mere ACK.
func (t *Tracker) Membership() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.members
}

// Rejected returns the version of req's type last sent on the state-of-the-world stream
// that made req (the request its goroutine handles now), and whether there is one: a
// NACK in req rejects that version. Streams are told apart, never merged by node id:
// many clients may send one node id, and another stream's version says nothing of what
// this one was sent.
func (t *Tracker) Rejected(req *discoveryv3.DiscoveryRequest) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, s := range t.streams {
		if k.delta || s.req != req {
			continue
		}
		typeURL := req.GetTypeUrl()
		if typeURL == "" {
			typeURL = s.typeURL
		}
		if nonce, ok := s.sent[typeURL]; ok {
			return s.version[nonce], true
		}
		return "", false
	}
	return "", false
}

// Clients returns the state of every connected stream whose client has identified
// itself, sorted by node id, then by stream kind and id. The slice is shared by every
// call until a stream changes: read it, never modify it.
func (t *Tracker) Clients() []ClientState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.clients != nil {
		return t.clients
	}
	keys := make([]streamKey, 0, len(t.streams))
	for k, s := range t.streams {
		if s.node != nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b streamKey) int {
		if c := cmp.Compare(t.streams[a].node.GetId(), t.streams[b].node.GetId()); c != 0 {
			return c
		}
		if a.delta != b.delta {
			if a.delta {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]ClientState, 0, len(keys))
	for _, k := range keys {
		s := t.streams[k]
		cs := stateOf(t, k, s)
		if k.delta {
			for typ := range s.unacked {
				if s.shared == nil {
					s.shared = map[string]bool{}
				}
				s.shared[typ] = true
			}
		}
		out = append(out, cs)
	}
	t.clients = out
	return out
}

// stateOf is the ClientState of the identified stream s of key; a delta stream's Unacked
// maps are shared with the stream from then on (the caller marks them). Called with the
// Tracker's mu held.
// arrivals returns the tags (replicas.ClientTag) of the clients whose stream connected to
// t identified itself within the departed grace, sorted: at most replicas.MaxArrived, the
// newest. Another replica that remembers such a client as departed holds nothing for it
// any more, since this replica counts it now (replicas.Report.Arrived). Nil without a
// departed grace.
func arrivals(t *Tracker) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.departed == nil || t.departed.grace <= 0 {
		return nil
	}
	now := t.departed.clock()
	type arrival struct {
		tag string
		at  time.Time
	}
	var all []arrival
	for _, s := range t.streams {
		if s.node != nil && now.Sub(s.identified) < t.departed.grace {
			all = append(all, arrival{replicas.ClientTag(s.access.Identity, s.node.GetId()), s.identified})
		}
	}
	slices.SortFunc(all, func(a, b arrival) int { // newest first, then by tag
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(a.tag, b.tag)
	})
	tags := make([]string, 0, min(len(all), replicas.MaxArrived))
	for _, a := range all[:min(len(all), replicas.MaxArrived)] {
		tags = append(tags, a.tag)
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}

func stateOf(t *Tracker, k streamKey, s *stream) ClientState {
	cs := ClientState{NodeID: s.node.GetId(), Flavour: s.flavour, Stream: k.String(), Peer: s.peer, Access: s.access,
		TypeURL: s.typeURL, Acked: s.acked, Nacked: s.nacked, Subscribed: s.subs, Fresh: s.fresh, tracker: t}
	if k.delta {
		cs.Unacked, cs.Stale = s.unacked, s.stale
		if cs.Unacked == nil {
			cs.Unacked = map[string]map[string]Unanswered{}
		}
	}
	return cs
}
