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

// judgeDepartedOf judges the sink's departed streams for the map key served as by.
func judgeDepartedOf(s *Sink, key string, by map[Flavour]Served) departedVerdict {
	ds, over, now := s.server.tracker.departed.snapshot()
	return judgeDeparted(ds, over, now, s.cfg.DepartedGrace, s.history, key, by)
}

// holdDeparted applies the departed streams' verdict on the map key served as by to c: a
// map they hold is not Done (and stays marked waiting, so the end of the grace judges it
// again), and the message names them, within their grace or past it.
func holdDeparted(s *Sink, key string, by map[Flavour]Served, c *Confirmation) {
	v := judgeDepartedOf(s, key, by)
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
