package main

import "time"

// probeStatus is what a probe holds for one map at one moment and how its stream stood
// then: the continuous judge's reading of one client (monitor.go).
type probeStatus struct {
	Weights       string // the canonical weights held ("" when none)
	Present       bool   // the map's route is held at all, its chain intact
	Broken        string // the chain's first failing link ("" when intact or nothing held)
	Connected     bool   // a stream was open (first requests sent)
	EverConnected bool   // a stream was ever open up to then
	// LinkAt is the last connect or disconnect at or before the moment: for a disconnected
	// probe, when it departed.
	LinkAt time.Time
	// EverHeld: the probe held something for the map (a "held" event) at or before the
	// moment; a probe that never did is a new client for it.
	EverHeld bool
}

// Status returns the probe's status for the map key at t. It reads the records under the
// probe's lock in O(log n), so the continuous judge can ask every tick.
func (p *probe) Status(key string, t time.Time) probeStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st probeStatus
	if e, ok := lastAt(p.history[key], t); ok {
		st.Weights, st.Present, st.Broken, st.EverHeld = e.Weights, e.Present, e.Broken, true
	}
	if e, ok := lastAt(p.links, t); ok {
		st.Connected, st.EverConnected, st.LinkAt = e.Kind == eventConnected, true, e.At
	}
	return st
}
