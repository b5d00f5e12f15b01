package xds

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trafficmap/publisher/model"
)

// metrics are the xDS server's Prometheus metrics. ACKs and NACKs are counted as they
// happen; connected clients and snapshot versions are read at scrape time.
type metrics struct {
	acks, nacks *prometheus.CounterVec
	invalid     prometheus.Counter
	// refused counts requests and streams refused, by reason (a fixed set:
	// refusedReasons); panics counts stream handlers that panicked (recovered).
	refused *prometheus.CounterVec
	panics  prometheus.Counter
	server  *Server
}

var (
	descClients  = prometheus.NewDesc("trafficmap_publisher_xds_clients", "Connected xDS clients that identified themselves, by flavour.", []string{"flavour"}, nil)
	descSnapshot = prometheus.NewDesc("trafficmap_publisher_xds_snapshot_info", "The version of each resource type served to each flavour (value 1).", []string{"flavour", "type", "version"}, nil)
	// Accounting, for sizing (see docs/operations/sizing.md): what the server holds and for whom.
	descResources = prometheus.NewDesc("trafficmap_publisher_xds_resources", "Resources served, by flavour and type (a flavour no client has consumed yet serves none; the gRPC flavour only the resources of the maps its clients subscribe to).", []string{"flavour", "type"}, nil)
	descEncoded   = prometheus.NewDesc("trafficmap_publisher_xds_encoded_bytes", "Bytes of the encodings of the served resources the server keeps, by flavour and type (a resource is encoded when a client is first sent it).", []string{"flavour", "type"}, nil)
	descStreams   = prometheus.NewDesc("trafficmap_publisher_xds_streams", "Open xDS streams of clients that identified themselves, by flavour and protocol (sotw or delta).", []string{"flavour", "protocol"}, nil)
)

func newMetrics(s *Server, reg prometheus.Registerer) *metrics {
	m := &metrics{
		server: s,
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_acks_total",
			Help: "xDS responses clients ACKed, by resource type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_nacks_total",
			Help: "xDS responses clients NACKed, by resource type."}, []string{"type"}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_invalid_snapshots_total",
			Help: "Resource sets refused by validation; the last good snapshot kept being served."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_refused_requests_total",
			Help: "xDS requests and streams refused, their stream ended with a status naming the field and rule, by reason: unknown_type, wrong_type, too_many_names, field_too_long, too_many_connections."}, []string{"reason"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "trafficmap_publisher_xds_handler_panics_total",
			Help: "xDS stream (or unary) handlers that panicked: the panic was recovered and logged, that stream ended with status Internal, the server went on."}),
	}
	for _, r := range refusedReasons {
		m.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.acks, m.nacks, m.invalid, m.refused, m.panics, m)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descClients
	ch <- descSnapshot
	ch <- descResources
	ch <- descEncoded
	ch <- descStreams
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	count := map[Flavour]int{FlavourEnvoy: 0, FlavourGRPC: 0}
	for _, c := range m.server.tracker.Clients() {
		count[c.Flavour]++
	}
	for f, n := range count {
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(n), string(f))
	}
	streams := map[[2]string]int{}
	for _, f := range []Flavour{FlavourEnvoy, FlavourGRPC} {
		for _, p := range []string{"sotw", "delta"} {
			streams[[2]string{string(f), p}] = 0
		}
	}
	for _, c := range m.server.tracker.Clients() {
		p := "sotw"
		if c.Unacked != nil { // set for every delta stream (ClientState.Unacked)
			p = "delta"
		}
		streams[[2]string{string(c.Flavour), p}]++
	}
	for k, n := range streams {
		ch <- prometheus.MustNewConstMetric(descStreams, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for key, c := range m.server.cache.caches {
		n, b := c.size()
		ch <- prometheus.MustNewConstMetric(descResources, prometheus.GaugeValue, float64(n), key.hash, typeLabel(key.typeURL))
		ch <- prometheus.MustNewConstMetric(descEncoded, prometheus.GaugeValue, float64(b), key.hash, typeLabel(key.typeURL))
	}
	for f, vs := range m.server.Versions() {
		for typ, v := range vs {
			ch <- prometheus.MustNewConstMetric(descSnapshot, prometheus.GaugeValue, 1, string(f), typeLabel(typ), v)
		}
	}
}

// refuse counts a refusal for reason (one of refusedReasons).
func (m *metrics) refuse(reason string) { m.refused.WithLabelValues(reason).Inc() }

func (m *metrics) observe(typeURL string, nack bool) {
	if m == nil || typeURL == "" {
		return
	}
	if nack {
		m.nacks.WithLabelValues(typeLabel(typeURL)).Inc()
		return
	}
	m.acks.WithLabelValues(typeLabel(typeURL)).Inc()
}

// The /debug/xds JSON wire types are model's (model/xdsdebug.go), so readers of the
// document (the operator commands) need not link the xDS server.
type (
	// DebugState is model.XDSDebugState.
	DebugState = model.XDSDebugState
	// DebugClient is model.XDSDebugClient.
	DebugClient = model.XDSDebugClient
	// DebugSubscription is model.XDSDebugSubscription.
	DebugSubscription = model.XDSDebugSubscription
	// DebugMap is model.XDSDebugMap.
	DebugMap = model.XDSDebugMap
)

// DebugMapOf is the DebugMap of the service key served as served, judged by Judge.
func DebugMapOf(clients []ClientState, h *History, key string, served map[Flavour]Served) DebugMap {
	m := DebugMap{Key: key, Relevant: []string{}, Acked: []string{}}
	for _, cl := range clients {
		v := Judge(cl, h, key, served)
		if !v.Relevant {
			continue
		}
		m.Relevant = append(m.Relevant, cl.ID())
		if v.Acked {
			m.Acked = append(m.Acked, cl.ID())
		}
	}
	slices.Sort(m.Relevant)
	slices.Sort(m.Acked)
	return m
}

// DebugHandler serves DebugState as JSON without maps (see DebugHandlerWith).
func (s *Server) DebugHandler() http.Handler { return s.DebugHandlerWith(nil) }

// DebugHandlerWith serves DebugState as JSON: every connected client with its node id,
// flavour, stream, subscriptions, the version it ACKed per resource type and its last NACK,
// plus the version served to each flavour: the publisher's counterpart of `istioctl
// proxy-status`. maps, when not nil, is given the clients and returns the per-map section.
func (s *Server) DebugHandlerWith(maps func(clients []ClientState) []DebugMap) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		state := DebugState{Snapshots: map[Flavour]map[string]string{}, Clients: []DebugClient{}}
		for f, vs := range s.Versions() {
			state.Snapshots[f] = map[string]string{}
			for typ, v := range vs {
				state.Snapshots[f][typeLabel(typ)] = v
			}
		}
		clients := s.tracker.Clients()
		for _, c := range clients {
			dc := DebugClient{NodeID: c.NodeID, Flavour: c.Flavour, Stream: c.Stream, Peer: c.Peer, Identity: c.Access.Identity, Namespaces: c.Access.namespaces,
				Acked: map[string]string{}, Nacked: map[string]Nack{}}
			if c.TypeURL != "" {
				dc.Type = typeLabel(c.TypeURL)
			}
			for t, v := range c.Acked {
				dc.Acked[typeLabel(t)] = v
			}
			for t, n := range c.Nacked {
				dc.Nacked[typeLabel(t)] = n
			}
			for t, sub := range c.Subscribed {
				if dc.Subscribed == nil {
					dc.Subscribed = map[string]DebugSubscription{}
				}
				dc.Subscribed[typeLabel(t)] = DebugSubscription{Wildcard: sub.Wildcard, Names: sub.SortedNames()}
			}
			state.Clients = append(state.Clients, dc)
		}
		if maps != nil {
			state.Maps = maps(clients)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(state)
	})
}

// Versions returns the versions served to each flavour that has a snapshot.
func (s *Server) Versions() map[Flavour]Versions {
	out := map[Flavour]Versions{}
	for _, f := range []Flavour{FlavourEnvoy, FlavourGRPC} {
		for _, typ := range confirmTypes {
			if v := s.cache.version(string(f), typ); v != "" {
				if out[f] == nil {
					out[f] = Versions{}
				}
				out[f][typ] = v
			}
		}
	}
	return out
}
