package xds

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commondnsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/common/dns/v3"
	dnsclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dns/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/weights"
)

// Service is one TrafficMap as the xDS sink sees it.
type Service struct {
	Namespace string // the TrafficMap's namespace
	Name      string // the TrafficMap's name
	Service   string // spec.service
	// Hostnames are the names clients use for the service, the same as its HTTPRoute's.
	Hostnames []string
	// Withheld are names of the service that another service holds: neither served as a
	// listener nor as a domain for this one (its "<service>.<namespace>" name may be one).
	Withheld []string
	// Result holds the weights to serve. Sealed keeps only what the resources read of it
	// (backends, noRoute) and clears it.
	Result weights.Result

	digest    string    // set by Sealed
	listeners []string  // set by Sealed; shared, never modified
	backends  []backend // set by Sealed; shared, never modified
	noRoute   string    // set by Sealed: the fixed response body when no backend has a positive weight
}

// backend is what the resources read of one entry of a service's weights: a sealed service
// keeps these (48 bytes an entry) instead of its weights.Result (128 bytes an entry, and
// its drain IDs and taints): 80,000 entries at 10,000 maps.
type backend struct {
	cluster   string // the workload cluster
	host      string // the endpoint's host
	port      int32  // the endpoint's port
	effective int32  // the effective weight
	https     bool   // the endpoint's scheme is https
}

// entries returns what the resources read of s's weights, sorted by cluster.
func (s Service) entries() []backend {
	if s.digest != "" {
		return s.backends
	}
	return backendsOf(s.Result)
}

// noRouteBody is the fixed response body when no entry has a positive weight.
func (s Service) noRouteBody() string {
	if s.digest != "" {
		return s.noRoute
	}
	return noRouteReason(s.Result)
}

// routable reports whether an entry has a positive weight.
func (s Service) routable() bool {
	return slices.ContainsFunc(s.entries(), func(b backend) bool { return b.effective > 0 })
}

func backendsOf(res weights.Result) []backend {
	if len(res.Entries) == 0 {
		return nil
	}
	out := make([]backend, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = backend{cluster: e.Cluster, host: e.Endpoint.Host, port: e.Endpoint.Port, effective: e.Effective,
			https: e.Endpoint.Scheme == "https"}
	}
	return out
}

func (s Service) key() string { return s.Namespace + "/" + s.Name }

// ClusterName is the stable, readable xDS cluster name of one cluster of one service.
func ClusterName(namespace, name, cluster string) string {
	return namespace + "/" + name + "/" + cluster
}

// Resources is one flavour's complete resource set, each list sorted by name. The Envoy
// flavour made by a Translator holds its route configuration and clusters encoded, not as
// messages: its Routes and Clusters are nil, and a Server serves it all the same.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster

	envoy *envoySet // the route configuration and clusters, encoded (a Translator's Envoy flavour)
}

// EnvoyOptions shapes the Envoy flavour.
type EnvoyOptions struct {
	// ListenerName names the one listener; RouteConfigName its route configuration.
	ListenerName, RouteConfigName string
	// Address and Port are where the listener listens.
	Address string
	Port    uint32
}

// DefaultEnvoyOptions listens on 0.0.0.0:10080.
var DefaultEnvoyOptions = EnvoyOptions{ListenerName: "trafficmap-http", RouteConfigName: "trafficmap-routes", Address: "0.0.0.0", Port: 10080}

// NoRouteStatus is the fixed response status when a service has no positive weight.
const NoRouteStatus = 503

// dnsRefresh is how often Envoy re-resolves a DNS cluster's host.
var dnsRefresh = durationpb.New(30e9)

// DNSClusterType is the name of Envoy's DNS cluster extension (envoy.extensions.clusters.dns.v3.DnsCluster),
// the Envoy flavour's cluster type.
const DNSClusterType = "envoy.clusters.dns"

// TranslateEnvoy returns the Envoy flavour: one listener with an HTTP connection manager
// over RDS (ADS), one route configuration with a virtual host per service, and one DNS
// cluster per (service, cluster) with logical DNS semantics (the cluster type DNSClusterType
// with all addresses in one endpoint), with TLS, SNI and SAN checks for https.
func TranslateEnvoy(opts EnvoyOptions, services []Service) (Resources, error) {
	parts := make([]envoyPart, 0, len(services))
	for _, s := range sortedServices(services) {
		part, err := translateEnvoyService(s)
		if err != nil {
			return Resources{}, err
		}
		parts = append(parts, part)
	}
	return assembleEnvoy(opts, parts)
}

// envoyPart is one service's share of the Envoy flavour.
type envoyPart struct {
	vhost    *routev3.VirtualHost
	clusters []*clusterv3.Cluster
}

func translateEnvoyService(s Service) (envoyPart, error) {
	if len(s.Hostnames) == 0 {
		return envoyPart{}, fmt.Errorf("trafficmap %s: no hostnames for its virtual host", s.key())
	}
	domains := slices.DeleteFunc(slices.Clone(s.Hostnames), func(n string) bool { return slices.Contains(s.Withheld, n) })
	if len(domains) == 0 {
		return envoyPart{}, fmt.Errorf("trafficmap %s: every hostname is withheld", s.key())
	}
	slices.Sort(domains)
	part := envoyPart{vhost: &routev3.VirtualHost{
		Name:    s.key(),
		Domains: slices.Compact(domains),
		Routes:  []*routev3.Route{route(s, true)},
	}}
	for _, e := range s.entries() {
		c, err := dnsCluster(s, e, true)
		if err != nil {
			return envoyPart{}, err
		}
		part.clusters = append(part.clusters, c)
	}
	return part, nil
}

// assembleEnvoy builds the Envoy flavour from the parts of services sorted by key.
func assembleEnvoy(opts EnvoyOptions, parts []envoyPart) (Resources, error) {
	rc := &routev3.RouteConfiguration{Name: opts.RouteConfigName, IgnorePortInHostMatching: true}
	var res Resources
	for _, p := range parts {
		rc.VirtualHosts = append(rc.VirtualHosts, p.vhost)
		res.Clusters = append(res.Clusters, p.clusters...)
	}
	l, err := envoyListener(opts)
	if err != nil {
		return Resources{}, err
	}
	res.Listeners = []*listenerv3.Listener{l}
	res.Routes = []*routev3.RouteConfiguration{rc}
	return res, nil
}

// assembleEnvoyEncoded is assembleEnvoy of encoded parts: the route configuration and
// clusters stay encoded.
func assembleEnvoyEncoded(opts EnvoyOptions, parts []*envoyEnc) (Resources, error) {
	set := &envoySet{route: &routev3.RouteConfiguration{Name: opts.RouteConfigName, IgnorePortInHostMatching: true},
		vhosts: make([]*encodedMsg, 0, len(parts))}
	for _, p := range parts {
		set.vhosts = append(set.vhosts, p.vhost)
		set.clusters = append(set.clusters, p.clusters...)
	}
	l, err := envoyListener(opts)
	if err != nil {
		return Resources{}, err
	}
	return Resources{Listeners: []*listenerv3.Listener{l}, envoy: set}, nil
}

// envoyListener is the Envoy flavour's one listener.
func envoyListener(opts EnvoyOptions) (*listenerv3.Listener, error) {
	hcm, err := connectionManager(opts.RouteConfigName)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name: opts.ListenerName,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: opts.Address, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: opts.Port},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}, nil
}

// TranslateGRPC returns the proxyless gRPC flavour: per service an api_listener for
// "<service>.<namespace>" and for each hostname, one route configuration per service, and
// LOGICAL_DNS clusters (gRPC does not accept STRICT_DNS). Upstream TLS is left to the
// client's own credentials.
func TranslateGRPC(services []Service) (Resources, error) {
	parts := make([]Resources, 0, len(services))
	for _, s := range sortedServices(services) {
		part, err := translateGRPCService(s)
		if err != nil {
			return Resources{}, err
		}
		parts = append(parts, part)
	}
	return assembleGRPC(parts), nil
}

func translateGRPCService(s Service) (Resources, error) {
	var res Resources
	names := slices.Clone(ListenerNames(s)) // the proto gets its own slice
	if len(names) == 0 {
		return res, nil // every name is held by another service: nothing to dial it by
	}
	rc := &routev3.RouteConfiguration{Name: s.key(), VirtualHosts: []*routev3.VirtualHost{{
		Name: s.key(), Domains: names, Routes: []*routev3.Route{route(s, false)},
	}}}
	hcm, err := connectionManager(rc.Name)
	if err != nil {
		return Resources{}, err
	}
	for _, n := range names {
		res.Listeners = append(res.Listeners, &listenerv3.Listener{
			Name:        n,
			ApiListener: &listenerv3.ApiListener{ApiListener: hcm},
		})
	}
	if lieplant.On && lieplant.Is(lieplant.KindFlavourWeight) {
		if cw := rc.VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters().GetClusters(); len(cw) > 0 {
			cw[0].Weight = wrapperspb.UInt32(cw[0].GetWeight().GetValue() + 1)
		}
	}
	res.Routes = []*routev3.RouteConfiguration{rc}
	for _, e := range s.entries() {
		c, err := dnsCluster(s, e, false)
		if err != nil {
			return Resources{}, err
		}
		res.Clusters = append(res.Clusters, c)
	}
	return res, nil
}

// assembleGRPC builds the gRPC flavour from the parts of services sorted by key.
func assembleGRPC(parts []Resources) Resources {
	var res Resources
	for _, p := range parts {
		res.Listeners = append(res.Listeners, p.Listeners...)
		res.Routes = append(res.Routes, p.Routes...)
		res.Clusters = append(res.Clusters, p.Clusters...)
	}
	slices.SortFunc(res.Listeners, func(a, b *listenerv3.Listener) int { return cmp.Compare(a.Name, b.Name) })
	return res
}

// ListenerNames are the names gRPC clients dial a service by: "<service>.<namespace>" and
// its hostnames, sorted and unique, without the withheld ones. They include every domain of
// its Envoy virtual host. For a sealed service they are computed once; the caller must not
// modify the slice.
func ListenerNames(s Service) []string {
	if s.digest != "" {
		return s.listeners
	}
	return listenerNames(s)
}

func listenerNames(s Service) []string {
	names := append([]string{s.Service + "." + s.Namespace}, s.Hostnames...)
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(s.Withheld, n) })
	slices.Sort(names)
	return slices.Compact(names)
}

// route is the one PathPrefix "/" route of a service: weighted clusters over the positive
// weights, or a fixed 503 saying why when there is none (Envoy and gRPC reject a
// weighted_clusters whose weights sum to 0).
func route(s Service, hostRewrite bool) *routev3.Route {
	r := &routev3.Route{
		Name:  s.key(),
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
	}
	var clusters []*routev3.WeightedCluster_ClusterWeight
	for _, e := range s.entries() {
		if e.effective <= 0 {
			continue
		}
		cw := &routev3.WeightedCluster_ClusterWeight{
			Name:   ClusterName(s.Namespace, s.Name, e.cluster),
			Weight: wrapperspb.UInt32(uint32(e.effective)),
		}
		if hostRewrite {
			cw.HostRewriteSpecifier = &routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: e.host}
		}
		clusters = append(clusters, cw)
	}
	if len(clusters) == 0 {
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: NoRouteStatus,
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s.noRouteBody()}},
		}}
		return r
	}
	r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: clusters}},
	}}
	return r
}

// noRouteReason is the fixed response body when no entry has a positive weight.
func noRouteReason(res weights.Result) string {
	switch {
	case len(res.Entries) == 0:
		return "no routable cluster: the traffic map has no entries"
	case len(res.Drained()) == len(res.Entries):
		return "no routable cluster: all drained (" + strings.Join(res.Drained(), ", ") + ")"
	default:
		return "no routable cluster: every weight is 0"
	}
}

// dnsCluster is the cluster of one entry of s, pointing at its endpoint host: of type
// LOGICAL_DNS for gRPC, of Envoy's DNS cluster type with upstream TLS for https endpoints
// when envoy is set.
func dnsCluster(s Service, e backend, envoy bool) (*clusterv3.Cluster, error) {
	name := ClusterName(s.Namespace, s.Name, e.cluster)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		ConnectTimeout:       connectTimeout,
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address: e.host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(e.port)},
					}}},
				}},
			}}}},
		},
	}
	if envoy {
		dns, err := sharedDNSClusterType()
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		c.ClusterDiscoveryType = dns
		if e.https {
			ts, err := upstreamTLS(e.host)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", name, err)
			}
			c.TransportSocket = ts
		}
	}
	return c, nil
}

// connectTimeout is every cluster's connect timeout, one message shared by every cluster
// (served messages are never modified).
var connectTimeout = durationpb.New(5e9)

// sharedDNSClusterType is envoyDNSClusterType made once and shared by every Envoy cluster
// (served messages are never modified): at 10,000 maps it is 80,000 copies less.
var sharedDNSClusterType = sync.OnceValues(envoyDNSClusterType)

// envoyDNSClusterType is the Envoy flavour's cluster type: Envoy's DNS cluster extension
// with the semantics of LOGICAL_DNS (every address of the host is one endpoint, the first
// one taken per new connection), re-resolving every dnsRefresh and preferring IPv4. It
// replaces the type LOGICAL_DNS with the Cluster's dns_refresh_rate and dns_lookup_family,
// which Envoy deprecated in favour of this extension.
func envoyDNSClusterType() (*clusterv3.Cluster_ClusterType, error) {
	cfg, err := anypb.New(&dnsclusterv3.DnsCluster{
		DnsRefreshRate:               dnsRefresh,
		DnsLookupFamily:              commondnsv3.DnsLookupFamily_V4_PREFERRED,
		AllAddressesInSingleEndpoint: true,
	})
	if err != nil {
		return nil, fmt.Errorf("dns cluster type: %w", err)
	}
	return &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
		Name: DNSClusterType, TypedConfig: cfg,
	}}, nil
}

// upstreamTLS verifies the upstream against the system roots, with SNI and a SAN check on
// the endpoint host.
func upstreamTLS(host string) (*corev3.TransportSocket, error) {
	ctx := &tlsv3.UpstreamTlsContext{
		Sni: host,
		CommonTlsContext: &tlsv3.CommonTlsContext{ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
			ValidationContext: &tlsv3.CertificateValidationContext{
				SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{},
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: tlsv3.SubjectAltNameMatcher_DNS,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}},
				}},
			},
		}},
	}
	if err := ctx.ValidateAll(); err != nil {
		return nil, fmt.Errorf("upstream tls context: %w", err)
	}
	packed, err := anypb.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("pack upstream tls context: %w", err)
	}
	return &corev3.TransportSocket{Name: wellknown.TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packed}}, nil
}

// connectionManager returns an HTTP connection manager over RDS from ADS, validated before
// it is packed (validation does not descend into Any). gRPC ignores the stat prefix and
// codec; Envoy requires them.
func connectionManager(routeConfig string) (*anypb.Any, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("pack router: %w", err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:  "trafficmap",
		CodecType:   hcmv3.HttpConnectionManager_AUTO,
		HttpFilters: []*hcmv3.HttpFilter{{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: routeConfig,
			ConfigSource: &corev3.ConfigSource{
				ResourceApiVersion:    corev3.ApiVersion_V3,
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			},
		}},
	}
	if err := hcm.ValidateAll(); err != nil {
		return nil, fmt.Errorf("http connection manager: %w", err)
	}
	return anypb.New(hcm)
}

func sortedServices(in []Service) []Service {
	type keyed struct {
		key string
		s   Service
	}
	ks := make([]keyed, len(in))
	for i, s := range in {
		ks[i] = keyed{s.key(), s} // each key built once, not on every comparison
	}
	slices.SortFunc(ks, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
	out := make([]Service, len(ks))
	for i, k := range ks {
		out[i] = k.s
	}
	return out
}
