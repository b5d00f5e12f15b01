package xds

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// BenchmarkRebuildOneDrain is the sink's rebuild after one drain, with n maps of 8
// clusters served to both flavours (one client of each connected, so both are built):
// planning, name exclusivity, translation, both flavours set on the server and recorded.
func BenchmarkRebuildOneDrain(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("maps=%d", n), func(b *testing.B) { benchmarkRebuild(b, n) })
	}
}

func benchmarkRebuild(b *testing.B, n int) {
	plans := &memPlans{plans: map[string]*model.Plan{}}
	inputs := make([]weights.Input, n)
	plan := func(i int, drained bool) *model.Plan {
		in := inputs[i]
		if drained {
			in.Drains = []weights.Drain{{ID: "m", Cluster: "worker-0", Reason: "r"}}
		}
		res, err := weights.Compute(in)
		if err != nil {
			b.Fatal(err)
		}
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i)
		return &model.Plan{Namespace: ns, Name: name, Service: name, Hostnames: []string{name + "." + ns + ".example.com"}, Result: res}
	}
	for i := range inputs {
		for j := range 8 {
			inputs[i].Entries = append(inputs[i].Entries, weights.Entry{Cluster: fmt.Sprintf("worker-%d", j),
				Endpoint: fmt.Sprintf("https://svc-%d.worker-%d.example.com", i, j), Weight: int64(j + 1)})
		}
		plans.set(plan(i, false))
	}
	s, err := NewSink(SinkConfig{Address: "127.0.0.1:0", RequireAck: true}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	plans.serve(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.server.Serve(ctx, s.listener) }()
	b.Cleanup(func() { cancel(); <-done })
	if err := s.loop.rebuild(ctx); err != nil {
		b.Fatal(err)
	}
	consume(b, ctx, s.listener.Addr(), "envoy")
	consume(b, ctx, s.listener.Addr(), "gRPC Go")
	for !consumedAll(s) {
		time.Sleep(time.Millisecond) // a benchmark's setup, not a test
	}
	if err := s.loop.rebuild(ctx); err != nil { // builds both flavours
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % n
		s.Serve(plan(k, i/n%2 == 0)) // drain worker-0 of one map, undrain it on the next lap
		if err := s.loop.rebuild(ctx); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "MiB-live")
}

// consume opens an ADS stream of the user agent's flavour that subscribes to one listener
// name nobody serves and to every endpoint (a type the publisher never answers), so the
// flavour is consumed, every map of it is demanded (built), and the stream is sent nothing.
func consume(b testing.TB, ctx context.Context, addr net.Addr, userAgent string) {
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	node := &corev3.Node{Id: userAgent, UserAgentName: userAgent}
	for typ, names := range map[string][]string{resource.ListenerType: {"nobody"}, resource.EndpointType: {"*"}} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names}); err != nil {
			b.Fatal(err)
		}
	}
}

// consumedAll reports whether the streams consume opened have made themselves known to s:
// both flavours consumed and every gRPC map demanded.
func consumedAll(s *Sink) bool {
	tracker := s.server.Tracker()
	_, all := Demanded(tracker.Clients(), FlavourGRPC)
	return tracker.Consumed(FlavourEnvoy) && tracker.Consumed(FlavourGRPC) && all
}

// BenchmarkEnvoyRetainedHeap is the heap the Envoy flavour keeps for n maps of 8 https
// clusters once a Translator has built it and a Server serves it: before any client is
// sent it (sent=false), and once every resource has been encoded for a client (sent=true,
// as a wildcard Envoy client makes happen). Run it with -benchtime=1x.
func BenchmarkEnvoyRetainedHeap(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, sent := range []bool{false, true} {
			b.Run(fmt.Sprintf("maps=%d/sent=%t", n, sent), func(b *testing.B) { benchmarkEnvoyHeap(b, n, sent) })
		}
	}
}

func benchmarkEnvoyHeap(b *testing.B, n int, sent bool) {
	services := benchServices(b, n)
	ctx := context.Background()
	var retained uint64
	for b.Loop() {
		before := liveHeap()
		tr := NewTranslator(DefaultEnvoyOptions)
		srv := NewServer(ServerConfig{})
		tr.Update(services, nil)
		res, err := tr.Resources(FlavourEnvoy)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.SetResources(ctx, FlavourEnvoy, res); err != nil {
			b.Fatal(err)
		}
		res = Resources{}
		if sent {
			for _, typ := range servedTypes {
				c := srv.cache.cache(string(FlavourEnvoy), typ)
				c.mu.Lock()
				c.encodedAll()
				c.mu.Unlock()
			}
		}
		retained = liveHeap() - before
		runtime.KeepAlive(tr)
		runtime.KeepAlive(srv)
		runtime.KeepAlive(res)
	}
	b.ReportMetric(float64(retained)/(1<<20), "MiB-retained")
}

// benchServices are n sealed services of 8 https clusters each, with a hostname.
func benchServices(b *testing.B, n int) []Service {
	services := make([]Service, n)
	for i := range services {
		var in weights.Input
		for j := range 8 {
			in.Entries = append(in.Entries, weights.Entry{Cluster: fmt.Sprintf("worker-%d", j),
				Endpoint: fmt.Sprintf("https://svc-%d.worker-%d.example.com", i, j), Weight: int64(j + 1)})
		}
		res, err := weights.Compute(in)
		if err != nil {
			b.Fatal(err)
		}
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i)
		services[i] = Service{Namespace: ns, Name: name, Service: name, Hostnames: []string{name + "." + ns + ".example.com"}, Result: res}.Sealed()
	}
	return services
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
