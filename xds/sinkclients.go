package xds

import (
	"strings"
	"sync"
)

// clientWatch turns the server's client changes (every ACK, NACK, connect and disconnect)
// into rebuilds and news: the first client of a flavour builds it, maps waiting for ACKs are
// reconciled again, and every map given when the set of clients changed. Its fields are
// guarded by its lock.
type clientWatch struct {
	s *Sink

	mu      sync.Mutex
	members uint64 // the Tracker's Membership when the client set was last compared
	clients string // the client set then
}

// changed is the server's OnClientChange.
func (w *clientWatch) changed() {
	s := w.s
	tracker := s.server.Tracker()
	members := tracker.Membership()
	w.mu.Lock()
	known := members == w.members
	w.mu.Unlock()
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
			return
		}
	}
	s.mu.Lock()
	waiting := make([]string, 0, len(s.pending))
	for key := range s.pending {
		waiting = append(waiting, key)
	}
	s.mu.Unlock()
	s.news.add(waiting...)
}
