package main

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

// testClient is the identity of the probes' client certificate in these tests.
const testClient = "probe-client"

// clientTLS is a client configuration of the test PKI: mutual, with a certificate for
// testClient, or anonymous.
func clientTLS(t *testing.T, p *pki, mutual bool) *tls.Config {
	t.Helper()
	if !mutual {
		return p.AnonymousTLS()
	}
	cfg, err := p.ClientTLS(testClient)
	require.NoError(t, err)
	return cfg
}

// probeServer is the real xDS server over mutual TLS, serving the test maps.
type probeServer struct {
	t    *testing.T
	srv  *xds.Server
	addr string
	pki  *pki
}

// startProbeServer starts the server with the client policy rules (see
// xds.ParseClientPolicy).
func startProbeServer(t *testing.T, rules ...string) *probeServer {
	t.Helper()
	pki, err := newPKI(t.TempDir())
	require.NoError(t, err)
	cert, key, ca := pki.ServerFiles()
	cfg, err := xds.LoadTLS(cert, key, ca, rules...)
	require.NoError(t, err)
	s := &probeServer{t: t, srv: xds.NewServer(xds.ServerConfig{Log: zaptest.NewLogger(t), TLS: cfg}), pki: pki}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	return s
}

// serve serves both flavours with prod/chat at the weights given by cluster (0 for a drained
// entry; nil: no prod/chat) and prod/other at worker-a=1, and returns the route versions
// per flavour.
func (s *probeServer) serve(chat map[string]int32) map[xds.Flavour]string {
	s.t.Helper()
	service := func(name string, ws map[string]int32) xds.Service {
		var res weights.Result
		for _, c := range []string{"worker-a", "worker-b"} {
			w, ok := ws[c]
			if !ok {
				continue
			}
			res.Entries = append(res.Entries, weights.EffectiveEntry{Cluster: c, Weight: max(w, 1), Effective: w,
				Endpoint: weights.Endpoint{URL: "http://" + c + ".example:80", Scheme: "http", Host: c + ".example", Port: 80}})
		}
		return xds.Service{Namespace: "prod", Name: name, Service: name, Hostnames: []string{name + ".example.com"}, Result: res}
	}
	services := []xds.Service{service("other", map[string]int32{"worker-a": 1})}
	if chat != nil {
		services = append(services, service("chat", chat))
	}
	out := map[xds.Flavour]string{}
	envoy, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, services)
	require.NoError(s.t, err)
	v, err := s.srv.SetResources(context.Background(), xds.FlavourEnvoy, envoy)
	require.NoError(s.t, err)
	out[xds.FlavourEnvoy] = v[resource.RouteType]
	grpcRes, err := xds.TranslateGRPC(services)
	require.NoError(s.t, err)
	v, err = s.srv.SetResources(context.Background(), xds.FlavourGRPC, grpcRes)
	require.NoError(s.t, err)
	out[xds.FlavourGRPC] = v[resource.RouteType]
	return out
}

// acked returns the route version the server's tracker says the probe's stream ACKed (or
// declared), "" when it has no stream.
func (s *probeServer) acked(nodeID string) string {
	for _, c := range s.srv.Tracker().Clients() {
		if c.NodeID == nodeID {
			return c.Acked[resource.RouteType]
		}
	}
	return ""
}

var chatRef = mapRef{Namespace: "prod", Name: "chat", Service: "chat", Clusters: []string{"worker-a", "worker-b"}}

// startProbe runs a probe until the test ends.
func startProbe(t *testing.T, cfg probeConfig) *probe {
	t.Helper()
	p := newProbe(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// waitHeld waits until the probe holds weights for prod/chat, connected.
func waitHeld(t *testing.T, p *probe, weights string) {
	t.Helper()
	require.Eventually(t, func() bool {
		w, present, connected := p.HeldAt(chatRef.Key(), time.Now())
		return w == weights && present && connected
	}, 10*time.Second, 5*time.Millisecond, "probe %s holds %q", p.ID(), weights)
}

// Against the real xDS server over mutual TLS, in every flavour and stream kind, a probe
// holds each map's weights as ACKed (an all-zero map is present with no weight), keeps its
// state through a NACK and a freeze, and declares what it holds when it reconnects, so the
// server counts it as holding the current version without sending it anything.
func TestProbeFollowsTheXDSServer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		envoy, delta bool
	}{
		{"grpc sotw", false, false},
		{"grpc delta", false, true},
		{"envoy sotw", true, false},
		{"envoy delta", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startProbeServer(t)
			flavour := xds.FlavourGRPC
			if tc.envoy {
				flavour = xds.FlavourEnvoy
			}
			s.serve(map[string]int32{"worker-a": 70, "worker-b": 30})
			node := "probe-" + strings.ReplaceAll(tc.name, " ", "-") + strings.Repeat("x", 2048)
			p := startProbe(t, probeConfig{NodeID: node, Delta: tc.delta, Envoy: tc.envoy, TLS: clientTLS(t, s.pki, true),
				Maps: []mapRef{chatRef}, Addr: func() string { return s.addr }, NACKText: 6 << 10})
			assert.True(t, p.Subscribes("prod/chat"))
			assert.Equal(t, tc.envoy, p.Subscribes("prod/other"))
			assert.Equal(t, node[:40]+" "+map[bool]string{true: "envoy", false: "grpc"}[tc.envoy]+"-"+map[bool]string{true: "delta", false: "sotw"}[tc.delta], p.ID())
			waitHeld(t, p, "worker-a=70,worker-b=30")
			s.serve(map[string]int32{"worker-a": 70, "worker-b": 0})
			waitHeld(t, p, "worker-a=70")
			s.serve(map[string]int32{"worker-a": 0, "worker-b": 0})
			waitHeld(t, p, "")

			// A NACKed response changes nothing held; the next change is ACKed.
			p.NACK(1)
			s.serve(map[string]int32{"worker-a": 70, "worker-b": 30})
			require.Eventually(t, func() bool { return p.Stats().NACKs == 1 }, 10*time.Second, 5*time.Millisecond)
			w, present, _ := p.HeldAt(chatRef.Key(), time.Now())
			assert.Equal(t, "", w, "a NACKed response is not held")
			assert.True(t, present)
			v := s.serve(map[string]int32{"worker-a": 50, "worker-b": 50})
			waitHeld(t, p, "worker-a=50,worker-b=50")
			require.Eventually(t, func() bool { return s.acked(node) == v[flavour] }, 10*time.Second, 5*time.Millisecond)

			// A frozen probe reads and ACKs nothing until the freeze ends.
			frozen := time.Now()
			p.Freeze(500 * time.Millisecond)
			s.serve(map[string]int32{"worker-a": 50, "worker-b": 0})
			if w, _, _ := p.HeldAt(chatRef.Key(), time.Now()); time.Since(frozen) < 400*time.Millisecond {
				assert.Equal(t, "worker-a=50,worker-b=50", w, "frozen")
			}
			waitHeld(t, p, "worker-a=50")
			h := p.History(chatRef.Key())
			assert.False(t, h[len(h)-1].At.Before(frozen.Add(500*time.Millisecond)), "held after the freeze")
			v = s.serve(map[string]int32{"worker-a": 50, "worker-b": 50})
			waitHeld(t, p, "worker-a=50,worker-b=50")
			require.Eventually(t, func() bool { return s.acked(node) == v[flavour] }, 10*time.Second, 5*time.Millisecond)

			// Reconnecting, it declares what it holds: the server's new stream holds the
			// current version, and nothing held changes.
			before := p.Stats()
			p.Disconnect()
			require.Eventually(t, func() bool {
				_, _, connected := p.HeldAt(chatRef.Key(), time.Now())
				return p.Stats().Connects == 2 && connected && s.acked(node) == v[flavour]
			}, 10*time.Second, 5*time.Millisecond)
			after := p.Stats()
			if tc.delta && !tc.envoy {
				// The server answers a fresh named state-of-the-world subscription and a
				// fresh delta wildcard one (empty) anyway; a named delta stream that
				// declared the current content is sent nothing.
				assert.Equal(t, before.Responses, after.Responses, "nothing sent to a stream that declared the current content")
			}
			assert.Equal(t, int64(0), after.Refused)

			h = p.History(chatRef.Key())
			var kinds, held []string
			for _, e := range h {
				kinds = append(kinds, e.Kind)
				if e.Kind == eventHeld {
					held = append(held, e.Weights)
				}
			}
			assert.Equal(t, []string{"worker-a=70,worker-b=30", "worker-a=70", "", "worker-a=50,worker-b=50", "worker-a=50", "worker-a=50,worker-b=50"}, held)
			assert.Equal(t, eventConnected, kinds[0])
			assert.Equal(t, []string{eventDisconnected, eventConnected}, kinds[len(kinds)-2:])
			last := h[len(h)-1]
			assert.Equal(t, heldEvent{At: last.At, Kind: eventConnected, Weights: "worker-a=50,worker-b=50", Present: true}, last)
			for i := 1; i < len(h); i++ {
				assert.False(t, h[i].At.Before(h[i-1].At), "history in order")
			}
			w, present, connected := p.HeldAt(chatRef.Key(), h[0].At.Add(-time.Nanosecond))
			assert.Equal(t, []any{"", false, false}, []any{w, present, connected}, "before the first connect")
			if tc.envoy {
				w, present, _ = p.HeldAt("prod/other", time.Now())
				assert.Equal(t, []any{"worker-a=1", true}, []any{w, present}, "an Envoy probe holds every map")
			}

			// NACKs asked for and stopped before a response came are not made later.
			p.NACK(2)
			assert.Equal(t, 2, p.StopNACKs())
			s.serve(map[string]int32{"worker-a": 40, "worker-b": 60})
			waitHeld(t, p, "worker-a=40,worker-b=60")
			assert.Equal(t, int64(1), p.Stats().NACKs)

			// A deleted map is no longer present.
			s.serve(nil)
			require.Eventually(t, func() bool {
				_, present, _ := p.HeldAt(chatRef.Key(), time.Now())
				return !present
			}, 10*time.Second, 5*time.Millisecond)
			h = p.History(chatRef.Key())
			assert.Equal(t, heldEvent{At: h[len(h)-1].At, Kind: eventHeld}, h[len(h)-1])
		})
	}
}

// A probe without a client certificate is refused at the handshake and never connects; one
// that never ACKs reads responses, holds nothing, and the server counts no ACK from it.
func TestProbeRefusedAndNeverACK(t *testing.T) {
	s := startProbeServer(t)
	s.serve(map[string]int32{"worker-a": 70, "worker-b": 30})
	anon := startProbe(t, probeConfig{NodeID: "anonymous", TLS: clientTLS(t, s.pki, false), Maps: []mapRef{chatRef}, Addr: func() string { return s.addr }})
	silent := startProbe(t, probeConfig{NodeID: "silent", Delta: true, TLS: clientTLS(t, s.pki, true), Maps: []mapRef{chatRef},
		Addr: func() string { return s.addr }, NeverACK: true})
	require.Eventually(t, func() bool { return anon.Stats().Refused >= 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(0), anon.Stats().Connects)
	require.Eventually(t, func() bool { return silent.Stats().Responses >= 3 }, 10*time.Second, 5*time.Millisecond)
	st := silent.Stats()
	assert.Equal(t, probeStats{Responses: st.Responses, Connects: 1}, st)
	assert.Empty(t, s.acked("silent"))
	w, present, connected := silent.HeldAt(chatRef.Key(), time.Now())
	assert.Equal(t, []any{"", false, true}, []any{w, present, connected})
}

// A client whose identity no client policy rule matches is refused its stream
// (PermissionDenied) and holds nothing.
func TestProbeRefusedByPolicy(t *testing.T) {
	s := startProbeServer(t, "spiffe://example.org/nobody=prod")
	s.serve(map[string]int32{"worker-a": 70, "worker-b": 30})
	p := startProbe(t, probeConfig{NodeID: "outsider", Delta: true, TLS: clientTLS(t, s.pki, true), Maps: []mapRef{chatRef}, Addr: func() string { return s.addr }})
	require.Eventually(t, func() bool { return p.Stats().Refused >= 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(0), p.Stats().ACKs)
	_, present, _ := p.HeldAt(chatRef.Key(), time.Now())
	assert.False(t, present)
}

// An address that is not up yet ("") is waited for.
func TestProbeWaitsForAnAddress(t *testing.T) {
	s := startProbeServer(t)
	s.serve(map[string]int32{"worker-a": 1})
	up := make(chan struct{})
	p := startProbe(t, probeConfig{NodeID: "late", Envoy: true, TLS: clientTLS(t, s.pki, true), Addr: func() string {
		select {
		case <-up:
			return s.addr
		default:
			return ""
		}
	}})
	assert.Equal(t, probeStats{}, p.Stats())
	close(up)
	waitHeld(t, p, "worker-a=1")
}

func TestCanonicalWeights(t *testing.T) {
	weighted := func(cws ...*routev3.WeightedCluster_ClusterWeight) *routev3.Route {
		return &routev3.Route{Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: cws}}}}}
	}
	cw := func(name string, w uint32) *routev3.WeightedCluster_ClusterWeight {
		return &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(w)}
	}
	for _, tc := range []struct {
		name  string
		route *routev3.Route
		want  string
	}{
		{"sorted by entry cluster", weighted(cw("prod/chat/b", 30), cw("prod/chat/a", 70)), "a=70,b=30"},
		{"zero weights left out", weighted(cw("prod/chat/a", 0), cw("prod/chat/b", 1)), "b=1"},
		{"another map's cluster keeps its name", weighted(cw("prod/other/a", 5)), "prod/other/a=5"},
		{"fixed 503", &routev3.Route{Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 503}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, canonicalWeights(&routev3.VirtualHost{Name: "prod/chat", Routes: []*routev3.Route{tc.route}}))
		})
	}
}
