package publish

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// metrics are the publisher's Prometheus metrics. A nil *metrics records nothing.
type metrics struct {
	reconciles  *prometheus.CounterVec
	conditions  *prometheus.CounterVec
	routeWrites prometheus.Counter
	latency     prometheus.Histogram
	sinkLatency *prometheus.HistogramVec
	rampSteps   *prometheus.CounterVec
	holders     *prometheus.CounterVec
	ignored     *prometheus.CounterVec
	teardowns   *prometheus.CounterVec

	mu    sync.Mutex
	since map[cache.ObjectName]time.Time // when a map's current inputs were first seen unpublished
	sinks map[cache.ObjectName]map[string]bool
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_reconciles_total",
			Help: "TrafficMap reconciles, by result: ok, or error (retried with backoff)."}, []string{"result"}),
		conditions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_published_conditions_total",
			Help: "Published conditions written, by status and reason."}, []string{"status", "reason"}),
		routeWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "trafficmap_publisher_route_writes_total",
			Help: "API writes of HTTPRoutes and backend Services."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trafficmap_publisher_input_to_published_seconds",
			Help:    "Time from the publisher first seeing a map's new inputs (Published set to Publishing) to Published True.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		sinkLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trafficmap_publisher_input_to_sink_confirmed_seconds",
			Help:    "Time from the publisher first seeing a map's new inputs to a sink's confirmation: the gateway accepting the route (httproute), or every xDS client ACKing (xds).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"sink"}),
		rampSteps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_ramp_steps_total",
			Help: "Ramp steps taken (the step before was in place on every sink), by direction: down (gradual drain) or up (gradual undrain)."}, []string{"direction"}),
		holders: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_holder_changes_total",
			Help: "Maps found held by another publisher (their claim journal names it, with claims or a last positive plan), counted once per change of holder, by the holder's publisherName (\"unknown\" for a name that is not a known publisher: --known-publishers)."}, []string{"holder"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_claim_journal_ignored_total",
			Help: "Claim journal entries (status.publisher.claimedTargets) that grant no name, counted once per change of a map's ignored entries, by reason: Malformed, ForeignGRPCName, NotEntitled, NotGranted, Overlap or UnknownPublisher."}, []string{"reason"}),
		teardowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_teardown_timeouts_total",
			Help: "Steps of a deleted map's teardown that ran out of --teardown-timeout and were passed, by step (zeros: weights 0; removal) and cause (unconfirmed: a sink did not confirm the step; failed: the step's tries failed for the whole timeout)."},
			[]string{"step", "cause"}),
		since: map[cache.ObjectName]time.Time{},
		sinks: map[cache.ObjectName]map[string]bool{},
	}
	reg.MustRegister(m.reconciles, m.conditions, m.routeWrites, m.latency, m.sinkLatency, m.rampSteps, m.holders, m.ignored, m.teardowns)
	for _, d := range []weights.RampDirection{weights.RampDown, weights.RampUp} {
		m.rampSteps.WithLabelValues(string(d)) // exported at 0 before the first ramp
	}
	for _, step := range []string{"zeros", "removal"} {
		for _, cause := range []string{causeUnconfirmed, causeFailed} {
			m.teardowns.WithLabelValues(step, cause) // exported at 0 before the first
		}
	}
	for _, r := range model.IgnoreReasons {
		m.ignored.WithLabelValues(string(r))
	}
	return m
}

// watchGauges registers the gauges read at scrape time: whether this replica leads, how
// many maps it holds, how many are not Published and for how long the oldest has not been (ramping maps aside),
// how many maps are ramping, and how many are in fallback by reason.
func watchGauges(reg prometheus.Registerer, leading func() bool, maps func() int, unpublished func() (int, time.Duration), ramping func() int,
	fallbacks func() map[model.FallbackReason]int) {
	if reg == nil {
		return
	}
	reg.MustRegister(newFallbackGauge(fallbacks),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trafficmap_publisher_leader",
			Help: "1 while this replica holds the leader-election Lease (always 1 without leader election), else 0."},
			func() float64 {
				if leading() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trafficmap_publisher_maps",
			Help: "TrafficMaps in this replica's cache (the namespaces it watches): with the xDS server's resources, encoded bytes and streams, what its memory grows with."},
			func() float64 { return float64(maps()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trafficmap_publisher_maps_not_published",
			Help: "TrafficMaps whose Published condition is not True at their generation, as this replica's cache has them."},
			func() float64 { n, _ := unpublished(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trafficmap_publisher_oldest_unpublished_seconds",
			Help: "How long the TrafficMap Published False the longest has been (since its condition's lastTransitionTime); 0 when every map is Published."},
			func() float64 { _, d := unpublished(); return d.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "trafficmap_publisher_maps_ramping",
			Help: "TrafficMaps whose Published condition is False with reason Ramping (a gradual drain or undrain under way), as this replica's cache has them; not counted in maps_not_published."},
			func() float64 { return float64(ramping()) }),
	)
}

func (m *metrics) reconciled(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.reconciles.WithLabelValues(result).Inc()
}

// rampStep counts one ramp step taken in direction.
func (m *metrics) rampStep(direction string) {
	if m != nil {
		m.rampSteps.WithLabelValues(direction).Inc()
	}
}

// journalIgnored counts a claim journal entry ignored for reason.
func (m *metrics) journalIgnored(reason model.IgnoreReason) {
	if m != nil {
		m.ignored.WithLabelValues(string(reason)).Inc()
	}
}

// heldBy counts a map found held by the publisher holder (once per change of holder).
// teardownTimedOut counts a teardown step (label "zeros" or "removal") passed after
// --teardown-timeout, by cause (causeUnconfirmed, causeFailed).
func (m *metrics) teardownTimedOut(step, cause string) {
	if m != nil {
		m.teardowns.WithLabelValues(step, cause).Inc()
	}
}

func (m *metrics) heldBy(holder string) {
	if m != nil {
		m.holders.WithLabelValues(holder).Inc()
	}
}

func (m *metrics) routeWritten(n int) {
	if m != nil {
		m.routeWrites.Add(float64(n))
	}
}

// condition records a written Published condition; a Publishing one starts the latency
// clock for key (if not running), a True one stops it.
func (m *metrics) condition(key cache.ObjectName, status, reason string) {
	if m == nil {
		return
	}
	m.conditions.WithLabelValues(status, reason).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case reason == string(model.ReasonPublishing):
		m.startLocked(key)
	case status == "True":
		if start, running := m.since[key]; running {
			m.latency.Observe(time.Since(start).Seconds())
			delete(m.since, key)
			delete(m.sinks, key)
		}
	}
}

// started starts the latency clock for key (if not running) without a condition write.
func (m *metrics) started(key cache.ObjectName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.startLocked(key)
}

func (m *metrics) startLocked(key cache.ObjectName) {
	if _, running := m.since[key]; !running {
		m.since[key] = time.Now()
	}
}

// sinkConfirmed records, once per change of a map's inputs, the time until sink confirmed.
func (m *metrics) sinkConfirmed(key cache.ObjectName, sink string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start, running := m.since[key]
	if !running || m.sinks[key][sink] {
		return
	}
	if m.sinks[key] == nil {
		m.sinks[key] = map[string]bool{}
	}
	m.sinks[key][sink] = true
	m.sinkLatency.WithLabelValues(sink).Observe(time.Since(start).Seconds())
}

// forget drops the latency clock of a deleted map.
func (m *metrics) forget(key cache.ObjectName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.since, key)
	delete(m.sinks, key)
	m.mu.Unlock()
}

// fallbackGauge is trafficmap_publisher_maps_in_fallback{reason}, read at scrape time: the
// maps whose PublicationFallback condition is True, by reason, as count (this replica's
// cache) has them. Every reason of model.RetainedReasons is exported, 0 when no map has it,
// and no other: the label's values are bounded, and a map leaves the count as soon as its
// condition or the map itself does.
type fallbackGauge struct {
	desc  *prometheus.Desc
	count func() map[model.FallbackReason]int
}

func newFallbackGauge(count func() map[model.FallbackReason]int) fallbackGauge {
	return fallbackGauge{count: count, desc: prometheus.NewDesc("trafficmap_publisher_maps_in_fallback",
		"TrafficMaps whose PublicationFallback condition is True (served from a retained plan: the last positive weights, or the last valid drains, taints or tolerations recorded), by reason, as this replica's cache has them.",
		[]string{"reason"}, nil)}
}

// Describe implements prometheus.Collector.
func (g fallbackGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g fallbackGauge) Collect(ch chan<- prometheus.Metric) {
	counts := g.count()
	for _, r := range model.RetainedReasons() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(counts[r]), string(r))
	}
}
