package xds

import (
	"fmt"
	"strings"
	"time"

	"github.com/trafficmap/publisher/model/replicas"
)

// maxDepartedNamed bounds the departed streams one message names.
const maxDepartedNamed = 3

// departedVerdict is what the departed streams say of one map's current content (see
// Departed): those within their grace that are relevant to it and have not confirmed it
// (judged by Judge on their last state) hold it; those past their grace are only named.
type departedVerdict struct {
	// Holding are the departed streams within their grace that hold older content.
	Holding []Departed
	// Past are those past their grace that left without confirming the content.
	Past []Departed
	// Forgotten is when the hold of the streams forgotten at the cap (MaxDeparted) that
	// may see the map ends; zero when none holds it.
	Forgotten time.Time
	// Grace is --xds-departed-grace.
	Grace time.Duration
}

// judgeDeparted judges the departed streams ds (and the holds over of those forgotten at
// the cap) at now for the service key served as served.
func judgeDeparted(ds []Departed, over []overflowed, now time.Time, grace time.Duration, h *History, key string, served map[Flavour]Served) departedVerdict {
	v := departedVerdict{Grace: grace}
	for _, d := range ds {
		if j := Judge(d.ClientState, h, key, served); !j.Relevant || j.Acked {
			continue
		}
		if now.Before(d.Until) {
			v.Holding = append(v.Holding, d)
		} else {
			v.Past = append(v.Past, d)
		}
	}
	if len(served) == 0 {
		return v
	}
	for _, o := range over {
		if (ClientState{Access: o.access}).MaySee(key) && now.Before(o.until) && o.until.After(v.Forgotten) {
			v.Forgotten = o.until
		}
	}
	return v
}

// Holds reports whether the departed streams hold the map.
func (v departedVerdict) Holds() bool { return len(v.Holding) > 0 || !v.Forgotten.IsZero() }

// Message says what the departed streams do to the map, "" when nothing.
func (v departedVerdict) Message() string {
	var parts []string
	if len(v.Holding) > 0 {
		until := v.Holding[0].Until
		for _, d := range v.Holding {
			if d.Until.After(until) {
				until = d.Until
			}
		}
		parts = append(parts, fmt.Sprintf("held until %s for %d departed xds client stream(s) that left without confirming these weights and may still route by older ones (--xds-departed-grace %s): %s",
			until.UTC().Format(time.RFC3339), len(v.Holding), v.Grace, names(v.Holding)))
	}
	if !v.Forgotten.IsZero() {
		parts = append(parts, fmt.Sprintf("held until %s for departed xds client streams forgotten beyond the %d remembered", v.Forgotten.UTC().Format(time.RFC3339), MaxDeparted))
	}
	if len(v.Past) > 0 {
		parts = append(parts, fmt.Sprintf("not counted, past --xds-departed-grace %s: %d departed xds client stream(s) that left without confirming these weights and may still route by older ones: %s",
			v.Grace, len(v.Past), names(v.Past)))
	}
	return strings.Join(parts, "; ")
}

// names describes up to maxDepartedNamed of ds.
func names(ds []Departed) string {
	var out []string
	for _, d := range ds[:min(len(ds), maxDepartedNamed)] {
		out = append(out, d.Describe())
	}
	if len(ds) > maxDepartedNamed {
		out = append(out, fmt.Sprintf("and %d more", len(ds)-maxDepartedNamed))
	}
	return strings.Join(out, ", ")
}

// judgeDepartedOf judges the sink's departed streams for the map key served as by, but
// those whose client came back to another replica (back, see arrivedAtPeers).
func judgeDepartedOf(s *Sink, key string, by map[Flavour]Served, back map[string]bool) departedVerdict {
	ds, over, now := s.server.tracker.departed.snapshot(back)
	return judgeDeparted(ds, over, now, s.cfg.DepartedGrace, s.history, key, by)
}

// arrivedAtPeers is the set of the clients (replicas.ClientTag) that the other replicas'
// counted reports list as arrived there (replicas.Report.Arrived); nil when there are none
// or the sink does not count other replicas. A client that left this replica and came
// back to another is counted by that replica's report from then on, as it would be by
// this replica's own tracker had it come back here: its departed stream holds nothing
// any more. As on one replica, a client is its certificate identity and node id.
func arrivedAtPeers(s *Sink) map[string]bool {
	if s.cfg.Peers == nil || !s.server.tracker.departed.any() {
		return nil
	}
	var back map[string]bool
	for _, p := range s.cfg.Peers() {
		for _, t := range p.Arrived {
			if back == nil {
				back = map[string]bool{}
			}
			back[t] = true
		}
	}
	return back
}

// holdDeparted applies the departed streams' verdict on the map key served as by to c: a
// map they hold is not Done (and stays marked waiting, so the end of the grace judges it
// again), and the message names them, within their grace or past it.
func holdDeparted(s *Sink, key string, by map[Flavour]Served, c *Confirmation) {
	v := judgeDepartedOf(s, key, by, arrivedAtPeers(s))
	if msg := v.Message(); msg != "" {
		c.Message += "; " + msg
	}
	if !v.Holds() {
		return
	}
	c.Done = false
	s.mu.Lock()
	s.pending[key] = true
	s.mu.Unlock()
}

// reportDeparted adds to m (a replica report's map) the departed streams within their
// grace that hold it, as relevant streams waiting, so the leader holds the map for them too,
// and names those past their grace in m.Departed (not counted), so the leader's message
// names them as this replica's own would.
func reportDeparted(m *replicas.Map, v departedVerdict) {
	for _, d := range v.Past[:min(len(v.Past), replicas.MaxWaiting)] {
		m.Departed = append(m.Departed, "departed "+d.Describe())
	}
	for _, d := range v.Holding {
		m.Relevant++
		if len(m.Waiting) < replicas.MaxWaiting {
			m.Waiting = append(m.Waiting, "departed "+streamLabel(d.ClientState))
		}
	}
	if !v.Forgotten.IsZero() {
		m.Relevant++
		if len(m.Waiting) < replicas.MaxWaiting {
			m.Waiting = append(m.Waiting, "departed streams forgotten at the cap")
		}
	}
}
