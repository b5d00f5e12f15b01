package xds

import (
	"context"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// ClientState is what one connected client (node) has done with each resource type.
type ClientState struct {
	NodeID  string
	Flavour Flavour
	// Acked is the last version the client ACKed, per type URL.
	Acked map[string]string
	// Nacked is the last NACK per type URL, cleared by a later ACK of that type.
	Nacked map[string]Nack
}

// Nack is a client's rejection of one version.
type Nack struct {
	Version string
	Message string
}

// Tracker records, from the xDS server's callbacks, which version each client ACKed or
// NACKed per type URL. ACK and NACK are read from the protocol: a request that answers the
// latest nonce sent on its stream, with error_detail for a NACK. Safe for concurrent use.
type Tracker struct {
	mu       sync.Mutex
	streams  map[streamKey]*stream
	onChange func()
	observe  func(typeURL string, nack bool) // metrics hook; nil means none
	members  uint64                          // see Membership
}

// streamKey names a stream: go-control-plane numbers state-of-the-world and delta streams
// with separate counters, so an id alone is ambiguous in a mixed fleet.
type streamKey struct {
	delta bool
	id    int64
}

type stream struct {
	node    *corev3.Node
	typeURL string            // the stream's type, for non-ADS streams
	sent    map[string]string // type URL -> latest nonce sent
	version map[string]string // nonce -> version sent with it
	acked   map[string]string
	nacked  map[string]Nack
}

// NewTracker returns a Tracker that calls onChange (if not nil) after every ACK, NACK,
// connect and disconnect, outside its lock.
func NewTracker(onChange func()) *Tracker {
	return &Tracker{streams: map[streamKey]*stream{}, onChange: onChange}
}

// Callbacks returns the server callbacks that feed the tracker, for SotW and delta.
func (t *Tracker) Callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			t.open(streamKey{id: id}, typeURL)
			return nil
		},
		DeltaStreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			t.open(streamKey{delta: true, id: id}, typeURL)
			return nil
		},
		StreamClosedFunc:      func(id int64, _ *corev3.Node) { t.close(streamKey{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { t.close(streamKey{delta: true, id: id}) },
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			t.request(streamKey{id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetVersionInfo(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			t.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
		},
		// The delta request callback runs before the server fills in node and type URL: the
		// tracker remembers the node from the stream's first request and the type from open.
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			t.request(streamKey{delta: true, id: id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), "", req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			t.response(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo())
		},
	}
}

func (t *Tracker) open(key streamKey, typeURL string) {
	t.mu.Lock()
	t.streams[key] = &stream{typeURL: typeURL, sent: map[string]string{}, version: map[string]string{},
		acked: map[string]string{}, nacked: map[string]Nack{}}
	t.mu.Unlock()
	t.changed()
}

func (t *Tracker) close(key streamKey) {
	t.mu.Lock()
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
	s.version[nonce] = version
}

func (t *Tracker) request(key streamKey, node *corev3.Node, typeURL, nonce, version, message string, nack bool) {
	t.mu.Lock()
	s := t.streams[key]
	if s == nil {
		t.mu.Unlock()
		return
	}
	if s.node == nil && node != nil {
		s.node = node
		t.members++
	}
	if typeURL == "" {
		typeURL = s.typeURL
	}
	changed := false
	switch {
	case nonce == "" && version != "" && !nack:
		// A stream's first request carries the version the client last accepted (for
		// example from a publisher process before a restart): it holds that version.
		s.acked[typeURL] = version
		changed = true
	case nonce != "" && s.sent[typeURL] == nonce:
		// Only an answer to the latest nonce sent counts; the server drops stale ones.
		sentVersion := s.version[nonce]
		if nack {
			s.nacked[typeURL] = Nack{Version: sentVersion, Message: message}
		} else {
			if version == "" { // delta requests carry no version: the ACK is of what was sent
				version = sentVersion
			}
			s.acked[typeURL] = version
			delete(s.nacked, typeURL)
		}
		changed = true
	}
	t.mu.Unlock()
	if changed && t.observe != nil {
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

// Clients returns the state of every connected client that has identified itself, sorted
// by node id. A node with several streams (per-type xDS) is merged into one entry.
func (t *Tracker) Clients() []ClientState {
	t.mu.Lock()
	defer t.mu.Unlock()
	byNode := map[string]*ClientState{}
	for _, s := range t.streams {
		if s.node == nil {
			continue
		}
		c := byNode[s.node.GetId()]
		if c == nil {
			c = &ClientState{NodeID: s.node.GetId(), Flavour: FlavourOf(s.node), Acked: map[string]string{}, Nacked: map[string]Nack{}}
			byNode[c.NodeID] = c
		}
		for k, v := range s.acked {
			c.Acked[k] = v
		}
		for k, v := range s.nacked {
			c.Nacked[k] = v
		}
	}
	out := make([]ClientState, 0, len(byNode))
	for _, c := range byNode {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b ClientState) int {
		if a.NodeID < b.NodeID {
			return -1
		}
		if a.NodeID > b.NodeID {
			return 1
		}
		return 0
	})
	return out
}
