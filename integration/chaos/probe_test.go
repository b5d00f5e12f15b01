package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// chatRef is the test map the probes dial: prod/chat of service chat, hostname
// chat.prod.example.com, entries worker-a and worker-b at http://<cluster>.example:80.
var chatRef = mapRef{Namespace: "prod", Name: "chat", Service: "chat", Clusters: []string{"worker-a", "worker-b"},
	Hostname: "chat.prod.example.com", Endpoints: map[string]string{"worker-a": "http://worker-a.example:80", "worker-b": "http://worker-b.example:80"}}

// otherRef is the second test map, prod/other, with one entry worker-a.
var otherRef = mapRef{Namespace: "prod", Name: "other", Service: "other", Clusters: []string{"worker-a"},
	Hostname: "other.prod.example.com", Endpoints: map[string]string{"worker-a": "http://worker-a.example:80"}}

// fixtureMap is one map to serve: ref with weights by entry cluster (0: drained, its
// cluster served and not weighted).
type fixtureMap struct {
	ref     mapRef
	weights map[string]uint32
}

// fixtureSet is one flavour's resources by name, built by hand from the naming contract
// (names.go), for a test to break before serving or decoding.
type fixtureSet struct {
	listeners map[string]*listenerv3.Listener
	routes    map[string]*routev3.RouteConfiguration
	clusters  map[string]*clusterv3.Cluster
}

// connectionManager is an HTTP connection manager naming route configuration rc over RDS
// from ADS.
func connectionManager(t *testing.T, rc string) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "test", RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
		RouteConfigName: rc, ConfigSource: &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}})
	require.NoError(t, err)
	return a
}

// envoyListenerNaming is the Envoy listener, its HTTP connection manager naming rc.
func envoyListenerNaming(t *testing.T, rc string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: envoyListener, FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: connectionManager(t, rc)}}}}}}
}

// grpcListenerNaming is the api_listener name, naming rc.
func grpcListenerNaming(t *testing.T, name, rc string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: connectionManager(t, rc)}}
}

// testVirtualHost is m's virtual host with domains: one PathPrefix "/" route over the
// positive weights, or a fixed 503 without any.
func testVirtualHost(m fixtureMap, domains ...string) *routev3.VirtualHost {
	r := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}
	var cws []*routev3.WeightedCluster_ClusterWeight
	for _, c := range slices.Sorted(maps.Keys(m.weights)) {
		if w := m.weights[c]; w > 0 {
			cws = append(cws, &routev3.WeightedCluster_ClusterWeight{Name: xdsClusterName(m.ref.Namespace, m.ref.Name, c), Weight: wrapperspb.UInt32(w)})
		}
	}
	if len(cws) == 0 {
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 503}}
	} else {
		r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
			WeightedClusters: &routev3.WeightedCluster{Clusters: cws}}}}
	}
	return &routev3.VirtualHost{Name: virtualHostName(m.ref.Namespace, m.ref.Name), Domains: domains, Routes: []*routev3.Route{r}}
}

// testCluster is a cluster with one endpoint per address "host:port".
func testCluster(t *testing.T, name string, addrs ...string) *clusterv3.Cluster {
	t.Helper()
	var lbs []*endpointv3.LbEndpoint
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		require.NoError(t, err)
		var p uint32
		_, err = fmt.Sscan(port, &p)
		require.NoError(t, err)
		lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p}}}}}}})
	}
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}}
}

// buildFixture builds the flavour's resources of ms from the contract: Envoy, the listener
// naming the shared route configuration with a virtual host per map (domains: its
// Hostname); gRPC, per map the listener "<service>.<namespace>" naming its route
// configuration "<namespace>/<map>" (domains: that name and the Hostname); clusters
// "<namespace>/<map>/<cluster>" per entry, one endpoint at the entry's address.
func buildFixture(t *testing.T, envoy bool, ms ...fixtureMap) fixtureSet {
	t.Helper()
	set := fixtureSet{listeners: map[string]*listenerv3.Listener{}, routes: map[string]*routev3.RouteConfiguration{},
		clusters: map[string]*clusterv3.Cluster{}}
	if envoy {
		set.listeners[envoyListener] = envoyListenerNaming(t, envoyRouteConfig)
		set.routes[envoyRouteConfig] = &routev3.RouteConfiguration{Name: envoyRouteConfig}
	}
	for _, m := range ms {
		if envoy {
			rc := set.routes[envoyRouteConfig]
			rc.VirtualHosts = append(rc.VirtualHosts, testVirtualHost(m, m.ref.Hostname))
		} else {
			lname, rcName := grpcListenerName(m.ref.Service, m.ref.Namespace), grpcRouteConfigName(m.ref.Namespace, m.ref.Name)
			set.listeners[lname] = grpcListenerNaming(t, lname, rcName)
			set.routes[rcName] = &routev3.RouteConfiguration{Name: rcName, VirtualHosts: []*routev3.VirtualHost{testVirtualHost(m, lname, m.ref.Hostname)}}
		}
		for c := range m.weights {
			addr, err := endpointAddress(m.ref.Endpoints[c])
			require.NoError(t, err)
			name := xdsClusterName(m.ref.Namespace, m.ref.Name, c)
			set.clusters[name] = testCluster(t, name, addr)
		}
	}
	return set
}

// resources are the set's resources for a snapshot.
func (f fixtureSet) resources() map[resource.Type][]types.Resource {
	out := map[resource.Type][]types.Resource{resource.ListenerType: {}, resource.RouteType: {}, resource.ClusterType: {}}
	for _, l := range f.listeners {
		out[resource.ListenerType] = append(out[resource.ListenerType], l)
	}
	for _, r := range f.routes {
		out[resource.RouteType] = append(out[resource.RouteType], r)
	}
	for _, c := range f.clusters {
		out[resource.ClusterType] = append(out[resource.ClusterType], c)
	}
	return out
}

// flavourHash keys the snapshot cache by the flavour in the node's metadata (names.go), so
// a probe that does not declare its flavour there is served nothing.
type flavourHash struct{}

func (flavourHash) ID(n *corev3.Node) string {
	return n.GetMetadata().GetFields()[flavourMetadataKey].GetStringValue()
}

// probeServer is a go-control-plane ADS server (snapshot cache, ordered ADS) over mutual
// TLS, serving hand-built fixtures of the test maps.
type probeServer struct {
	t     *testing.T
	cache cachev3.SnapshotCache
	addr  string
	pki   *pki
	deny  bool // refuse every stream with PermissionDenied

	mu      sync.Mutex
	current map[string]*cachev3.Snapshot // per flavour
	acks    map[string]string            // per node id, the route version its stream ACKed or declared
	nacks   map[string]string            // SotW: per node id, the route version its last NACK declared
	nonces  map[string]string            // delta: per nonce sent, the snapshot version of its response
}

// startProbeServer starts the server; with deny it refuses every stream (PermissionDenied),
// as the publisher does a client its client policy does not admit.
func startProbeServer(t *testing.T, deny bool) *probeServer {
	t.Helper()
	pk, err := newPKI(t.TempDir())
	require.NoError(t, err)
	certFile, keyFile, caFile := pk.ServerFiles()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	caPEM, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	s := &probeServer{t: t, cache: cachev3.NewSnapshotCache(false, flavourHash{}, nil), pki: pk, deny: deny,
		current: map[string]*cachev3.Snapshot{}, acks: map[string]string{}, nacks: map[string]string{}, nonces: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, s.cache, s.callbacks(), sotwv3.WithOrderedADS())
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = lis.Addr().String()
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() { cancel(); gs.Stop(); assert.NoError(t, <-done) })
	return s
}

// callbacks refuse streams when deny, and record what each node ACKed or declared of the
// route type.
func (s *probeServer) callbacks() serverv3.CallbackFuncs {
	open := func(context.Context, int64, string) error {
		if s.deny {
			return status.Error(codes.PermissionDenied, "no client policy rule admits this client")
		}
		return nil
	}
	return serverv3.CallbackFuncs{
		StreamOpenFunc:      open,
		DeltaStreamOpenFunc: open,
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if req.GetTypeUrl() != resource.RouteType {
				return nil
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case req.GetErrorDetail() != nil:
				s.nacks[req.GetNode().GetId()] = req.GetVersionInfo()
			case req.GetVersionInfo() != "":
				s.acks[req.GetNode().GetId()] = req.GetVersionInfo()
			}
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			if req.GetTypeUrl() != resource.RouteType || req.GetErrorDetail() != nil {
				return nil
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			node := req.GetNode().GetId()
			if v, ok := s.nonces[req.GetResponseNonce()]; ok {
				s.acks[node] = v
			}
			snap := s.current[flavourHash{}.ID(req.GetNode())]
			if init := req.GetInitialResourceVersions(); len(init) > 0 && snap != nil && maps.Equal(init, snap.GetVersionMap(resource.RouteType)) {
				s.acks[node] = snap.GetVersion(resource.RouteType)
			}
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			if resp.GetTypeUrl() == resource.RouteType {
				s.mu.Lock()
				s.nonces[resp.GetNonce()] = resp.GetSystemVersionInfo()
				s.mu.Unlock()
			}
		},
	}
}

// set serves the flavour's resources as a new snapshot and returns its route version. Each
// type's version is a digest of its content, as the publisher's are, so a change of one
// type (a weight: the route configurations) sends that type alone.
func (s *probeServer) set(flavour string, f fixtureSet) string {
	s.t.Helper()
	snap := &cachev3.Snapshot{}
	for typ, res := range f.resources() {
		slices.SortFunc(res, func(a, b types.Resource) int {
			return strings.Compare(cachev3.GetResourceName(a), cachev3.GetResourceName(b))
		})
		sum := sha256.New()
		for _, r := range res {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			require.NoError(s.t, err)
			sum.Write(b)
		}
		snap.Resources[cachev3.GetResponseType(typ)] = cachev3.NewResources(hex.EncodeToString(sum.Sum(nil))[:12], res)
	}
	require.NoError(s.t, snap.ConstructVersionMap())
	s.mu.Lock()
	s.current[flavour] = snap
	s.mu.Unlock()
	require.NoError(s.t, s.cache.SetSnapshot(context.Background(), flavour, snap))
	return snap.GetVersion(resource.RouteType)
}

// serve serves both flavours with prod/chat at the weights given by cluster (0 for a drained
// entry; nil: no prod/chat) and prod/other at worker-a=1, and returns the versions per
// flavour.
func (s *probeServer) serve(chat map[string]uint32) map[string]string {
	s.t.Helper()
	ms := []fixtureMap{{ref: otherRef, weights: map[string]uint32{"worker-a": 1}}}
	if chat != nil {
		ms = append(ms, fixtureMap{ref: chatRef, weights: chat})
	}
	out := map[string]string{}
	for _, flavour := range []string{flavourEnvoy, flavourGRPC} {
		out[flavour] = s.set(flavour, buildFixture(s.t, flavour == flavourEnvoy, ms...))
	}
	return out
}

// nackedAt returns the route version the node's last state-of-the-world NACK declared.
func (s *probeServer) nackedAt(nodeID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nacks[nodeID]
}

// acked returns the route version the node's stream last ACKed (or declared when
// reconnecting), "" when none.
func (s *probeServer) acked(nodeID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[nodeID]
}

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
			s := startProbeServer(t, false)
			flavour := flavourGRPC
			if tc.envoy {
				flavour = flavourEnvoy
			}
			s.serve(map[string]uint32{"worker-a": 70, "worker-b": 30})
			node := "probe-" + strings.ReplaceAll(tc.name, " ", "-") + strings.Repeat("x", 2048)
			p := startProbe(t, probeConfig{NodeID: node, Delta: tc.delta, Envoy: tc.envoy, TLS: clientTLS(t, s.pki, true),
				Maps: []mapRef{chatRef}, Addr: func() string { return s.addr }, NACKText: 6 << 10})
			assert.True(t, p.Subscribes("prod/chat"))
			assert.Equal(t, tc.envoy, p.Subscribes("prod/other"))
			assert.Equal(t, node[:40]+" "+map[bool]string{true: "envoy", false: "grpc"}[tc.envoy]+"-"+map[bool]string{true: "delta", false: "sotw"}[tc.delta], p.ID())
			waitHeld(t, p, "worker-a=70,worker-b=30")
			s.serve(map[string]uint32{"worker-a": 70, "worker-b": 0})
			waitHeld(t, p, "worker-a=70")
			drained := s.serve(map[string]uint32{"worker-a": 0, "worker-b": 0})
			waitHeld(t, p, "")
			require.Eventually(t, func() bool { return s.acked(node) == drained[flavour] }, 10*time.Second, 5*time.Millisecond)

			// A NACKed response changes nothing held; the next change is ACKed. (A
			// state-of-the-world NACK declares the version still held; go-control-plane sends
			// the NACKed version again at once, and the probe ACKs it then.)
			p.NACK(1)
			s.serve(map[string]uint32{"worker-a": 70, "worker-b": 30})
			require.Eventually(t, func() bool { return p.Stats().NACKs == 1 }, 10*time.Second, 5*time.Millisecond)
			if tc.delta {
				w, present, _ := p.HeldAt(chatRef.Key(), time.Now())
				assert.Equal(t, "", w, "a NACKed response is not held")
				assert.True(t, present)
			} else {
				// The probe counts its NACK once sent; the server records it when it reads it.
				require.Eventually(t, func() bool { return s.nackedAt(node) == drained[flavour] }, 10*time.Second, 5*time.Millisecond,
					"a NACK declares the version held")
				waitHeld(t, p, "worker-a=70,worker-b=30")
			}
			v := s.serve(map[string]uint32{"worker-a": 50, "worker-b": 50})
			waitHeld(t, p, "worker-a=50,worker-b=50")
			require.Eventually(t, func() bool { return s.acked(node) == v[flavour] }, 10*time.Second, 5*time.Millisecond)

			// A frozen probe reads and ACKs nothing until the freeze ends.
			frozen := time.Now()
			p.Freeze(500 * time.Millisecond)
			s.serve(map[string]uint32{"worker-a": 50, "worker-b": 0})
			if w, _, _ := p.HeldAt(chatRef.Key(), time.Now()); time.Since(frozen) < 400*time.Millisecond {
				assert.Equal(t, "worker-a=50,worker-b=50", w, "frozen")
			}
			waitHeld(t, p, "worker-a=50")
			h := p.History(chatRef.Key())
			assert.False(t, h[len(h)-1].At.Before(frozen.Add(500*time.Millisecond)), "held after the freeze")
			v = s.serve(map[string]uint32{"worker-a": 50, "worker-b": 50})
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
				if e.Kind == eventHeld && e.Present {
					held = append(held, e.Weights)
				}
			}
			want := []string{"worker-a=70,worker-b=30", "worker-a=70", "", "worker-a=50,worker-b=50", "worker-a=50", "worker-a=50,worker-b=50"}
			if !tc.delta {
				want = slices.Insert(want, 3, "worker-a=70,worker-b=30") // the NACKed version, sent again
			}
			assert.Equal(t, want, held)
			assert.Equal(t, eventConnected, kinds[0])
			assert.Equal(t, []string{eventDisconnected, eventConnected}, kinds[len(kinds)-2:])
			last := h[len(h)-1]
			domains := []string{"chat.prod.example.com"}
			if !tc.envoy {
				domains = []string{"chat.prod", "chat.prod.example.com"}
			}
			assert.Equal(t, heldEvent{At: last.At, Kind: eventConnected, Weights: "worker-a=50,worker-b=50", Present: true, Domains: domains,
				Endpoints: []string{"worker-a=worker-a.example:80", "worker-b=worker-b.example:80"}}, last)
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
			s.serve(map[string]uint32{"worker-a": 40, "worker-b": 60})
			waitHeld(t, p, "worker-a=40,worker-b=60")
			assert.Equal(t, int64(1), p.Stats().NACKs)

			// A route naming a cluster not served breaks the chain: the probe ACKs it (no
			// NACK) and holds the map not present, with the link that failed; serving the
			// cluster again mends it.
			ms := []fixtureMap{{ref: otherRef, weights: map[string]uint32{"worker-a": 1}},
				{ref: chatRef, weights: map[string]uint32{"worker-a": 40, "worker-b": 60}}}
			f := buildFixture(t, tc.envoy, ms...)
			delete(f.clusters, "prod/chat/worker-b")
			nacks := p.Stats().NACKs
			s.set(flavour, f)
			require.Eventually(t, func() bool {
				h := p.History(chatRef.Key())
				return h[len(h)-1].Broken == "cluster prod/chat/worker-b not held"
			}, 10*time.Second, 5*time.Millisecond)
			w, present, _ = p.HeldAt(chatRef.Key(), time.Now())
			assert.Equal(t, []any{"worker-a=40,worker-b=60", false}, []any{w, present}, "a broken chain holds no weights")
			assert.Equal(t, nacks, p.Stats().NACKs, "a broken chain is not NACKed")
			s.set(flavour, buildFixture(t, tc.envoy, ms...))
			waitHeld(t, p, "worker-a=40,worker-b=60")

			// A deleted map is no longer present. (go-control-plane may leave a named
			// state-of-the-world route configuration in place that no listener names any more,
			// which a client drops: either way the map is not present.)
			s.serve(nil)
			require.Eventually(t, func() bool {
				h := p.History(chatRef.Key())
				last := h[len(h)-1]
				return !last.Present && (last.Broken == "" || !tc.delta && !tc.envoy && last.Broken == "listener chat.prod not held")
			}, 10*time.Second, 5*time.Millisecond)
			if tc.delta || tc.envoy {
				h = p.History(chatRef.Key())
				assert.Equal(t, heldEvent{At: h[len(h)-1].At, Kind: eventHeld}, h[len(h)-1])
			}
		})
	}
}

// A probe without a client certificate is refused at the handshake and never connects; one
// that never ACKs reads responses, holds nothing, and the server counts no ACK from it.
func TestProbeRefusedAndNeverACK(t *testing.T) {
	s := startProbeServer(t, false)
	s.serve(map[string]uint32{"worker-a": 70, "worker-b": 30})
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
	s := startProbeServer(t, true)
	s.serve(map[string]uint32{"worker-a": 70, "worker-b": 30})
	p := startProbe(t, probeConfig{NodeID: "outsider", Delta: true, TLS: clientTLS(t, s.pki, true), Maps: []mapRef{chatRef}, Addr: func() string { return s.addr }})
	require.Eventually(t, func() bool { return p.Stats().Refused >= 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(0), p.Stats().ACKs)
	_, present, _ := p.HeldAt(chatRef.Key(), time.Now())
	assert.False(t, present)
}

// An address that is not up yet ("") is waited for.
func TestProbeWaitsForAnAddress(t *testing.T) {
	s := startProbeServer(t, false)
	s.serve(map[string]uint32{"worker-a": 1})
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

// The chain rules on hand-built resources, decoded as a probe decodes them: a map holds its
// weights only when listener, route configuration, virtual host and domains, clusters and
// endpoints are intact; else Broken names the first failing link and the map is not present.
func TestChainRules(t *testing.T) {
	chat := fixtureMap{ref: chatRef, weights: map[string]uint32{"worker-a": 70, "worker-b": 30}}
	endpoints := []string{"worker-a=worker-a.example:80", "worker-b=worker-b.example:80"}
	for _, tc := range []struct {
		name  string
		envoy bool
		// shared: the link broken is shared by every map (the Envoy listener)
		shared bool
		mutate func(t *testing.T, f *fixtureSet)
		// absent: nothing held for the map; else its weights and the broken link ("" intact).
		absent          bool
		weights, broken string
	}{
		{name: "envoy intact", envoy: true, weights: "worker-a=70,worker-b=30"},
		{name: "grpc intact", weights: "worker-a=70,worker-b=30"},
		{name: "envoy missing cluster", envoy: true, weights: "worker-a=70,worker-b=30", broken: "cluster prod/chat/worker-b not held",
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.clusters, "prod/chat/worker-b") }},
		{name: "grpc missing cluster", weights: "worker-a=70,worker-b=30", broken: "cluster prod/chat/worker-a not held",
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.clusters, "prod/chat/worker-a") }},
		{name: "envoy wrong endpoint", envoy: true, weights: "worker-a=70,worker-b=30",
			broken: "cluster prod/chat/worker-a endpoint worker-b.example:80, not worker-a.example:80",
			mutate: func(t *testing.T, f *fixtureSet) {
				f.clusters["prod/chat/worker-a"] = testCluster(t, "prod/chat/worker-a", "worker-b.example:80")
			}},
		{name: "grpc wrong port", weights: "worker-a=70,worker-b=30",
			broken: "cluster prod/chat/worker-b endpoint worker-b.example:443, not worker-b.example:80",
			mutate: func(t *testing.T, f *fixtureSet) {
				f.clusters["prod/chat/worker-b"] = testCluster(t, "prod/chat/worker-b", "worker-b.example:443")
			}},
		{name: "grpc two endpoints", weights: "worker-a=70,worker-b=30", broken: "cluster prod/chat/worker-a has 2 endpoints, not 1",
			mutate: func(t *testing.T, f *fixtureSet) {
				f.clusters["prod/chat/worker-a"] = testCluster(t, "prod/chat/worker-a", "worker-a.example:80", "worker-a.example:80")
			}},
		{name: "envoy missing listener", envoy: true, shared: true, weights: "worker-a=70,worker-b=30", broken: "listener trafficmap-http not held",
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.listeners, envoyListener) }},
		{name: "grpc missing listener", weights: "worker-a=70,worker-b=30", broken: "listener chat.prod not held",
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.listeners, "chat.prod") }},
		{name: "envoy listener names another route configuration", envoy: true, shared: true, weights: "worker-a=70,worker-b=30",
			broken: `listener trafficmap-http names route configuration "routes", not trafficmap-routes`,
			mutate: func(t *testing.T, f *fixtureSet) { f.listeners[envoyListener] = envoyListenerNaming(t, "routes") }},
		{name: "grpc listener names another map's route configuration", weights: "worker-a=70,worker-b=30",
			broken: `listener chat.prod names route configuration "prod/other", not prod/chat`,
			mutate: func(t *testing.T, f *fixtureSet) {
				f.listeners["chat.prod"] = grpcListenerNaming(t, "chat.prod", "prod/other")
			}},
		{name: "grpc missing route configuration", broken: "route configuration prod/chat not held",
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.routes, "prod/chat") }},
		{name: "grpc virtual host misnamed", broken: "route configuration prod/chat has no virtual host prod/chat",
			mutate: func(_ *testing.T, f *fixtureSet) { f.routes["prod/chat"].VirtualHosts[0].Name = "chat" }},
		{name: "envoy wrong domain", envoy: true, weights: "worker-a=70,worker-b=30",
			broken: "virtual host prod/chat domains [other.prod.example.com] hold neither chat.prod.example.com nor a name under it",
			mutate: func(_ *testing.T, f *fixtureSet) {
				f.routes[envoyRouteConfig].VirtualHosts[1].Domains = []string{"other.prod.example.com"}
			}},
		{name: "envoy no domain", envoy: true, weights: "worker-a=70,worker-b=30", broken: "virtual host prod/chat has no domain",
			mutate: func(_ *testing.T, f *fixtureSet) { f.routes[envoyRouteConfig].VirtualHosts[1].Domains = nil }},
		{name: "envoy a hostname under the template's", envoy: true, weights: "worker-a=70,worker-b=30",
			mutate: func(_ *testing.T, f *fixtureSet) {
				f.routes[envoyRouteConfig].VirtualHosts[1].Domains = []string{"h-1.chat.prod.example.com"}
			}},
		{name: "grpc wrong domain", weights: "worker-a=70,worker-b=30",
			broken: "virtual host prod/chat domains [chat.prod.example.com] lack chat.prod",
			mutate: func(_ *testing.T, f *fixtureSet) {
				f.routes["prod/chat"].VirtualHosts[0].Domains = []string{"chat.prod.example.com"}
			}},
		{name: "envoy map not served", envoy: true, absent: true,
			mutate: func(_ *testing.T, f *fixtureSet) {
				rc := f.routes[envoyRouteConfig]
				rc.VirtualHosts = rc.VirtualHosts[:1]
			}},
		{name: "grpc map not served", absent: true,
			mutate: func(_ *testing.T, f *fixtureSet) { delete(f.routes, "prod/chat"); delete(f.listeners, "chat.prod") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := buildFixture(t, tc.envoy, fixtureMap{ref: otherRef, weights: map[string]uint32{"worker-a": 1}}, chat)
			if tc.mutate != nil {
				tc.mutate(t, &f)
			}
			c := chainOf(t, f)
			held := c.held(tc.envoy, map[string]mapExpect{chatRef.Key(): newMapExpect(chatRef), otherRef.Key(): newMapExpect(otherRef)})
			h, ok := held[chatRef.Key()]
			if tc.absent {
				assert.False(t, ok, "nothing held: %+v", h)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.weights, h.weights)
			assert.Equal(t, tc.broken, h.broken)
			assert.Equal(t, tc.broken == "", h.present)
			if tc.broken == "" {
				assert.Equal(t, endpoints, h.endpoints)
			}
			assert.Equal(t, !tc.shared, held[otherRef.Key()].present, "the other map: %+v", held[otherRef.Key()])
		})
	}
}

// A drained map (no positive weight: the fixed 503) holds "" when its listener, route
// configuration and virtual host are intact; it needs no cluster.
func TestChainDrainedMap(t *testing.T) {
	for _, envoy := range []bool{true, false} {
		f := buildFixture(t, envoy, fixtureMap{ref: chatRef, weights: map[string]uint32{"worker-a": 0}})
		f.clusters = map[string]*clusterv3.Cluster{}
		c := chainOf(t, f)
		h := c.held(envoy, map[string]mapExpect{chatRef.Key(): newMapExpect(chatRef)})[chatRef.Key()]
		assert.Equal(t, heldState{present: true, domains: h.domains}, h, "envoy %v", envoy)
		assert.NotEmpty(t, h.domains)
	}
}

// The contract's names and the endpoint addresses.
func TestNames(t *testing.T) {
	assert.Equal(t, "prod/chat", virtualHostName("prod", "chat"))
	assert.Equal(t, "chat.prod", grpcListenerName("chat", "prod"))
	assert.Equal(t, "prod/chat", grpcRouteConfigName("prod", "chat"))
	assert.Equal(t, "prod/chat/worker-a", xdsClusterName("prod", "chat", "worker-a"))
	for raw, want := range map[string]string{
		"https://A.example.com":    "a.example.com:443",
		"http://a.example.com":     "a.example.com:80",
		"http://a.example.com:81/": "a.example.com:81",
		"HTTPS://a.example.com":    "a.example.com:443",
	} {
		got, err := endpointAddress(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	for _, raw := range []string{"ftp://a.example.com", "https://", "http://a:99999"} {
		_, err := endpointAddress(raw)
		assert.Error(t, err, raw)
	}
	// templateHost is what the publisher's --host-template hostTmpl renders.
	tmpl := template.Must(template.New("host").Parse(hostTmpl))
	var b strings.Builder
	require.NoError(t, tmpl.Execute(&b, map[string]string{"Service": "svc-0001", "Namespace": "chaos"}))
	assert.Equal(t, b.String(), templateHost("svc-0001", "chaos"))
}

// chainOf decodes every resource of the fixture into a chain, as a probe would hold them.
func chainOf(t *testing.T, f fixtureSet) chain {
	t.Helper()
	c := newChain()
	for typ, res := range f.resources() {
		anys := make([]*anypb.Any, 0, len(res))
		for _, r := range res {
			a, err := anypb.New(r.(proto.Message))
			require.NoError(t, err)
			anys = append(anys, a)
		}
		d, err := decodeResources(typ, anys)
		require.NoError(t, err)
		c.replace(d)
	}
	return c
}
