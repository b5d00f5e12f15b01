package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// apiProxy forwards TCP connections to the API server until cut: then it closes them and
// every new one, until restored.
type apiProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func startAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &apiProxy{lis: lis, target: target}
	t.Cleanup(func() { _ = lis.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *apiProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// setCut cuts (closing every forwarded connection) or restores the proxy.
func (p *apiProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	conns := p.conns
	if cut {
		p.conns = nil
	}
	p.mu.Unlock()
	if cut {
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// Issue 25, item 2: a replica that loses the API server cannot renew its report, so the
// leader stops counting its clients once the report expires; it must not go on serving
// them. Replica b reaches the API server through a proxy; once the proxy is cut, b fences
// itself: its client's stream ends (Unavailable), and a new stream is refused, so clients
// move to a replica that counts. On main b kept serving the stream.
func TestHAReplicaThatCannotRenewIsFenced(t *testing.T) {
	f := newFixture(t)
	f.createMap([]v1beta1.TrafficMapEntry{
		{Cluster: "worker-a", Endpoint: localBackend(t, "worker-a"), Weight: 1, Healthy: true},
	})
	startPublisherWith(t, f.publisherConfig(haReplica(f, "a", prometheus.NewRegistry())), restCfg, zaptest.NewLogger(t).Named("a"))
	f.waitPublished()
	u, err := url.Parse(restCfg.Host)
	require.NoError(t, err)
	proxy := startAPIProxy(t, u.Host)
	viaProxy := rest.CopyConfig(restCfg)
	viaProxy.Host = "https://" + proxy.lis.Addr().String()
	b := startPublisherWith(t, f.publisherConfig(haReplica(f, "b", prometheus.NewRegistry())), viaProxy, zaptest.NewLogger(t).Named("b"))
	t.Cleanup(func() { proxy.setCut(false) }) // before b stops: it deletes its report

	conn, err := grpc.NewClient(b.xdsAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	subscribe := func() (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		require.NoError(t, err)
		// A stream the server ends at once fails Send with io.EOF; its status comes from Recv.
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: grpcNode("grpc-b"), TypeUrl: resource.ListenerType,
			ResourceNames: mapNames(f.ns)[resource.ListenerType]}); err != nil && !errors.Is(err, io.EOF) {
			return ads, err
		}
		_, err = ads.Recv()
		return ads, err
	}
	var ads discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		ads, err = subscribe()
		assert.NoError(c, err, "b serves the map")
	}, waitTimeout, tick)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := ads.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()

	proxy.setCut(true)
	cut := time.Now()
	select {
	case err := <-ended:
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		t.Logf("b's stream ended %s after its API server was cut", time.Since(cut))
	case <-time.After(waitTimeout):
		require.FailNow(t, "b still serves its client with its API server cut")
	}
	_, err = subscribe()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "replica b has not renewed its report")
}
