package integration

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/require"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// adsMux is a STAND-IN for a shared edge in front of the publisher: an aggregating xDS
// proxy that carries the state-of-the-world ADS streams of several real clients on ONE
// upstream stream, as one Envoy serving many tenants does. grpc-go (v1.85) keeps one xDS
// client, and so one ADS stream, per channel target, so two real grpc-go channels for two
// maps need it to be seen by the publisher as one client holding both maps. Per type it
// subscribes upstream to the union of its clients' names, forwards each client the
// resources it subscribed to, and answers upstream once every client has answered: a NACK
// (with the first rejecting client's error) if any rejected, else an ACK.
//
// With a corruption set (corrupt), it turns every resource of its type whose name starts
// with its prefix into one grpc-go rejects (see muxCorruptions): the publisher never emits
// a resource a client refuses, so the stand-in makes one.
type adsMux struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	lis      net.Listener
	upstream discoveryv3.AggregatedDiscoveryServiceClient
	ctx      context.Context

	mu            sync.Mutex
	up            discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node          *corev3.Node
	downs         map[*muxDown]bool
	types         map[string]*muxType
	corruptType   string
	corruptPrefix string
}

// muxDown is one client's stream and its subscriptions by type.
type muxDown struct {
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	subs   map[string][]string
}

// muxType is the upstream state of one type: the latest response, the version last ACKed,
// the names last subscribed, and the clients whose answer to the latest response is due.
type muxType struct {
	resp    *discoveryv3.DiscoveryResponse
	acked   string
	sent    []string
	waiting map[*muxDown]bool
	nack    *rpcstatus.Status
	replied bool
}

func startADSMux(t *testing.T, target net.Addr) *adsMux {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conn, err := grpc.NewClient(target.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m := &adsMux{lis: lis, upstream: discoveryv3.NewAggregatedDiscoveryServiceClient(conn), ctx: ctx,
		downs: map[*muxDown]bool{}, types: map[string]*muxType{}}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, m)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { cancel(); srv.Stop(); _ = conn.Close() })
	return m
}

func (m *adsMux) addr() net.Addr { return m.lis.Addr() }

// corrupt makes the stand-in turn the resources of typeURL named with prefix into ones
// grpc-go rejects.
func (m *adsMux) corrupt(typeURL, prefix string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.corruptType, m.corruptPrefix = typeURL, prefix
}

// muxCorruptions make a resource of each type one grpc-go (v1.85, internal/xds/xdsclient/
// xdsresource) rejects: a Cluster turns STATIC ("unsupported cluster type"), a
// RouteConfiguration's weighted clusters all weigh 0 ("has no valid cluster in
// WeightedCluster action"), a Listener's HttpConnectionManager loses its rds ("no
// RouteSpecifier").
var muxCorruptions = map[string]func(proto.Message) error{
	resource.ClusterType: func(msg proto.Message) error {
		msg.(*clusterv3.Cluster).ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		return nil
	},
	resource.RouteType: func(msg proto.Message) error {
		for _, vh := range msg.(*routev3.RouteConfiguration).GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
					c.Weight = wrapperspb.UInt32(0)
				}
			}
		}
		return nil
	},
	resource.ListenerType: func(msg proto.Message) error {
		api := msg.(*listenerv3.Listener).GetApiListener()
		var hcm hcmv3.HttpConnectionManager
		if err := api.GetApiListener().UnmarshalTo(&hcm); err != nil {
			return err
		}
		hcm.RouteSpecifier = nil
		packed, err := anypb.New(&hcm)
		api.ApiListener = packed
		return err
	},
}

// StreamAggregatedResources serves one client's stream.
func (m *adsMux) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	d := &muxDown{stream: s, subs: map[string][]string{}}
	defer m.leave(d)
	for {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if err := m.request(d, req); err != nil {
			return err
		}
	}
}

func (m *adsMux) request(d *muxDown, req *discoveryv3.DiscoveryRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up == nil {
		m.node = req.GetNode()
		up, err := m.upstream.StreamAggregatedResources(m.ctx)
		if err != nil {
			return err
		}
		m.up = up
		go m.receive(up)
	}
	m.downs[d] = true
	typ := req.GetTypeUrl()
	d.subs[typ] = req.GetResourceNames()
	st := m.types[typ]
	if st == nil {
		st = &muxType{waiting: map[*muxDown]bool{}}
		m.types[typ] = st
	}
	if st.resp != nil && req.GetResponseNonce() == st.resp.GetNonce() && st.waiting[d] {
		delete(st.waiting, d)
		if req.GetErrorDetail() != nil && st.nack == nil {
			st.nack = req.GetErrorDetail()
		}
	}
	return m.answer(typ, st)
}

// answer sends upstream what is due for typ: the answer to its latest response once every
// client has answered, else a changed subscription (never while answers are due).
func (m *adsMux) answer(typ string, st *muxType) error {
	names := m.union(typ)
	req := &discoveryv3.DiscoveryRequest{Node: m.node, TypeUrl: typ, ResourceNames: names, VersionInfo: st.acked}
	switch {
	case st.resp != nil && !st.replied && len(st.waiting) == 0:
		st.replied = true
		req.ResponseNonce = st.resp.GetNonce()
		if st.nack != nil {
			req.ErrorDetail = st.nack
		} else {
			st.acked = st.resp.GetVersionInfo()
			req.VersionInfo = st.acked
		}
	case (st.resp == nil || st.replied) && !slices.Equal(names, st.sent):
		req.ResponseNonce = st.resp.GetNonce()
	default:
		return nil
	}
	st.sent = names
	m.node = nil // the node goes on the stream's first request only
	return m.up.Send(req)
}

func (m *adsMux) union(typ string) []string {
	var out []string
	for d := range m.downs {
		out = append(out, d.subs[typ]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (m *adsMux) receive(up discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient) {
	for {
		resp, err := up.Recv()
		if err != nil {
			return
		}
		m.respond(resp)
	}
}

// respond forwards an upstream response to every client subscribed to some of it.
func (m *adsMux) respond(resp *discoveryv3.DiscoveryResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	typ := resp.GetTypeUrl()
	st := m.types[typ]
	if st == nil {
		st = &muxType{}
		m.types[typ] = st
	}
	st.resp, st.replied, st.nack, st.waiting = resp, false, nil, map[*muxDown]bool{}
	for d := range m.downs {
		var mine []*anypb.Any
		for _, r := range resp.GetResources() {
			if name, ok := m.forward(r, typ); ok && slices.Contains(d.subs[typ], name) {
				mine = append(mine, r)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if err := d.stream.Send(&discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: resp.GetVersionInfo(),
			Nonce: resp.GetNonce(), Resources: mine}); err == nil {
			st.waiting[d] = true
		}
	}
	_ = m.answer(typ, st)
}

// forward returns the resource's name and, for one named with the corrupt prefix of the
// corrupt type, replaces it in place by one grpc-go rejects (muxCorruptions).
func (m *adsMux) forward(r *anypb.Any, typ string) (string, bool) {
	msg, err := r.UnmarshalNew()
	if err != nil {
		return "", false
	}
	named, ok := msg.(interface{ GetName() string })
	if !ok {
		return "", false
	}
	name := named.GetName()
	if typ == m.corruptType && m.corruptPrefix != "" && strings.HasPrefix(name, m.corruptPrefix) {
		if muxCorruptions[typ](msg) != nil || r.MarshalFrom(msg) != nil {
			return "", false
		}
	}
	return name, true
}

// leave forgets a client whose stream ended; its due answers are no longer awaited.
func (m *adsMux) leave(d *muxDown) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.downs, d)
	for typ, st := range m.types {
		if st.waiting[d] {
			delete(st.waiting, d)
			_ = m.answer(typ, st)
		}
	}
}
