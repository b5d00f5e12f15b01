package xds

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trafficmap/publisher/model/replicas"
)

// A departed client holds what it held: an xDS stream that goes away (closed by the
// client, by the server's keepalive, reset by the network) leaves its client routing by
// the last content it applied, for as long as it stays away (an Envoy cut off from the
// control plane keeps its last configuration). So the tracker remembers every identified
// stream that closes, with its last ClientState, and a map stays Pending while a departed
// stream within its grace is relevant to it and has not confirmed its current content
// (Judge, as for a connected stream). A stream of the same client (certificate identity,
// then node id) that identifies itself again replaces what was remembered: from then on
// it counts as any client. Past the grace a departed stream no longer holds a map, but is
// still named in the maps' messages (and counted in the metrics) for departedNamed.

// DefaultDepartedGrace is the default of --xds-departed-grace. A client cut off by a
// transient fault notices it by its own keepalive (at most 30s with keepalive time 10s
// and timeout 20s, what --xds-peer-grace assumes), then reconnects on gRPC's connection
// backoff (1s, times 1.6 per attempt, 20% jitter): after half a minute of failures its next
// attempt comes within about 30s more. 60s covers both; a client that stays away longer is
// partitioned or gone, and its maps go on to True naming it.
const DefaultDepartedGrace = 60 * time.Second

// MaxDeparted bounds the departed streams remembered. Node ids are the client's choice,
// so a client cycling streams under new ids could otherwise grow the set without bound.
// At the cap the oldest one past its grace is forgotten; when every remembered stream is
// within its grace, the oldest is forgotten but its hold is not: what it may see (its
// certificate identity's access) stays held until its grace ends, as if it were relevant
// to every map it may see (see departures.add). The memory stays bounded and no departed
// stream within its grace is ever forgotten in a way that lets a map it held go True.
const MaxDeparted = 4096

// maxOverflow bounds the identities the streams forgotten at the cap are held by; beyond
// it they are held as one that may see every namespace.
const maxOverflow = 64

// departedNamed is how long past its grace a departed stream is still remembered, to be
// named in the messages of the maps it would have held.
const departedNamed = 10 * time.Minute

// Departed is one stream that went away: its last state, when it went and when its grace
// ends (from then on it holds no map).
type Departed struct {
	ClientState
	At, Until time.Time
}

// Describe names the departed stream for a condition message: its client (certificate
// identity, then node id, escaped and shortened), its stream and when it went.
func (d Departed) Describe() string {
	return fmt.Sprintf("%s stream %s (departed %s)", describeClient(d.Access.Identity, d.NodeID), d.Stream, d.At.UTC().Format(time.RFC3339))
}

// departKey is who a departed stream's client is: its certificate identity, then its node id.
type departKey struct{ identity, node string }

func keyOf(cl ClientState) departKey { return departKey{cl.Access.Identity, cl.NodeID} }

// overflowed is the hold of the streams of one identity forgotten at the cap.
type overflowed struct {
	access Access
	until  time.Time
}

// departedRecord is one departed stream remembered; expired: the end of its grace was
// counted; tag: its client's replicas.ClientTag.
type departedRecord struct {
	Departed
	expired bool
	tag     string
}

// departures remembers the departed streams, oldest first, at most max. Safe for
// concurrent use: its own lock, taken under the Tracker's (never the other way round); it
// calls out (onEnd) outside it. Its one timer runs only while a grace is running, and not
// after stop.
type departures struct {
	grace time.Duration // 0: nothing is remembered
	now   func() time.Time
	max   int
	// onEnd is called, outside the lock, when a grace ends, so the maps it held are
	// judged again.
	onEnd func()

	mu       sync.Mutex
	list     []departedRecord
	overflow map[string]overflowed // by certificate identity
	timer    *time.Timer
	stopped  bool
	// expired counts the streams whose grace ended before their client came back;
	// forgotten those forgotten at the cap within their grace.
	expired, forgotten prometheus.Counter
}

var descDeparted = prometheus.NewDesc("trafficmap_publisher_xds_departed_clients",
	"Departed xDS streams remembered (see --xds-departed-grace), by grace: within (they hold the maps they have not confirmed) or past (no longer counted; named in those maps' messages for 10m).",
	[]string{"grace"}, nil)

func newDepartures(grace time.Duration, now func() time.Time) *departures {
	if now == nil {
		now = time.Now
	}
	return &departures{grace: grace, now: now, max: MaxDeparted, overflow: map[string]overflowed{},
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_departed_expired_total",
			Help: "Departed xDS streams whose --xds-departed-grace ended before their client came back: the maps they held may be Published without them (their messages name them)."}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_departed_forgotten_total",
			Help: "Departed xDS streams forgotten within their grace because 4096 were remembered: until their grace ends, every map their certificate identity may see stays held."}),
	}
}

// Describe implements prometheus.Collector.
func (d *departures) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDeparted
	d.expired.Describe(ch)
	d.forgotten.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *departures) Collect(ch chan<- prometheus.Metric) {
	list, _, now := d.snapshot(nil)
	within := 0
	for _, x := range list {
		if now.Before(x.Until) {
			within++
		}
	}
	ch <- prometheus.MustNewConstMetric(descDeparted, prometheus.GaugeValue, float64(within), "within")
	ch <- prometheus.MustNewConstMetric(descDeparted, prometheus.GaugeValue, float64(len(list)-within), "past")
	d.expired.Collect(ch)
	d.forgotten.Collect(ch)
}

// add remembers cl, which just went away (with the Tracker's mu held).
func (d *departures) add(cl ClientState) {
	if d == nil || d.grace <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	now := d.now()
	d.pruneLocked(now)
	if len(d.list) >= d.max {
		i := slices.IndexFunc(d.list, func(x departedRecord) bool { return !now.Before(x.Until) })
		if i < 0 {
			i = 0
			d.hold(d.list[0].Departed)
		}
		d.list = slices.Delete(d.list, i, i+1)
	}
	d.list = append(d.list, departedRecord{Departed: Departed{ClientState: cl, At: now, Until: now.Add(d.grace)},
		tag: replicas.ClientTag(cl.Access.Identity, cl.NodeID)})
	if d.timer == nil { // else it fires for an earlier grace, and is armed again then
		d.timer = time.AfterFunc(d.grace, d.ended)
	}
}

// hold keeps the hold of x, forgotten at the cap within its grace, by its identity.
func (d *departures) hold(x Departed) {
	d.forgotten.Inc()
	id, access := x.Access.Identity, x.Access
	if _, ok := d.overflow[id]; !ok && len(d.overflow) >= maxOverflow {
		id, access = "\x00", Access{} // every namespace
	}
	o := d.overflow[id]
	o.access = access
	if x.Until.After(o.until) {
		o.until = x.Until
	}
	d.overflow[id] = o
}

// returned forgets the departed streams of cl's client, which identified itself again
// (with the Tracker's mu held).
func (d *departures) returned(cl ClientState) {
	if d == nil {
		return
	}
	k := keyOf(cl)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.list = slices.DeleteFunc(d.list, func(x departedRecord) bool { return keyOf(x.ClientState) == k })
}

// any reports whether a departed stream is remembered.
func (d *departures) any() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.list) > 0
}

// remembers reports whether a departed stream of a client tagged as one of tags is
// remembered within its grace.
func (d *departures) remembers(tags []string) bool {
	if d == nil || len(tags) == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for _, x := range d.list {
		if now.Before(x.Until) && slices.Contains(tags, x.tag) {
			return true
		}
	}
	return false
}

// clock is the departures' time (time.Now without departures).
func (d *departures) clock() time.Time {
	if d == nil {
		return time.Now()
	}
	return d.now()
}

// pruneLocked forgets the streams past their grace by more than departedNamed, and the
// ended holds of the streams forgotten at the cap.
func (d *departures) pruneLocked(now time.Time) {
	d.list = slices.DeleteFunc(d.list, func(x departedRecord) bool { return !now.Before(x.Until.Add(departedNamed)) })
	for id, o := range d.overflow {
		if !now.Before(o.until) {
			delete(d.overflow, id)
		}
	}
}

// ended runs when the earliest grace may have ended: it counts the ended graces, arms the
// timer for the next one and calls onEnd.
func (d *departures) ended() {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	now := d.now()
	d.pruneLocked(now)
	var next time.Time
	later := func(t time.Time) {
		if now.Before(t) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for i := range d.list {
		x := &d.list[i]
		if !now.Before(x.Until) && !x.expired {
			d.expired.Inc()
			x.expired = true
		}
		later(x.Until)
	}
	for _, o := range d.overflow {
		later(o.until)
	}
	d.timer = nil
	if !next.IsZero() {
		d.timer = time.AfterFunc(next.Sub(now), d.ended)
	}
	onEnd := d.onEnd
	d.mu.Unlock()
	if onEnd != nil {
		onEnd()
	}
}

// stop stops the timer for good; nothing departs after it (the server stopped).
func (d *departures) stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

// snapshot returns the departed streams remembered (oldest first) but those whose client's
// tag is in back (see arrivedAtPeers), the holds of those forgotten at the cap, and the
// time they were read at.
func (d *departures) snapshot(back map[string]bool) ([]Departed, []overflowed, time.Time) {
	if d == nil {
		return nil, nil, time.Now()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	d.pruneLocked(now)
	out := make([]Departed, 0, len(d.list))
	for _, x := range d.list {
		if !back[x.tag] {
			out = append(out, x.Departed)
		}
	}
	over := make([]overflowed, 0, len(d.overflow))
	for _, o := range d.overflow {
		over = append(over, o)
	}
	return out, over, now
}
