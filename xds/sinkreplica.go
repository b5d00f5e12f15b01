package xds

import (
	"slices"

	"github.com/trafficmap/publisher/model/replicas"
	"github.com/trafficmap/publisher/model/untrusted"
)

// Replica is the xDS sink's side of the replicas' exchange (package lease): the report the
// leader counts this replica's clients by, and the fence that stops serving when that
// report cannot be renewed.
type Replica struct{ s *Sink }

// Clients returns what each client connected to this replica has ACKed and NACKed.
func (r *Replica) Clients() []ClientState { return r.s.server.Tracker().Clients() }

// Report is this replica's report on the maps keys (those whose Published condition it
// sees not True), sorted by key: per map it serves content for, that content and what its
// relevant client streams did with it. A map it serves nothing for is left out (its plan
// fails here, for example a missing service: nothing of it waits on this replica's
// clients, and the leader holds a map absent from a report while it is not Published).
// It lists the clients that arrived here within the departed grace (arrivals), and
// leaves out of the departed streams' holds those whose client another replica lists so.
// The report is bounded in bytes when encoded (replicas.Encode), not here.
func (r *Replica) Report(keys []string) replicas.Report {
	s := r.s
	clients := s.server.Tracker().Clients()
	rep := replicas.Report{Clients: len(clients), Arrived: arrivals(s.server.Tracker())}
	back := arrivedAtPeers(s)
	keys = slices.Sorted(slices.Values(keys))
	served := make(map[string]Service, len(keys))
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
		by := ServedBy(s.envoy, svc)
		for _, cl := range clients {
			v := Judge(cl, s.history, key, by)
			if !v.Relevant {
				continue
			}
			m.Relevant++
			switch {
			case v.Acked:
				m.Acked++
			case len(m.Waiting) < replicas.MaxWaiting:
				m.Waiting = append(m.Waiting, streamLabel(cl))
			}
			if v.Nack != nil && m.Nack == nil {
				m.Nack = &replicas.Nack{Client: streamLabel(cl), Version: v.Nack.Version, Type: v.Nack.TypeURL,
					Message: untrusted.Quote(v.Nack.Message, untrusted.MaxMessage)}
			}
		}
		reportDeparted(&m, judgeDepartedOf(s, key, by, back))
		rep.Maps = append(rep.Maps, m)
	}
	return rep
}

// Fence stops serving: every xDS connection is closed and new streams are refused with
// reason (Server.Fence), until Unfence. For a replica whose report the leader may no
// longer count (lease.Writer).
func (r *Replica) Fence(reason string) { r.s.server.Fence(reason) }

// Unfence serves again after Fence.
func (r *Replica) Unfence() { r.s.server.Unfence() }

// Fenced reports whether the sink is fenced (Fence without Unfence since).
func (r *Replica) Fenced() bool { return r.s.server.Fenced() }

// PeerArrived tells the sink that another replica's report lists clients as arrived there
// (tags, see replicas.Report.Arrived): when one of them is remembered here as departed
// within its grace, it no longer holds anything, so every map waiting for clients is named
// to the pipeline to be judged again.
func (r *Replica) PeerArrived(tags []string) {
	if r.s.server.tracker.departed.remembers(tags) {
		r.s.news.Add(r.s.watch.waiting()...)
	}
}

// PeerLeft tells the sink that another replica's report stopped counting: every map
// waiting for clients may now be decided (one that replica held without listing it
// too), so all of them are named to the pipeline.
func (r *Replica) PeerLeft() { r.s.news.Add(r.s.watch.waiting()...) }
