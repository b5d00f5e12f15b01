package xds

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/peer"
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
	// Nacked is the last NACK per type URL, cleared by a later ACK of that type. Shared with
	// the tracker: read it, never modify it.
	Nacked map[string]Nack
	// Subscribed is what the stream subscribed to, per type URL; a type absent here has no
	// subscription. The map is shared with the tracker: read it, never modify it.
	Subscribed map[string]Subscription
}

// ID names the client uniquely among the connected ones: its node id and stream.
func (c ClientState) ID() string { return c.NodeID + "/" + c.Stream }

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

// Nack is a client's rejection of one version.
type Nack struct {
	Version string
	Message string
}

// Tracker records, from the xDS server's callbacks, which version each stream ACKed or
// NACKed per type URL and what it subscribed to. ACK and NACK are read from the protocol: a
// request that answers the latest nonce sent on its stream, with error_detail for a NACK;
// a delta stream that opens declaring, in initial_resource_versions, the current version of
// everything it subscribes to has ACKed the current version (the server sends it nothing).
// Safe for concurrent use.
type Tracker struct {
	mu       sync.Mutex
	streams  map[streamKey]*stream
	onChange func()
	observe  func(typeURL string, nack bool) // metrics hook; nil means none
	members  uint64                          // see Membership
	// served returns the cache serving a node's flavour a type; nil means none is known
	// (the delta reconnect rule then never applies).
	served func(node *corev3.Node, typeURL string) *typeCache
	// clients is what Clients returns until a stream changes (nil: build it again).
	clients []ClientState
	// flavours are the flavours a stream has identified itself as since the tracker started.
	flavours map[Flavour]bool
	// steps are the last updates per flavour and type (see advance), oldest first.
	steps map[stepKey][]step
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
	// unserved are the initial_resource_versions a delta stream declared, per type URL,
	// before its flavour's type was first served: judged when it is (see advance).
	unserved map[string]map[string]string
}

// NewTracker returns a Tracker that calls onChange (if not nil) after every ACK, NACK,
// connect and disconnect, outside its lock.
func NewTracker(onChange func()) *Tracker {
	return &Tracker{streams: map[streamKey]*stream{}, onChange: onChange}
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
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			t.request(streamKey{id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetVersionInfo(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil,
				func(s *stream, typeURL string) { s.subscribeSotW(typeURL, req.GetResourceNames()) })
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			t.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
		},
		// The delta request callback runs before the server fills in node and type URL: the
		// tracker remembers the node from the stream's first request and the type from open.
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			t.request(streamKey{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), "", req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil,
				func(s *stream, typeURL string) {
					s.subscribeDelta(typeURL, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
					if len(req.GetInitialResourceVersions()) > 0 && req.GetResponseNonce() == "" {
						t.declared(s, typeURL, req.GetInitialResourceVersions())
					}
				})
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			t.response(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo())
		},
	}
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
	t.streams[key] = &stream{peer: peer, access: access, typeURL: typeURL, sent: map[string]string{}, version: map[string]string{},
		acked: map[string]string{}, nacked: map[string]Nack{}, subs: map[string]Subscription{}, named: map[string]bool{}}
	t.mu.Unlock()
	t.changed()
}

func (t *Tracker) close(key streamKey) {
	t.mu.Lock()
	t.clients = nil
	if s := t.streams[key]; s != nil && s.node != nil {
		t.members++
	}
	delete(t.streams, key)
	t.mu.Unlock()
	t.changed()
}

func (t *Tracker) response(key streamKey, typeURL, nonce, version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.streams[key]
	if s == nil {
		return
	}
	if typeURL == "" {
		typeURL = s.typeURL
	}
	if old, ok := s.sent[typeURL]; ok {
		delete(s.version, old)
	}
	s.sent[typeURL] = nonce
	s.version[nonce] = t.forward(s, typeURL, version)
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

// subscribeDelta applies a delta request's subscribe and unsubscribe lists.
func (s *stream) subscribeDelta(typeURL string, subscribe, unsubscribe []string) {
	old, seen := s.subs[typeURL]
	if len(subscribe) == 0 && !s.named[typeURL] {
		if !seen {
			old = Subscription{Wildcard: true}
		}
		if len(unsubscribe) == 0 {
			s.setSub(typeURL, old)
			return
		}
	} else if !s.named[typeURL] {
		s.named[typeURL] = true
		old.Wildcard = false // the legacy wildcard ends when the stream names resources
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
	s.setSub(typeURL, sub)
}

func (s *stream) setSub(typeURL string, sub Subscription) {
	subs := maps.Clone(s.subs)
	subs[typeURL] = sub
	s.subs = subs
}

// declared handles a delta stream's initial_resource_versions: when every resource of
// typeURL that the stream subscribes to and the flavour's snapshot holds is declared at its
// current version, the server sends nothing and the stream holds the current version, as
// if it had ACKed it. A stream that declares versions before its flavour is first served
// (the publisher builds a flavour for its first client) is judged when the type is first
// served (see advance). Called with t.mu held, after the subscription was recorded.
func (t *Tracker) declared(s *stream, typeURL string, versions map[string]string) {
	if t.served == nil || s.node == nil {
		return
	}
	c := t.served(s.node, typeURL)
	if c == nil {
		return
	}
	if !c.isServed() {
		if s.unserved == nil {
			s.unserved = map[string]map[string]string{}
		}
		s.unserved[typeURL] = versions
		return
	}
	sub := s.subs[typeURL]
	if version, ok := c.declaredCurrent(sub.Wildcard, sub.Names, versions); ok {
		s.ack(typeURL, version)
	}
}

// ack records an ACK of version for typeURL, which clears its NACK.
func (s *stream) ack(typeURL, version string) {
	acked := maps.Clone(s.acked)
	acked[typeURL] = version
	s.acked = acked
	if _, ok := s.nacked[typeURL]; ok {
		nacked := maps.Clone(s.nacked)
		delete(nacked, typeURL)
		s.nacked = nacked
	}
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
	if t.steps == nil {
		t.steps = map[stepKey][]step{}
	}
	k := stepKey{flavour, typeURL}
	t.steps[k] = append(t.steps[k], step{from: from, to: to, touched: touched})
	if len(t.steps[k]) > maxSteps {
		t.steps[k] = slices.Delete(t.steps[k], 0, len(t.steps[k])-maxSteps)
	}
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
	}
}

// firstServed judges the initial_resource_versions that streams of flavour declared for
// typeURL before it was served, now that it is (see declared).
func (t *Tracker) firstServed(flavour Flavour, typeURL string) {
	t.mu.Lock()
	changed := false
	for _, s := range t.streams {
		versions, ok := s.unserved[typeURL]
		if !ok || s.flavour != flavour {
			continue
		}
		delete(s.unserved, typeURL)
		before := s.acked[typeURL]
		t.declared(s, typeURL, versions)
		if s.acked[typeURL] != before {
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

// forward is the version a stream holds when it holds version of typeURL: the latest
// version reached from it by updates that changed none of the names the stream subscribes
// to by name (a wildcard stream gets every update, so it holds what it was sent). Called
// with t.mu held.
func (t *Tracker) forward(s *stream, typeURL, version string) string {
	sub, ok := s.subs[typeURL]
	if !ok || sub.Wildcard || version == "" {
		return version
	}
	steps := t.steps[stepKey{s.flavour, typeURL}]
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
		return version
	}
	for _, st := range steps[start:] {
		if st.from != version || sub.includesAnyOf(st.touched) {
			break
		}
		version = st.to
	}
	return version
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

func (t *Tracker) request(key streamKey, node *corev3.Node, typeURL, nonce, version, message string, nack bool, subscribe func(*stream, string)) {
	t.mu.Lock()
	s := t.streams[key]
	if s == nil {
		t.mu.Unlock()
		return
	}
	changed, answered := false, false
	if s.node == nil && node != nil {
		s.node, s.flavour = node, FlavourOf(node)
		t.members++
		t.clients = nil
		if !t.flavours[s.flavour] {
			if t.flavours == nil {
				t.flavours = map[Flavour]bool{}
			}
			t.flavours[s.flavour] = true
			changed = true
		}
	}
	if typeURL == "" {
		typeURL = s.typeURL
	}
	if subscribe != nil && typeURL != "" {
		before, had := s.subs[typeURL]
		beforeAcked := s.acked[typeURL]
		subscribe(s, typeURL)
		after := s.subs[typeURL]
		changed = changed || !had || before.Wildcard != after.Wildcard || !maps.Equal(before.Names, after.Names) || beforeAcked != s.acked[typeURL]
	}
	switch {
	case nonce == "" && version != "" && !nack:
		// A stream's first request carries the version the client last accepted (for
		// example from a publisher process before a restart): it holds that version.
		s.ack(typeURL, version)
		changed, answered = true, true
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
			s.ack(typeURL, t.forward(s, typeURL, version))
		}
		changed, answered = true, true
	}
	if changed {
		t.clients = nil
	}
	t.mu.Unlock()
	if answered && t.observe != nil {
		t.observe(typeURL, nack)
	}
	if changed {
		t.changed()
	}
}

func (t *Tracker) changed() {
	if t.onChange != nil {
		t.onChange()
	}
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

// LastSent returns the version last sent to node for typeURL on any of its streams, and
// whether there is one.
func (t *Tracker) LastSent(nodeID, typeURL string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.streams {
		if s.node.GetId() != nodeID {
			continue
		}
		if nonce, ok := s.sent[typeURL]; ok {
			return s.version[nonce], true
		}
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
		out = append(out, ClientState{NodeID: s.node.GetId(), Flavour: s.flavour, Stream: k.String(), Peer: s.peer, Access: s.access,
			TypeURL: s.typeURL, Acked: s.acked, Nacked: s.nacked, Subscribed: s.subs})
	}
	t.clients = out
	return out
}
