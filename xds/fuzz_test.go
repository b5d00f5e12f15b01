package xds

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/trafficmap/publisher/weights"
)

// The xDS request path's fuzz targets: the fuzz bytes are a short sequence of discovery
// requests (type URL, version, nonce, resource names, error detail, node id) sent on one
// stream to the real server (its interceptors, go-control-plane's stream loop, the
// tracker's callbacks, the cache) over an in-process connection. Invariants: no handler
// panics (a recovered panic counts and fails the target), the stream ends with OK or a
// refusal (InvalidArgument, ResourceExhausted), only served types are answered, a
// subscription never holds more than the limit, and once the stream ends the server holds
// nothing of it (no tracker stream, no watch, no parked NACK).

// fuzzMaxNames is the fuzzed server's --xds-max-names, small so that limits are reached.
const fuzzMaxNames = 8

// fuzzServer is one server per fuzzing process, serving both flavours, over bufconn.
type fuzzServer struct {
	s   *Server
	reg *prometheus.Registry
	ads discoveryv3.AggregatedDiscoveryServiceClient
}

var (
	fuzzOnce sync.Once
	fuzzSrv  *fuzzServer
	fuzzErr  error
	// fuzzLargest is the most names any stream's subscription of a type held.
	fuzzLargest atomic.Int64
)

func startFuzzServer() (*fuzzServer, error) {
	fuzzOnce.Do(func() {
		reg := prometheus.NewRegistry()
		var s *Server
		s = NewServer(ServerConfig{Log: zap.NewNop(), Registerer: reg, Limits: Limits{MaxNames: fuzzMaxNames},
			OnClientChange: func() { // after every change: no subscription beyond the limit
				for _, c := range s.Tracker().Clients() {
					for _, sub := range c.Subscribed {
						fuzzLargest.Store(max(fuzzLargest.Load(), int64(len(sub.Names))))
					}
				}
			}})
		res, err := weights.Compute(weights.Input{Entries: []weights.Entry{
			{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 3},
			{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1},
		}})
		if err != nil {
			fuzzErr = err
			return
		}
		svcs := []Service{{Namespace: "prod", Name: "chat", Service: "chat", Hostnames: []string{"chat.example.com"}, Result: res}}
		envoy, err := TranslateEnvoy(DefaultEnvoyOptions, svcs)
		if err == nil {
			_, err = s.SetResources(context.Background(), FlavourEnvoy, envoy)
		}
		var grpcRes Resources
		if err == nil {
			grpcRes, err = TranslateGRPC(svcs)
		}
		if err == nil {
			_, err = s.SetResources(context.Background(), FlavourGRPC, grpcRes)
		}
		if err != nil {
			fuzzErr = err
			return
		}
		lis := bufconn.Listen(1 << 20)
		go func() { _ = s.Serve(context.Background(), lis) }() // serves until the process ends
		conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzSrv = &fuzzServer{s: s, reg: reg, ads: discoveryv3.NewAggregatedDiscoveryServiceClient(conn)}
	})
	return fuzzSrv, fuzzErr
}

// fuzzBytes reads the fuzz input; past its end every read is zero.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// str is a string of up to max bytes of the input, its length read first, made valid
// UTF-8: a proto3 string field is UTF-8, and grpc-go's client refuses to send one that is
// not (the server's decoding refuses such a message before any handler sees it).
func (f *fuzzBytes) str(max int) string {
	n := min(int(f.byte())%(max+1), len(f.b))
	s := strings.ToValidUTF8(string(f.b[:n]), "\uFFFD")
	f.b = f.b[n:]
	return s
}

// typeURL is one of the served, known, missing or made-up type URLs (the last ones read
// from the input).
func (f *fuzzBytes) typeURL() string {
	switch c := f.byte() % 9; c {
	case 0, 1, 2, 3:
		return []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}[c]
	case 4:
		return ""
	case 5:
		return "type.googleapis.com/evil" // issue 43's D7 crasher
	case 6:
		return "type.googleapis.com/" + f.str(24)
	default:
		return f.str(32)
	}
}

// names are up to fuzzMaxNames+3 resource names: served ones, "*", or read from the input.
func (f *fuzzBytes) names() []string {
	n := int(f.byte()) % (fuzzMaxNames + 4)
	out := make([]string, 0, n)
	for range n {
		switch c := f.byte() % 8; c {
		case 0, 1, 2, 3, 4:
			out = append(out, []string{"*", "chat.example.com", "prod/chat", "prod/chat/worker-a", DefaultEnvoyOptions.RouteConfigName}[c])
		case 5:
			out = append(out, strings.Repeat("n", 1100)) // longer than a name may be
		default:
			out = append(out, f.str(16))
		}
	}
	return out
}

// version is "", a served-looking one, one read from the input, or one too long.
func (f *fuzzBytes) version() string {
	switch f.byte() % 4 {
	case 0:
		return ""
	case 1:
		return "v1"
	case 2:
		return f.str(16)
	default:
		return strings.Repeat("v", 1100)
	}
}

// nonce is "" or a small number (the server numbers its responses).
func (f *fuzzBytes) nonce() string {
	if c := f.byte() % 6; c > 0 {
		return strconv.Itoa(int(c))
	}
	return ""
}

func (f *fuzzBytes) errorDetail() *rpcstatus.Status {
	if f.byte()%4 != 0 {
		return nil
	}
	return &rpcstatus.Status{Message: f.str(64)}
}

func (f *fuzzBytes) node() *corev3.Node {
	agent := "envoy"
	if f.byte()%2 == 1 {
		agent = "gRPC Go"
	}
	return &corev3.Node{Id: f.str(32), UserAgentName: agent}
}

// maxFuzzRequests bounds the requests of one input.
const maxFuzzRequests = 6

func sotwRequests(data []byte) []*discoveryv3.DiscoveryRequest {
	f := &fuzzBytes{b: data}
	node := f.node()
	out := make([]*discoveryv3.DiscoveryRequest, 1+int(f.byte())%maxFuzzRequests)
	for i := range out {
		out[i] = &discoveryv3.DiscoveryRequest{TypeUrl: f.typeURL(), VersionInfo: f.version(), ResponseNonce: f.nonce(),
			ResourceNames: f.names(), ErrorDetail: f.errorDetail()}
		if i == 0 || f.byte()%8 == 0 {
			out[i].Node = node
		}
	}
	return out
}

func deltaRequests(data []byte) []*discoveryv3.DeltaDiscoveryRequest {
	f := &fuzzBytes{b: data}
	node := f.node()
	out := make([]*discoveryv3.DeltaDiscoveryRequest, 1+int(f.byte())%maxFuzzRequests)
	for i := range out {
		r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: f.typeURL(), ResponseNonce: f.nonce(),
			ResourceNamesSubscribe: f.names(), ResourceNamesUnsubscribe: f.names(), ErrorDetail: f.errorDetail()}
		if n := f.byte() % 4; n > 0 {
			r.InitialResourceVersions = map[string]string{}
			for range n {
				r.InitialResourceVersions[f.str(12)] = f.version()
			}
		}
		if i == 0 || f.byte()%8 == 0 {
			r.Node = node
		}
		out[i] = r
	}
	return out
}

// fuzzStream is one stream's responses' type URLs and its end.
type fuzzStream struct {
	types []string
	err   error
}

// checkFuzzStream checks the invariants of a stream that ended as st on fs.
func checkFuzzStream(t *testing.T, fs *fuzzServer, st fuzzStream) {
	t.Helper()
	if n := testutil.ToFloat64(fs.s.metrics.panics); n != 0 {
		t.Fatalf("a handler panicked (%v recovered panics); the stream ended with %v", n, st.err)
	}
	if n := fuzzLargest.Load(); n > fuzzMaxNames {
		t.Fatalf("a subscription held %d names, the limit is %d", n, fuzzMaxNames)
	}
	switch code := status.Code(st.err); {
	case st.err == nil || errors.Is(st.err, io.EOF):
	case code == codes.InvalidArgument || code == codes.ResourceExhausted:
	default:
		t.Fatalf("the stream ended with %v: neither OK nor a refusal", st.err)
	}
	for _, typ := range st.types {
		if !isServedType(typ) {
			t.Fatalf("a response of type %q: the server serves %v", typ, servedTypes)
		}
	}
	fs.s.tracker.mu.Lock()
	streams := len(fs.s.tracker.streams)
	fs.s.tracker.mu.Unlock()
	fs.s.cache.mu.Lock()
	parked := len(fs.s.cache.parked)
	fs.s.cache.mu.Unlock()
	if streams != 0 || parked != 0 {
		t.Fatalf("after the stream ended the server holds %d tracker streams and %d parked watches", streams, parked)
	}
	for key, c := range fs.s.cache.caches {
		c.mu.Lock()
		w, n := len(c.watches.wildcard), len(c.watches.named)
		c.mu.Unlock()
		if w != 0 || n != 0 {
			t.Fatalf("after the stream ended the %s cache of %s holds %d wildcard watches and watches of %d names", key.hash, typeLabel(key.typeURL), w, n)
		}
	}
}

func isServedType(typ string) bool {
	for _, s := range servedTypes {
		if s == typ {
			return true
		}
	}
	return false
}

// fuzzDeadline bounds one stream: it ends once its requests are read (the client closes
// its side), so reaching the deadline is a finding (a stream the server never ends).
const fuzzDeadline = 10 * time.Second

// runSotW sends reqs on one state-of-the-world ADS stream, closes its side and reads the
// stream to its end.
func runSotW(t *testing.T, fs *fuzzServer, reqs []*discoveryv3.DiscoveryRequest) fuzzStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	stream, err := fs.ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if stream.Send(r) != nil {
			break // the server ended the stream; Recv says how
		}
	}
	_ = stream.CloseSend()
	var out fuzzStream
	for {
		resp, err := stream.Recv()
		if err != nil {
			out.err = err
			return out
		}
		out.types = append(out.types, resp.GetTypeUrl())
	}
}

// runDelta is runSotW for a delta ADS stream.
func runDelta(t *testing.T, fs *fuzzServer, reqs []*discoveryv3.DeltaDiscoveryRequest) fuzzStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	stream, err := fs.ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if stream.Send(r) != nil {
			break
		}
	}
	_ = stream.CloseSend()
	var out fuzzStream
	for {
		resp, err := stream.Recv()
		if err != nil {
			out.err = err
			return out
		}
		out.types = append(out.types, resp.GetTypeUrl())
	}
}

// fuzzSeeds are inputs for both targets: the D7 crasher (node "evil", one request of type
// "type.googleapis.com/evil" with version "v1" and no nonce), an Envoy's first requests,
// a gRPC client's, a NACK, a name too long, and too many names.
var fuzzSeeds = [][]byte{
	{0, 4, 'e', 'v', 'i', 'l', 0, 5, 1, 0, 0, 1},
	{0, 7, 'e', 'n', 'v', 'o', 'y', '-', '1', 1, 2, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1, 4, 1, 4, 1},
	{1, 8, 'g', 'r', 'p', 'c', '-', 'o', 'n', 'e', 2, 0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 2, 1, 0, 1, 2, 1},
	{0, 1, 'n', 0, 2, 1, 1, 1, 0, 3, 0, 4, 'b', 'a', 'd', '!'},
	{0, 1, 'n', 0, 2, 0, 0, 11, 0, 1, 2, 3, 4, 6, 1, 'x', 6, 1, 'y', 6, 1, 'z', 5, 6, 1, 'w'},
	// Ten served-looking and made-up names at once (beyond the limit of 8).
	{0, 1, 'n', 0, 2, 0, 0, 10, 1, 2, 3, 4, 6, 1, 'a', 6, 1, 'b', 6, 1, 'c', 6, 1, 'd', 6, 1, 'e', 6, 1, 'f'},
	// Delta: two requests of six names each (the second beyond the limit).
	{0, 1, 'n', 1, 2, 0, 6, 6, 1, 'a', 6, 1, 'b', 6, 1, 'c', 6, 1, 'd', 6, 1, 'e', 6, 1, 'f', 0, 0,
		2, 0, 6, 6, 1, 'g', 6, 1, 'h', 6, 1, 'i', 6, 1, 'j', 6, 1, 'k', 6, 1, 'l', 0, 0, 1},
}

// FuzzSotWRequests fuzzes a sequence of state-of-the-world requests on one ADS stream.
func FuzzSotWRequests(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, err := startFuzzServer()
		if err != nil {
			t.Fatal(err)
		}
		checkFuzzStream(t, fs, runSotW(t, fs, sotwRequests(data)))
	})
}

// FuzzDeltaRequests fuzzes a sequence of delta requests on one ADS stream.
func FuzzDeltaRequests(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, err := startFuzzServer()
		if err != nil {
			t.Fatal(err)
		}
		checkFuzzStream(t, fs, runDelta(t, fs, deltaRequests(data)))
	})
}

// The seeds drive what they say: the crasher is refused, an Envoy's and a gRPC client's
// first requests are answered.
func TestFuzzSeeds(t *testing.T) {
	fs, err := startFuzzServer()
	if err != nil {
		t.Fatal(err)
	}
	crash := sotwRequests(fuzzSeeds[0])
	if len(crash) != 1 || crash[0].GetTypeUrl() != "type.googleapis.com/evil" || crash[0].GetVersionInfo() != "v1" ||
		crash[0].GetResponseNonce() != "" || crash[0].GetNode().GetId() != "evil" {
		t.Fatalf("seed 0 is not the crasher: %v", crash)
	}
	if st := runSotW(t, fs, crash); status.Code(st.err) != codes.InvalidArgument {
		t.Fatalf("the crasher ended with %v", st.err)
	}
	for _, seed := range fuzzSeeds[1:3] {
		if typ, err := firstSotW(fs, sotwRequests(seed)); typ == "" {
			t.Fatalf("seed %v: no response (%v)", seed, err)
		}
		if typ, err := firstDelta(fs, deltaRequests(seed)); typ == "" {
			t.Fatalf("delta seed %v: no response (%v)", seed, err)
		}
	}
}

// firstSotW sends reqs on one state-of-the-world ADS stream and returns the type URL of the
// first response, read before the client closes its side (a server may end a stream whose
// client closed its side before it answered).
func firstSotW(fs *fuzzServer, reqs []*discoveryv3.DiscoveryRequest) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	stream, err := fs.ads.StreamAggregatedResources(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			break // the server ended the stream; Recv says how
		}
	}
	resp, err := stream.Recv()
	return resp.GetTypeUrl(), err
}

// firstDelta is firstSotW for a delta ADS stream.
func firstDelta(fs *fuzzServer, reqs []*discoveryv3.DeltaDiscoveryRequest) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	stream, err := fs.ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			break
		}
	}
	resp, err := stream.Recv()
	return resp.GetTypeUrl(), err
}
