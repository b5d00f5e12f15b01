package xds

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
)

// clientWatch turns the server's client changes (every ACK, NACK, connect and disconnect)
// into rebuilds and news: the first client of a flavour builds it, a change of what the
// gRPC streams subscribe to rebuilds (the gRPC flavour carries the maps demanded), maps
// waiting for ACKs are reconciled again, and every map given when the set of clients
// changed. The server's callback only signals (signal); one goroutine (run) looks at the
// clients, once for however many changes arrived since its last look: the look is
// level-triggered (it reads the clients and the waiting maps as they are then), and judging
// every waiting map against every client on each of a burst of ACKs (100 wildcard streams
// at a cold start) cost the publisher more than a core. Its fields are guarded by its lock.
type clientWatch struct {
	s *Sink
	// kicks holds one pending signal.
	kicks chan struct{}

	mu      sync.Mutex
	members uint64 // the Tracker's Membership when the client set was last compared
	clients string // the client set then
	demand  uint64 // the Tracker's Demand of the gRPC flavour at the last kick
}

func newClientWatch(s *Sink) *clientWatch {
	return &clientWatch{s: s, kicks: make(chan struct{}, 1)}
}

// signal is the server's OnClientChange: it asks run for a look and never blocks the
// stream that called it.
func (w *clientWatch) signal() {
	select {
	case w.kicks <- struct{}{}:
	default: // a look is pending already; it will see this change too
	}
}

// run looks at the clients after each signal until ctx is done.
func (w *clientWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kicks:
			w.changed()
		}
	}
}

// changed looks at the clients once.
func (w *clientWatch) changed() {
	s := w.s
	tracker := s.server.Tracker()
	members, demand := tracker.Membership(), tracker.Demand(FlavourGRPC)
	w.mu.Lock()
	known := members == w.members
	moved := demand != w.demand
	w.demand = demand
	w.mu.Unlock()
	if moved { // an ACK alone never moves it: the rebuild reads the subscriptions again
		s.loop.kick()
	}
	if !known { // a client may have joined or left: compare the sets
		for _, f := range flavours {
			s.mu.Lock()
			built := s.built[f]
			s.mu.Unlock()
			if !built && tracker.Consumed(f) {
				s.loop.kick() // the first client of f: build f for it
			}
		}
		var ids []string
		for _, c := range tracker.Clients() {
			ids = append(ids, c.ID())
		}
		set := strings.Join(ids, "\x00")
		w.mu.Lock()
		changed := set != w.clients
		w.clients, w.members = set, members
		w.mu.Unlock()
		if changed {
			s.news.add(s.wants.keys()...)
			s.news.add(w.retired()...)
			return
		}
	}
	s.news.add(w.decided(tracker.Clients(), w.waiting())...)
	s.news.add(w.retired()...) // an ACK may confirm a removal
}

// waiting are the maps waiting for their clients' ACKs (Apply marked them pending).
func (w *clientWatch) waiting() []string {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	keys := make([]string, 0, len(w.s.pending))
	for key := range w.s.pending {
		keys = append(keys, key)
	}
	return keys
}

// retired are the maps the sink's Retire withdrew and Delete has not forgotten, sorted.
func (w *clientWatch) retired() []string {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return slices.Sorted(maps.Keys(w.s.retired))
}

// decided are the waiting maps an ACK or NACK may have decided: every relevant client has
// ACKed the map's given content, or one NACKed it, or the sink cannot tell on its own (no
// content given, or the other replicas' reports count too). An ACK after which the map
// still waits for other clients changes nothing the pipeline decides, so it reconciles
// nothing (the pipeline's own hold refreshes a waiting map's counts); the map's last ACK
// does. A rebuild tells the maps it served (their history is recorded first), so an ACK
// judged before its version was recorded is judged again then.
func (w *clientWatch) decided(clients []ClientState, waiting []string) []string {
	s := w.s
	if s.cfg.Peers != nil {
		return waiting
	}
	out := waiting[:0]
	for _, key := range waiting {
		svc, ok := s.wants.get(key)
		if !ok {
			out = append(out, key)
			continue
		}
		if c := Confirm(clients, s.history, key, ServedBy(s.envoy, svc), s.cfg.MinClients); c.Done || c.Nack != nil {
			out = append(out, key)
		}
	}
	return out
}

// worthTelling are the maps among keys, whose served content a rebuild just changed, that
// the pipeline must reconcile now: a map still waiting for its clients (pending, valid, and
// served as it was given) is left to the ACK that decides it (decided), since a reconcile
// before that would find it waiting again; every other map is told at once.
func (w *clientWatch) worthTelling(keys []string) []string {
	s := w.s
	if s.cfg.Peers != nil || len(keys) == 0 {
		return keys
	}
	type candidate struct{ key, digest string }
	var out []string
	var waiting []candidate
	s.mu.Lock()
	for _, key := range keys {
		svc, served := s.served[key]
		if s.pending[key] && served && s.invalid[key] == nil {
			waiting = append(waiting, candidate{key, svc.Digest()})
		} else {
			out = append(out, key)
		}
	}
	s.mu.Unlock()
	var undecided []string
	for _, c := range waiting {
		if want, ok := s.wants.get(c.key); ok && want.Digest() == c.digest {
			undecided = append(undecided, c.key)
		} else {
			out = append(out, c.key)
		}
	}
	return append(out, w.decided(s.server.Tracker().Clients(), undecided)...)
}
