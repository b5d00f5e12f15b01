package xds_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
	"github.com/trafficmap/publisher/xds/xdstest"
)

// scopedClient is a real ADS stream, state of the world or delta, of either flavour:
// listeners and clusters by wildcard, route configurations by name (routes). It answers
// every response as it arrives: a NACK when it carries a resource named in reject, an
// ACK otherwise.
type scopedClient struct {
	mu     sync.Mutex
	reject map[string]bool
}

func (c *scopedClient) rejects(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reject = map[string]bool{}
	for _, n := range names {
		c.reject[n] = true
	}
}

// rejected is the NACK of a response carrying names, nil for an ACK.
func (c *scopedClient) rejected(names []string) *status.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if c.reject[n] {
			return &status.Status{Message: "resource " + n + " rejected by test"}
		}
	}
	return nil
}

func startScopedClient(t *testing.T, ads discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node, delta bool, routes []string) *scopedClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &scopedClient{reject: map[string]bool{}}
	names := func(typ string) []string {
		if typ == resource.RouteType {
			return routes
		}
		return nil
	}
	types := []string{resource.ClusterType, resource.ListenerType, resource.RouteType}
	if delta {
		stream, err := ads.DeltaAggregatedResources(ctx)
		require.NoError(t, err)
		for _, typ := range types {
			require.NoError(t, stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: names(typ)}))
		}
		responses := xdstest.Stream(stream.Recv)
		go func() { // the only sender from here on
			for r := range responses {
				var carried []string
				for _, res := range r.GetResources() {
					carried = append(carried, res.GetName())
				}
				req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(), ErrorDetail: c.rejected(carried)}
				if stream.Send(req) != nil {
					return
				}
			}
		}()
		return c
	}
	stream, err := ads.StreamAggregatedResources(ctx)
	require.NoError(t, err)
	for _, typ := range types {
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names(typ)}))
	}
	responses := xdstest.Stream(stream.Recv)
	go func() {
		acked := map[string]string{}
		for r := range responses {
			var carried []string
			for _, a := range r.GetResources() {
				if m, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{}); err == nil {
					if named, ok := m.(interface{ GetName() string }); ok {
						carried = append(carried, named.GetName())
					}
				}
			}
			req := &discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: names(r.GetTypeUrl()), ResponseNonce: r.GetNonce()}
			if req.ErrorDetail = c.rejected(carried); req.ErrorDetail == nil {
				acked[r.GetTypeUrl()] = r.GetVersionInfo()
			}
			req.VersionInfo = acked[r.GetTypeUrl()]
			if stream.Send(req) != nil {
				return
			}
		}
	}()
	return c
}

// scopedFlavour serves one flavour to a scopedClient: its node, its route configuration
// names and its translation.
type scopedFlavour struct {
	flavour   xds.Flavour
	node      *corev3.Node
	routes    []string
	translate func([]xds.Service) (xds.Resources, error)
}

func scopedFlavours() map[string]scopedFlavour {
	return map[string]scopedFlavour{
		"envoy": {flavour: xds.FlavourEnvoy, node: envoyNode, routes: []string{xds.DefaultEnvoyOptions.RouteConfigName},
			translate: func(s []xds.Service) (xds.Resources, error) { return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s) }},
		"grpc": {flavour: xds.FlavourGRPC, routes: []string{"prod/a", "prod/b"}, translate: xds.TranslateGRPC,
			node: &corev3.Node{Id: "grpc-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				xds.FlavourMetadataKey: structpb.NewStringValue(string(xds.FlavourGRPC))}}}},
	}
}

// twoEntries is the map prod/name over worker-1 at host1 and worker-2, drained of worker-2
// when drained, with extra hostnames.
func twoEntries(t *testing.T, name, host1 string, drained bool, hostnames ...string) xds.Service {
	t.Helper()
	in := weights.Input{Entries: []weights.Entry{
		{Cluster: "worker-1", Endpoint: "https://" + host1, Weight: 1},
		{Cluster: "worker-2", Endpoint: "https://" + name + "-2.example.com", Weight: 1},
	}}
	if drained {
		in.Drains = []weights.Drain{{ID: "d", Cluster: "worker-2", Reason: "test"}}
	}
	res, err := weights.Compute(in)
	require.NoError(t, err)
	return xds.Service{Namespace: "prod", Name: name, Service: name, Hostnames: append([]string{name + ".example.com"}, hostnames...), Result: res}.Sealed()
}

// A NACK holds only what it rejected (issue 44, D10): after a client, delta or state of the
// world, of either flavour, rejected map A's changed cluster, route configuration or
// listener, it still confirms map B's change of another type (a drain changes route
// configurations only), while A stays rejected. The Envoy flavour's one listener and one
// route configuration carry every map, so only its clusters are per map. On c14dc7a, B
// waited (delta: "0/1 ACKed") or was reported rejected by A's NACK (state of the world).
func TestNackHoldsOnlyWhatItRejected(t *testing.T) {
	type step struct {
		a2, b1, b2 func(t *testing.T) xds.Service
		rejected   string // the name of A's resource the client rejects
	}
	a1 := func(t *testing.T) xds.Service { return twoEntries(t, "a", "a1.example.com", false) }
	cases := map[string]step{
		// A's endpoint moves: a new cluster the client rejects; B is drained.
		"cluster": {
			a2:       func(t *testing.T) xds.Service { return twoEntries(t, "a", "a2.example.com", false) },
			b1:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b1.example.com", false) },
			b2:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b1.example.com", true) },
			rejected: xds.ClusterName("prod", "a", "worker-1"),
		},
		// A is drained: a new route configuration the client rejects; B's endpoint moves.
		"route": {
			a2:       func(t *testing.T) xds.Service { return twoEntries(t, "a", "a1.example.com", true) },
			b1:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b1.example.com", false) },
			b2:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b2.example.com", false) },
			rejected: "prod/a",
		},
		// A gets a new hostname: a new listener the client rejects; B is drained.
		"listener": {
			a2: func(t *testing.T) xds.Service {
				return twoEntries(t, "a", "a1.example.com", false, "a-new.example.com")
			},
			b1:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b1.example.com", false) },
			b2:       func(t *testing.T) xds.Service { return twoEntries(t, "b", "b1.example.com", true) },
			rejected: "a-new.example.com",
		},
	}
	for fname, fl := range scopedFlavours() {
		for cname, tc := range cases {
			if fname == "envoy" && cname != "cluster" {
				continue // one listener and one route configuration carry every map
			}
			for _, delta := range []bool{false, true} {
				name := fname + "/" + cname + "/" + map[bool]string{false: "sotw", true: "delta"}[delta]
				t.Run(name, func(t *testing.T) {
					srv, ads := startServer(t)
					h := xds.NewHistory(16)
					h.Follow(srv.Tracker())
					set := func(services ...xds.Service) {
						t.Helper()
						res, err := fl.translate(services)
						require.NoError(t, err)
						vs, err := srv.SetResources(context.Background(), fl.flavour, res)
						require.NoError(t, err)
						h.Record(fl.flavour, vs, services, nil) // as the sink records what it serves
					}
					confirm := func(s xds.Service) xds.Confirmation {
						return xds.Confirm(srv.Tracker().Clients(), h, s.Key(), xds.ServedBy(xds.DefaultEnvoyOptions, s), 1)
					}
					a1, a2, b1, b2 := a1(t), tc.a2(t), tc.b1(t), tc.b2(t)
					set(a1, b1)
					client := startScopedClient(t, ads, fl.node, delta, fl.routes)
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						assert.True(c, confirm(a1).Done, confirm(a1).Message)
						assert.True(c, confirm(b1).Done, confirm(b1).Message)
					}, 10*time.Second, 10*time.Millisecond)

					client.rejects(tc.rejected)
					set(a2, b1)
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						got := confirm(a2)
						assert.False(c, got.Done)
						assert.NotNil(c, got.Nack, got.Message)
					}, 10*time.Second, 10*time.Millisecond)

					set(a2, b2)
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						got := confirm(b2)
						assert.True(c, got.Done, "A's rejection is not B's: %s", got.Message)
						assert.Nil(c, got.Nack, got.Message)
					}, 10*time.Second, 10*time.Millisecond)
					got := confirm(a2)
					assert.False(t, got.Done, got.Message)
					if assert.NotNil(t, got.Nack, "A stays rejected: %s", got.Message) {
						assert.Equal(t, "resource "+tc.rejected+" rejected by test", got.Nack.Message)
					}
					assert.False(t, confirm(b1).Done, "the client holds B's new content, not its old")

					// A is fixed: the client takes it, and both are confirmed.
					client.rejects()
					a3 := twoEntries(t, "a", "a3.example.com", false)
					set(a3, b2)
					require.EventuallyWithT(t, func(c *assert.CollectT) {
						assert.True(c, confirm(a3).Done, confirm(a3).Message)
						assert.True(c, confirm(b2).Done, confirm(b2).Message)
					}, 10*time.Second, 10*time.Millisecond)
				})
			}
		}
	}
}
