package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trafficmap/publisher/xds"
)

// xdsTypes are the types every load client subscribes to.
var xdsTypes = []string{resource.ListenerType, resource.ClusterType, resource.RouteType}

// xdsClient is one protocol-level ADS client, state of the world or delta, that ACKs every
// response and keeps for each virtual host (named after its map, "<namespace>/<name>", in
// both flavours) only its positive weights ("cluster=weight,..."), so that thousands of
// maps times a hundred clients stay small. What it subscribes to is its kind:
//
//   - Envoy (newEnvoyClient): every listener and cluster (wildcard) and the one route
//     configuration by name, as Envoy does;
//   - proxyless gRPC (newGRPCClient): by name, the listener, route configuration and
//     clusters of each map it dials, as grpc-go does;
//   - stress (newWildcardClient): gRPC flavour, every resource of every type (wildcard).
type xdsClient struct {
	id      string
	delta   bool
	flavour xds.Flavour
	kind    string              // "envoy", "grpc" or "wildcard"
	names   map[string][]string // per type URL; a type absent here is a wildcard
	dials   map[int]bool        // the maps whose routes the client holds; nil: every map

	mu     sync.Mutex
	routes map[string]string // route configuration name -> canonical weights
	// encoded is each virtual host's encoding as last received; only the goroutine
	// receiving the stream's responses uses it.
	encoded map[string][]byte
	waiters map[string][]routeWaiter
	acks    int // responses ACKed

	bytes atomic.Int64 // response bytes received
	// last is, per type URL, the bytes of the last response of that type (state of the
	// world only): for an Envoy SotW client, whose every response of a type carries the
	// whole type (one route configuration), their sum is its configuration's size.
	last      sync.Map     // type URL -> int64
	resources atomic.Int64 // resources received (delta: added or changed; SotW: every one in a response)
	responses atomic.Int64
	errs      chan error

	// Across a publisher restart (restart): while dropping is set, a stream that ends is not
	// a failure; the client reconnects, as Envoy does with backoff, to target once it is set
	// (empty while no publisher runs), and resubscribes stating what it holds: per type its
	// last ACKed version (state of the world) or each resource's version (delta). Only the
	// goroutine receiving the stream's responses uses versions and resourceVersions.
	dropping         atomic.Bool
	target           atomic.Pointer[string]
	redials          atomic.Int64                 // streams opened after the first
	versions         map[string]string            // type URL -> last ACKed version (SotW)
	resourceVersions map[string]map[string]string // type URL -> resource name -> version (delta)
}

// routeWaiter fires with the time of the ACK of the first response after which the route
// configuration's canonical weights satisfy want.
type routeWaiter struct {
	want func(canonical string) bool
	ch   chan time.Time
}

func newXDSClient(id string, delta bool, flavour xds.Flavour, kind string) *xdsClient {
	return &xdsClient{id: id, delta: delta, flavour: flavour, kind: kind, names: map[string][]string{},
		routes: map[string]string{}, waiters: map[string][]routeWaiter{}, errs: make(chan error, 1),
		versions: map[string]string{}, resourceVersions: map[string]map[string]string{}}
}

// newWildcardClient is a stress-mix client: gRPC flavour, wildcard on every type.
func newWildcardClient(id string, delta bool) *xdsClient {
	return newXDSClient(id, delta, xds.FlavourGRPC, "wildcard")
}

// newEnvoyClient subscribes as Envoy does: listeners and clusters by wildcard, the route
// configuration its listener names.
func newEnvoyClient(id string, delta bool) *xdsClient {
	c := newXDSClient(id, delta, xds.FlavourEnvoy, "envoy")
	c.names[resource.RouteType] = []string{xds.DefaultEnvoyOptions.RouteConfigName}
	return c
}

// newGRPCClient subscribes as a proxyless gRPC client dialing maps does (state of the
// world, every name explicit): per map its listener "<service>.<namespace>", its route
// configuration and its clusters.
func newGRPCClient(id string, maps []int) *xdsClient {
	c := newXDSClient(id, false, xds.FlavourGRPC, "grpc")
	c.dials = map[int]bool{}
	for _, i := range maps {
		c.dials[i] = true
		c.names[resource.ListenerType] = append(c.names[resource.ListenerType], mapName(i)+"."+namespace)
		c.names[resource.RouteType] = append(c.names[resource.RouteType], xdsRouteName(i))
		for j := range clustersPerMap {
			c.names[resource.ClusterType] = append(c.names[resource.ClusterType], xds.ClusterName(namespace, mapName(i), clusterName(j)))
		}
	}
	return c
}

// watches reports whether the client holds map i's route.
func (c *xdsClient) watches(i int) bool { return c.dials == nil || c.dials[i] }

// label names the client's kind and protocol, e.g. "Envoy delta".
func (c *xdsClient) label() string {
	proto := "SotW"
	if c.delta {
		proto = "delta"
	}
	return map[string]string{"envoy": "Envoy", "grpc": "gRPC", "wildcard": "wildcard"}[c.kind] + " " + proto
}

func (c *xdsClient) node() *corev3.Node {
	return &corev3.Node{
		Id:            c.id,
		UserAgentName: "trafficmap-bench",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			xds.FlavourMetadataKey: structpb.NewStringValue(string(c.flavour)),
		}},
	}
}

// run connects to addr and serves the stream until ctx ends; a failure is sent on errs.
// A stream that ends while dropping is set is followed, after 200 ms, by one to target
// once it is set.
func (c *xdsClient) run(ctx context.Context, addr string) {
	for {
		err := c.serve(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if !c.dropping.Load() {
			c.errs <- fmt.Errorf("xds client %s: %w", c.id, err)
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if t := c.target.Load(); t != nil && *t != "" {
				addr = *t
				break
			}
		}
		c.redials.Add(1)
	}
}

// retarget sets the address the client reconnects to after a dropped stream ("": none yet).
func (c *xdsClient) retarget(addr string) { c.target.Store(&addr) }

func (c *xdsClient) serve(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.WaitForReady(true)),
		// The port is open before the publisher serves it (caches first): retry quickly.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond}, MinConnectTimeout: 2 * time.Second}))
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	if c.delta {
		return c.serveDelta(ctx, ads)
	}
	return c.serveSotW(ctx, ads)
}

func (c *xdsClient) serveSotW(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("open sotw stream: %w", err)
	}
	for _, t := range xdsTypes {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node(), TypeUrl: t, ResourceNames: c.names[t], VersionInfo: c.versions[t]}); err != nil {
			return fmt.Errorf("subscribe %s: %w", t, err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		c.count(proto.Size(resp), len(resp.GetResources()))
		c.last.Store(resp.GetTypeUrl(), int64(proto.Size(resp)))
		// A state-of-the-world response carries the full state only of listeners and
		// clusters; one of route configurations may carry only the changed ones.
		changed, err := c.applyRoutes(resp.GetTypeUrl(), resp.GetResources(), nil, cachev3.ResourceRequiresFullStateInSotw(resp.GetTypeUrl()))
		if err != nil {
			return err
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node(), TypeUrl: resp.GetTypeUrl(), ResourceNames: c.names[resp.GetTypeUrl()],
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		c.versions[resp.GetTypeUrl()] = resp.GetVersionInfo()
		c.acked(changed)
	}
}

func (c *xdsClient) serveDelta(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("open delta stream: %w", err)
	}
	for _, t := range xdsTypes {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node(), TypeUrl: t, ResourceNamesSubscribe: c.names[t],
			InitialResourceVersions: c.resourceVersions[t]}); err != nil {
			return fmt.Errorf("subscribe %s: %w", t, err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		c.count(proto.Size(resp), len(resp.GetResources()))
		anys := make([]*anypb.Any, 0, len(resp.GetResources()))
		held := c.resourceVersions[resp.GetTypeUrl()]
		if held == nil {
			held = map[string]string{}
			c.resourceVersions[resp.GetTypeUrl()] = held
		}
		for _, r := range resp.GetResources() {
			anys = append(anys, r.GetResource())
			held[r.GetName()] = r.GetVersion()
		}
		for _, name := range resp.GetRemovedResources() {
			delete(held, name)
		}
		changed, err := c.applyRoutes(resp.GetTypeUrl(), anys, resp.GetRemovedResources(), false)
		if err != nil {
			return err
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node(), TypeUrl: resp.GetTypeUrl(),
			ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		c.acked(changed)
	}
}

// held is the sum of the last state-of-the-world response of each type (see last).
func (c *xdsClient) held() int64 {
	var n int64
	c.last.Range(func(_, v any) bool { n += v.(int64); return true })
	return n
}

func (c *xdsClient) count(bytes, resources int) {
	c.bytes.Add(int64(bytes))
	c.resources.Add(int64(resources))
	c.responses.Add(1)
}

// applyRoutes records the virtual hosts of route configurations (other types are only
// counted) and returns the virtual host names whose weights changed. With replace (a
// full-state response) the response is the whole set; a removed route configuration takes
// the virtual host of its name with it (the gRPC flavour's one virtual host is named as its
// configuration).
//
// A virtual host whose encoding is byte for byte the one the client decoded last time is
// not decoded again (the publisher encodes deterministically): the bench's Envoy clients
// share two cores with the publisher, and decoding every virtual host of the fleet's one
// route configuration on every drain cost each of them 10 ms (100 ms of CPU per drain for
// 10 Envoys), which a real Envoy spends on its own machine. Every changed virtual host is
// still decoded and checked.
func (c *xdsClient) applyRoutes(typeURL string, res []*anypb.Any, removed []string, replace bool) ([]string, error) {
	if typeURL != resource.RouteType {
		return nil, nil
	}
	next := make(map[string]string, len(res))
	seen := make(map[string][]byte, len(res))
	for _, a := range res {
		if err := c.scanRouteConfiguration(a.GetValue(), next, seen); err != nil {
			return nil, fmt.Errorf("decode route configuration: %w", err)
		}
	}
	c.encoded = seen
	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []string
	if replace {
		for name := range c.routes {
			if _, ok := next[name]; !ok {
				delete(c.routes, name)
				changed = append(changed, name)
			}
		}
	}
	for _, name := range removed {
		delete(c.routes, name)
		changed = append(changed, name)
	}
	for name, w := range next {
		if c.routes[name] != w {
			c.routes[name] = w
			changed = append(changed, name)
		}
	}
	return changed, nil
}

// scanRouteConfiguration walks an encoded RouteConfiguration's virtual hosts (field 2) and
// puts each one's canonical weights into next and its encoding into seen, decoding only
// the virtual hosts whose encoding differs from the one recorded last time.
func (c *xdsClient) scanRouteConfiguration(b []byte, next map[string]string, seen map[string][]byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num != 2 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		raw, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		name, err := virtualHostName(raw)
		if err != nil {
			return err
		}
		if prev, ok := c.encoded[name]; ok && bytes.Equal(prev, raw) {
			next[name], seen[name] = c.routes[name], prev
			continue
		}
		vh := &routev3.VirtualHost{}
		if err := proto.Unmarshal(raw, vh); err != nil {
			return err
		}
		next[vh.GetName()], seen[vh.GetName()] = canonicalVirtualHost(vh), bytes.Clone(raw)
	}
	return nil
}

// virtualHostName reads an encoded VirtualHost's name (field 1).
func virtualHostName(b []byte) (string, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			return string(v), nil
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return "", nil
}

// acked fires the waiters of changed routes now that their response is ACKed.
func (c *xdsClient) acked(changed []string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acks++
	for _, name := range changed {
		ws := c.waiters[name]
		kept := ws[:0]
		for _, w := range ws {
			if w.want(c.routes[name]) {
				w.ch <- now
				continue
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			delete(c.waiters, name)
		} else {
			c.waiters[name] = kept
		}
	}
}

// expect returns a channel that receives the ACK time of the response after which route
// configuration name satisfies want. Register it before the change is made.
func (c *xdsClient) expect(name string, want func(string) bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.waiters[name] = append(c.waiters[name], routeWaiter{want: want, ch: ch})
	c.mu.Unlock()
	return ch
}

// route returns the canonical weights the client holds for a route configuration.
func (c *xdsClient) route(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.routes[name]
	return w, ok
}

// canonicalVirtualHost renders the positive weights of a virtual host's routes as
// "cluster=weight,..." sorted by cluster (the last path element of the xDS cluster name);
// a route without weighted clusters (the 503 of an all-drained map) renders as "".
func canonicalVirtualHost(vh *routev3.VirtualHost) string {
	var parts []string
	for _, r := range vh.GetRoutes() {
		for _, cw := range r.GetRoute().GetWeightedClusters().GetClusters() {
			name := cw.GetName()
			name = name[strings.LastIndex(name, "/")+1:]
			parts = append(parts, fmt.Sprintf("%s=%d", name, cw.GetWeight().GetValue()))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// errClientFailed is returned when a load client's stream ends during a measurement.
var errClientFailed = errors.New("xds load client failed")
