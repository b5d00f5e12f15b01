package integration

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/publish"
)

// cutProxy forwards TCP connections from a loopback port of its own to a server. cut
// closes the server side of every connection and forwards nothing more, while the client
// side stays open and silent: the server sees its client go away, the client (without a
// keepalive of its own) sees a connection that is merely quiet, as with a frozen process or
// a partition, and keeps routing by what it has. heal closes the client side too (the
// client reconnects through the proxy) and forwards again.
type cutProxy struct {
	lis net.Listener

	mu      sync.Mutex
	target  string // see retarget
	cutOff  bool
	clients []net.Conn
	servers []net.Conn
}

func startCutProxy(t *testing.T, target net.Addr) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{lis: lis, target: target.String()}
	t.Cleanup(func() { _ = lis.Close(); p.closeAll() })
	go p.accept()
	return p
}

// addr is where clients connect.
func (p *cutProxy) addr() net.Addr { return p.lis.Addr() }

func (p *cutProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.clients = append(p.clients, c)
		cut, target := p.cutOff, p.target
		p.mu.Unlock()
		if cut {
			go func() { _, _ = io.Copy(io.Discard, c) }() // held open, never forwarded
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.servers = append(p.servers, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() {
			_, _ = io.Copy(c, s)
			p.mu.Lock()
			cut := p.cutOff
			p.mu.Unlock()
			if cut {
				_, _ = io.Copy(io.Discard, c) // the client side stays open and silent
				return
			}
			_ = c.Close()
		}()
	}
}

// cut closes the server side of every connection; the client side stays open, silent.
func (p *cutProxy) cut() {
	p.mu.Lock()
	p.cutOff = true
	servers := p.servers
	p.servers = nil
	p.mu.Unlock()
	for _, s := range servers {
		_ = s.Close()
	}
}

// retarget forwards the connections accepted from now on to target.
func (p *cutProxy) retarget(target net.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target.String()
}

// heal closes the client side of every connection and forwards new ones again.
func (p *cutProxy) heal() {
	p.mu.Lock()
	p.cutOff = false
	clients := p.clients
	p.clients = nil
	p.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range append(p.clients, p.servers...) {
		_ = c.Close()
	}
}

// departedGauge is trafficmap_publisher_xds_departed_clients{grace=...} in reg.
func departedGauge(t *testing.T, reg *prometheus.Registry, grace string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "trafficmap_publisher_xds_departed_clients" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grace" && l.GetValue() == grace {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// departedDrain is the D12 scenario on a publisher (or follower) pub serving a real
// grpc-go client through a proxy: the client's transport to the server is cut, then the
// map is drained. The client still routes by the undrained weights; the map stays False,
// naming the departed client, until --xds-departed-grace has passed, then goes True naming
// it. want is what the False condition's message names while the grace holds it. Healed,
// the client reconnects, ACKs and counts as any client.
func departedDrain(t *testing.T, f *fixture, pub *runningPublisher, reg *prometheus.Registry, grace time.Duration, want string) {
	t.Helper()
	proxy := startCutProxy(t, pub.xdsAddr)
	client := xdsClient(t, proxy.addr(), "grpc-departed", service+"."+f.ns)
	_, err := call(client)
	require.NoError(t, err)
	f.waitPublishedWith("weights worker-a=1, worker-b=1")
	require.Positive(t, spread(t, client, 40)["worker-a"], "worker-a takes traffic before the drain")

	departed := time.Now()
	proxy.cut()
	require.Eventually(t, func() bool { return len(pub.pub.XDSClients()) == 0 }, waitTimeout, tick, "the server saw the client go")
	w := f.watchPublished()
	f.drain(seedDrain)
	f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), want)
	got := spread(t, client, 40)
	assert.Positive(t, got["worker-a"], "the departed client still routes by the undrained weights: %v", got)
	assert.Equal(t, 1.0, departedGauge(t, reg, "within"))

	tm := f.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
	assert.GreaterOrEqual(t, time.Since(departed), grace, "not True within the grace")
	msg := published(tm).Message
	assert.Contains(t, msg, "not counted, past --xds-departed-grace", "True names the departed client")
	assert.Contains(t, msg, `node "grpc-departed"`)
	requireFalseBeforeTrue(t, w, tm.Generation)
	assert.Equal(t, 1.0, departedGauge(t, reg, "past"), "past the grace it is counted")

	proxy.heal() // it comes back, ACKs the drain and counts as any client
	require.Eventually(t, func() bool { return spread(t, client, 20)["worker-a"] == 0 }, waitTimeout, tick, "the client has the drain")
	assert.Equal(t, 0.0, departedGauge(t, reg, "past"), "the returning client replaced what was remembered of it")
	f.setAnnotation(service, "ome.io/traffic-drain", "", true)
	tm = f.waitPublishedWith("weights worker-a=1, worker-b=1")
	assert.NotContains(t, published(tm).Message, "departed")
}

func departedMap(t *testing.T, f *fixture) {
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1, Healthy: true},
		{Cluster: "worker-b", Endpoint: localBackend(t, "worker-b"), Weight: 1, Healthy: true},
	})
}

// D12 (issue 44) on one publisher: a real grpc-go client whose transport is cut during a
// drain holds the map False for --xds-departed-grace while it routes by the undrained
// weights; then the map goes True naming it (and the metric counts it).
func TestXDSDepartedClientHoldsTheDrain(t *testing.T) {
	const grace = 4 * time.Second
	f := newFixture(t)
	departedMap(t, f)
	reg := prometheus.NewRegistry()
	pub := f.startPublisher(func(c *publish.Config) {
		c.Sinks, c.XDSAddress, c.RequireXDSAck, c.Registerer = []string{publish.SinkXDS}, "127.0.0.1:0", true, reg
		c.XDSDepartedGrace = grace
	})
	departedDrain(t, f, pub, reg, grace, `departed xds client stream(s) that left without confirming these weights and may still route by older ones (--xds-departed-grace 4s): node "grpc-departed" stream sotw-`)
}

// D12 on a follower of three replicas: the departed client of follower b holds the map False
// on the leader too (b's report lists it as waiting) until b's grace ends; then the leader's
// True names it (b's report lists it as departed past the grace).
func TestHAXDSDepartedClientOnAFollowerHoldsTheDrain(t *testing.T) {
	const grace = 4 * time.Second
	f := newFixture(t)
	departedMap(t, f)
	withGrace := func(c *publish.Config) { c.XDSDepartedGrace = grace }
	startPublisherWith(t, f.publisherConfig(haReplica(f, "a", prometheus.NewRegistry()), withGrace), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished()
	require.Equal(t, "a", leaseHolder(t, f.ns), "a was alone")
	regB := prometheus.NewRegistry()
	b := startPublisherWith(t, f.publisherConfig(haReplica(f, "b", regB), withGrace), restCfg, zaptest.NewLogger(t).Named("b"))
	startPublisherWith(t, f.publisherConfig(haReplica(f, "c", prometheus.NewRegistry()), withGrace), restCfg, zaptest.NewLogger(t).Named("c"))
	departedDrain(t, f, b, regB, grace, `replica b: 0/1 relevant clients ACKed, waiting for departed "grpc-departed"/sotw-`)
}

// A client that leaves one replica during a drain and comes back to another (the chaos
// run's stuck maps, issue 46): the replica it left remembers its departed stream, but the
// one it came back to lists it as arrived in its report, so the departed stream holds
// nothing and the map goes True once the client ACKed the drain at its new replica, long
// before --xds-departed-grace. Two ways round: it leaves the leader for a follower (the
// leader learns of the arrival from the follower's report), and it leaves a follower for the
// leader (the follower's report stops holding it).
func TestHAXDSDepartedClientBackAtAnotherReplica(t *testing.T) {
	const grace = 10 * time.Minute
	for _, tc := range []struct{ name, from, to string }{
		{"leader to follower", "a", "b"},
		{"follower to leader", "b", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			departedMap(t, f)
			withGrace := func(c *publish.Config) { c.XDSDepartedGrace = grace }
			pubs := map[string]*runningPublisher{}
			pubs["a"] = startPublisherWith(t, f.publisherConfig(haReplica(f, "a", prometheus.NewRegistry()), withGrace), restCfg, zaptest.NewLogger(t).Named("a"))
			f.waitPublished()
			require.Equal(t, "a", leaseHolder(t, f.ns), "a was alone")
			pubs["b"] = startPublisherWith(t, f.publisherConfig(haReplica(f, "b", prometheus.NewRegistry()), withGrace), restCfg, zaptest.NewLogger(t).Named("b"))
			from, to := pubs[tc.from], pubs[tc.to]

			proxy := startCutProxy(t, from.xdsAddr)
			client := xdsClient(t, proxy.addr(), "grpc-moving", service+"."+f.ns)
			_, err := call(client)
			require.NoError(t, err)
			f.waitPublishedWith("weights worker-a=1, worker-b=1")

			proxy.cut()
			require.Eventually(t, func() bool { return len(from.pub.XDSClients()) == 0 }, waitTimeout, tick, "the replica saw the client go")
			w := f.watchPublished()
			f.drain(seedDrain)
			f.waitCondition(metav1.ConditionFalse, string(model.ReasonPublishing), `"grpc-moving"`)

			proxy.retarget(to.xdsAddr)
			proxy.heal() // it comes back, to the other replica
			require.Eventually(t, func() bool { return spread(t, client, 20)["worker-a"] == 0 }, waitTimeout, tick, "the client has the drain")
			tm := f.waitPublishedWith("weights worker-a=0 (drained by maintenance-a), worker-b=1")
			assert.NotContains(t, published(tm).Message, "departed", "nothing waits for the departed stream")
			requireFalseBeforeTrue(t, w, tm.Generation)
			require.Len(t, to.pub.XDSClients(), 1, "it is connected to %s", tc.to)
		})
	}
}
