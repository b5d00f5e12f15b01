package xds

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// clientWatch turns the server's client changes (every ACK, NACK, connect and disconnect)
// into rebuilds and news: the first client of a flavour builds it, a change of what the
// gRPC streams subscribe to rebuilds (the gRPC flavour carries the maps demanded), maps
// waiting for ACKs are reconciled again once decided, and, when clients connect or
// disconnect, the maps those clients are relevant to (see touched), not the fleet. The
// server's callback only signals (signal); one goroutine (run) looks at the
// clients, once for however many changes arrived since its last look: the look is
// level-triggered (it reads the clients and the waiting maps as they are then), and judging
// every waiting map against every client on each of a burst of ACKs (100 wildcard streams
// at a cold start) cost the publisher more than a core. Its fields are guarded by its lock.
type clientWatch struct {
	s *Sink
	// kicks holds one pending signal.
	kicks chan struct{}

	mu      sync.Mutex
	members uint64                 // the Tracker's Membership when the client set was last compared
	clients map[string]ClientState // the client set then, by ID
	demand  uint64                 // the Tracker's Demand of the gRPC flavour at the last kick
	envoy   uint64                 // and of the Envoy flavour (a change refreshes clients)
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
	members, demand, envoy := tracker.Membership(), tracker.Demand(FlavourGRPC), tracker.Demand(FlavourEnvoy)
	w.mu.Lock()
	known := members == w.members
	moved := demand != w.demand
	resubscribed := moved || envoy != w.envoy
	w.demand, w.envoy = demand, envoy
	w.mu.Unlock()
	if moved { // an ACK alone never moves it: the rebuild reads the subscriptions again
		s.loop.kick()
	}
	if !known || resubscribed {
		// A client may have joined or left (compare the sets), or what one subscribes to
		// changed: the set keeps it, so a client that leaves names all it subscribed to.
		w.compare(tracker, members)
	}
	s.news.Add(w.decided(tracker.Clients(), w.waiting())...)
	s.news.Add(w.retired()...) // an ACK may confirm a removal
}

// compare compares the clients connected now (at membership members) with those of the
// last look, and tells the maps of those that joined or left (touched).
func (w *clientWatch) compare(tracker *Tracker, members uint64) {
	s := w.s
	for _, f := range flavours {
		s.mu.Lock()
		built := s.built[f]
		s.mu.Unlock()
		if !built && tracker.Consumed(f) {
			s.loop.kick() // the first client of f: build f for it
		}
	}
	clients := tracker.Clients()
	set := make(map[string]ClientState, len(clients))
	for _, c := range clients {
		set[c.ID()] = c
	}
	w.mu.Lock()
	joined, left := joinedLeft(w.clients, set)
	w.clients, w.members = set, members
	w.mu.Unlock()
	if len(joined)+len(left) > 0 {
		s.news.Add(w.touched(clients, joined, left)...)
	}
}

// joinedLeft are the clients in now and not in before, and those in before and not in now.
func joinedLeft(before, now map[string]ClientState) (joined, left []ClientState) {
	for id, c := range now {
		if _, ok := before[id]; !ok {
			joined = append(joined, c)
		}
	}
	for id, c := range before {
		if _, ok := now[id]; !ok {
			left = append(left, c)
		}
	}
	return joined, left
}

// touched are the given maps whose condition the clients that joined or left (the
// clients connected now: clients) may change: those any of them is relevant to (it
// subscribes to one of their resources, by name or by wildcard, and may see them: a
// wildcard subscriber touches every map of its flavour it may see), and, with
// --xds-min-clients, those a client that left was counted for that now have fewer than
// that many connected (a map below it waits for clients; one waiting already is
// pending, and decided judges it again on every change). A client relevant to none of a
// map's resources changes nothing Confirm says of it but the count of connected clients
// in its message, so such a map is not reconciled again: one client reconnecting in a
// loop reconciles its own maps, not the fleet.
func (w *clientWatch) touched(clients, joined, left []ClientState) []string {
	s := w.s
	changed := slices.Concat(joined, left)
	var out []string
	for _, key := range s.wants.keys() {
		svc, ok := s.wants.get(key)
		if !ok {
			continue
		}
		served := ServedBy(s.envoy, svc)
		if slices.ContainsFunc(changed, func(c ClientState) bool { return relevant(c, key, served) }) ||
			(s.cfg.MinClients > 0 && belowMin(clients, left, key, served, s.cfg.MinClients)) {
			out = append(out, key)
		}
	}
	return out
}

// belowMin reports whether a client of left was counted for the map key served as served
// (Confirm's Connected) and fewer than minClients of clients are now.
func belowMin(clients, left []ClientState, key string, served map[Flavour]Served, minClients int) bool {
	counts := func(c ClientState) bool {
		_, ok := served[c.Flavour]
		return ok && c.MaySee(key)
	}
	if !slices.ContainsFunc(left, counts) {
		return false
	}
	n := 0
	for _, c := range clients {
		if counts(c) {
			n++
		}
	}
	return n < minClients
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
