package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// chain is what a probe holds (ACKed) at the protocol level, decoded: every link a map's
// weights reach a client through. A map's weights count as held only when its whole chain
// is intact (see held).
type chain struct {
	// listeners: per listener, the route configuration its HTTP connection manager names
	// over RDS ("" when it has none).
	listeners map[string]string
	// routes: per route configuration, its virtual hosts by name.
	routes map[string]map[string]vhost
	// clusters: per cluster, the addresses "host:port" of its load assignment's endpoints.
	clusters map[string][]string
}

// vhost is a virtual host as decoded.
type vhost struct {
	domains  []string
	weighted []weightedCluster // the routes' positive weights, in order
}

// weightedCluster is one positive weight of a route's weighted_clusters.
type weightedCluster struct {
	name   string
	weight uint32
}

// mapExpect is what a probe expects of one map's chain beyond the naming contract.
type mapExpect struct {
	ref mapRef
	// endpoints: per entry cluster, the address of its cluster's one endpoint (entries whose
	// endpoint URL does not parse are left out: any one endpoint passes).
	endpoints map[string]string
}

// newMapExpect returns the expectation of ref.
func newMapExpect(ref mapRef) mapExpect {
	e := mapExpect{ref: ref, endpoints: map[string]string{}}
	for c, raw := range ref.Endpoints {
		if addr, err := endpointAddress(raw); err == nil {
			e.endpoints[c] = addr
		}
	}
	return e
}

// newChain returns an empty chain: nothing held.
func newChain() chain {
	return chain{listeners: map[string]string{}, routes: map[string]map[string]vhost{}, clusters: map[string][]string{}}
}

// decodedSet is one response's resources of one type, decoded, by name (only the map of
// the response's type is set).
type decodedSet struct {
	listeners map[string]string
	routes    map[string]map[string]vhost
	clusters  map[string][]string
}

// decodeResources decodes resources of type t (listeners, route configurations or
// clusters; any other type decodes to nothing).
func decodeResources(t string, res []*anypb.Any) (decodedSet, error) {
	var d decodedSet
	switch t {
	case resource.ListenerType:
		d.listeners = make(map[string]string, len(res))
		for _, a := range res {
			l := &listenerv3.Listener{}
			if err := proto.Unmarshal(a.GetValue(), l); err != nil {
				return decodedSet{}, fmt.Errorf("decode listener: %w", err)
			}
			rds, err := listenerRDS(l)
			if err != nil {
				return decodedSet{}, fmt.Errorf("listener %s: %w", l.GetName(), err)
			}
			d.listeners[l.GetName()] = rds
		}
	case resource.RouteType:
		d.routes = make(map[string]map[string]vhost, len(res))
		for _, a := range res {
			rc := &routev3.RouteConfiguration{}
			if err := proto.Unmarshal(a.GetValue(), rc); err != nil {
				return decodedSet{}, fmt.Errorf("decode route configuration: %w", err)
			}
			vhosts := make(map[string]vhost, len(rc.GetVirtualHosts()))
			for _, vh := range rc.GetVirtualHosts() {
				vhosts[vh.GetName()] = decodeVirtualHost(vh)
			}
			d.routes[rc.GetName()] = vhosts
		}
	case resource.ClusterType:
		d.clusters = make(map[string][]string, len(res))
		for _, a := range res {
			c := &clusterv3.Cluster{}
			if err := proto.Unmarshal(a.GetValue(), c); err != nil {
				return decodedSet{}, fmt.Errorf("decode cluster: %w", err)
			}
			d.clusters[c.GetName()] = clusterEndpoints(c)
		}
	}
	return d, nil
}

// listenerRDS returns the route configuration a listener's HTTP connection manager names
// over RDS: its api_listener's (gRPC), else the first one of its filter chains' filters
// (Envoy); "" when it has none.
func listenerRDS(l *listenerv3.Listener) (string, error) {
	hcm := &hcmv3.HttpConnectionManager{}
	if a := l.GetApiListener().GetApiListener(); a != nil {
		if !a.MessageIs(hcm) {
			return "", nil
		}
		if err := a.UnmarshalTo(hcm); err != nil {
			return "", fmt.Errorf("decode api_listener: %w", err)
		}
		return hcm.GetRds().GetRouteConfigName(), nil
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if a := f.GetTypedConfig(); a != nil && a.MessageIs(hcm) {
				if err := a.UnmarshalTo(hcm); err != nil {
					return "", fmt.Errorf("decode filter %s: %w", f.GetName(), err)
				}
				return hcm.GetRds().GetRouteConfigName(), nil
			}
		}
	}
	return "", nil
}

// decodeVirtualHost keeps a virtual host's domains and its routes' positive weights.
func decodeVirtualHost(vh *routev3.VirtualHost) vhost {
	v := vhost{domains: slices.Clone(vh.GetDomains())}
	for _, r := range vh.GetRoutes() {
		for _, cw := range r.GetRoute().GetWeightedClusters().GetClusters() {
			if w := cw.GetWeight().GetValue(); w > 0 {
				v.weighted = append(v.weighted, weightedCluster{name: cw.GetName(), weight: w})
			}
		}
	}
	return v
}

// clusterEndpoints returns the addresses "host:port" of a cluster's load assignment's
// endpoints (a DNS cluster's endpoint is its host and port).
func clusterEndpoints(c *clusterv3.Cluster) []string {
	var out []string
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return out
}

// replace takes d as the whole set of its type held (a state-of-the-world response).
func (c *chain) replace(d decodedSet) {
	if d.listeners != nil {
		c.listeners = d.listeners
	}
	if d.routes != nil {
		c.routes = d.routes
	}
	if d.clusters != nil {
		c.clusters = d.clusters
	}
}

// apply takes the resources of a delta response of type t (d) and its removals.
func (c *chain) apply(t string, d decodedSet, removed []string) {
	switch t {
	case resource.ListenerType:
		for _, n := range removed {
			delete(c.listeners, n)
		}
		maps.Copy(c.listeners, d.listeners)
	case resource.RouteType:
		for _, n := range removed {
			delete(c.routes, n)
		}
		maps.Copy(c.routes, d.routes)
	case resource.ClusterType:
		for _, n := range removed {
			delete(c.clusters, n)
		}
		maps.Copy(c.clusters, d.clusters)
	}
}

// held is what the chain gives each map. Envoy flavour: every virtual host of the shared
// route configuration envoyRouteConfig, intact when the listener envoyListener names that
// configuration, the virtual host has a domain (the map's hostname or a name under it, for
// a map of expect with a Hostname), and each weighted cluster is held with one endpoint (at
// the entry's address, for a map of expect). gRPC flavour: each map of expect of which
// anything is held (its listener or its route configuration), intact when the listener
// "<service>.<namespace>" names the route configuration "<namespace>/<map>", which holds the
// virtual host "<namespace>/<map>" with that listener's name among its domains, and the
// clusters are as for Envoy. A map whose chain is broken is not present; its Broken names
// the first failing link.
func (c chain) held(envoy bool, expect map[string]mapExpect) map[string]heldState {
	out := map[string]heldState{}
	if envoy {
		rc, ok := c.routes[envoyRouteConfig]
		if !ok {
			return out
		}
		broken := ""
		switch rds, ok := c.listeners[envoyListener]; {
		case !ok:
			broken = "listener " + envoyListener + " not held"
		case rds != envoyRouteConfig:
			broken = fmt.Sprintf("listener %s names route configuration %q, not %s", envoyListener, rds, envoyRouteConfig)
		}
		for key, vh := range rc {
			exp, known := expect[key]
			b := broken
			if b == "" {
				b = envoyDomainsBroken(key, vh, exp, known)
			}
			out[key] = c.judge(key, vh, b, exp)
		}
		return out
	}
	for key, exp := range expect {
		ref := exp.ref
		lname, rcName := grpcListenerName(ref.Service, ref.Namespace), grpcRouteConfigName(ref.Namespace, ref.Name)
		rds, lok := c.listeners[lname]
		rc, rok := c.routes[rcName]
		if !lok && !rok {
			continue
		}
		vname := virtualHostName(ref.Namespace, ref.Name)
		vh, vok := rc[vname]
		broken := ""
		switch {
		case !lok:
			broken = "listener " + lname + " not held"
		case rds != rcName:
			broken = fmt.Sprintf("listener %s names route configuration %q, not %s", lname, rds, rcName)
		case !rok:
			broken = "route configuration " + rcName + " not held"
		case !vok:
			broken = "route configuration " + rcName + " has no virtual host " + vname
		case !slices.Contains(vh.domains, lname):
			broken = fmt.Sprintf("virtual host %s domains %v lack %s", vname, vh.domains, lname)
		}
		out[key] = c.judge(key, vh, broken, exp)
	}
	return out
}

// envoyDomainsBroken checks an Envoy virtual host's domains: at least one and, for a map
// with an expected Hostname, that hostname or a name under it (the workload's hostname
// operation gives a map "h-N.<Hostname>"; which one it has at a given moment is not tracked).
func envoyDomainsBroken(key string, vh vhost, exp mapExpect, known bool) string {
	if len(vh.domains) == 0 {
		return "virtual host " + key + " has no domain"
	}
	h := exp.ref.Hostname
	if !known || h == "" {
		return ""
	}
	if slices.ContainsFunc(vh.domains, func(d string) bool { return d == h || strings.HasSuffix(d, "."+h) }) {
		return ""
	}
	return fmt.Sprintf("virtual host %s domains %v hold neither %s nor a name under it", key, vh.domains, h)
}

// judge returns the state of map key's virtual host vh, broken before its clusters when
// broken is set, else checking that each weighted cluster is held with one endpoint at the
// expected address.
func (c chain) judge(key string, vh vhost, broken string, exp mapExpect) heldState {
	h := heldState{weights: renderWeights(key, vh.weighted), domains: slices.Sorted(slices.Values(vh.domains))}
	prefix := key + "/"
	for _, wc := range vh.weighted {
		eps, ok := c.clusters[wc.name]
		entry := strings.TrimPrefix(wc.name, prefix)
		for _, ep := range eps {
			h.endpoints = append(h.endpoints, entry+"="+ep)
		}
		if broken != "" {
			continue
		}
		want, expected := exp.endpoints[entry]
		switch {
		case !ok:
			broken = "cluster " + wc.name + " not held"
		case len(eps) != 1:
			broken = fmt.Sprintf("cluster %s has %d endpoints, not 1", wc.name, len(eps))
		case expected && strings.HasPrefix(wc.name, prefix) && eps[0] != want:
			broken = fmt.Sprintf("cluster %s endpoint %s, not %s", wc.name, eps[0], want)
		}
	}
	slices.Sort(h.endpoints)
	h.broken, h.present = broken, broken == ""
	return h
}

// renderWeights renders the positive weights of map key's virtual host as
// "cluster=weight,..." sorted, each cluster by its entry name (the xDS cluster name without
// the "<namespace>/<map>/" of the map; a cluster of another map keeps its full name, so the
// checker sees it). No weighted cluster (the fixed 503 of a map with no positive weight, in
// both flavours) renders as "".
func renderWeights(key string, weighted []weightedCluster) string {
	prefix := key + "/"
	parts := make([]string, 0, len(weighted))
	for _, wc := range weighted {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(wc.name, prefix), wc.weight))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// canonicalWeights renders a virtual host's positive weights (see renderWeights).
func canonicalWeights(vh *routev3.VirtualHost) string {
	return renderWeights(vh.GetName(), decodeVirtualHost(vh).weighted)
}
