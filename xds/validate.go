package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"math"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// ErrInvalidResources marks a resource set that must not be served.
var ErrInvalidResources = errors.New("invalid xds resources")

// Validate runs ValidateAll on every resource and the semantic checks Envoy and gRPC make
// that go-control-plane does not: no two resources of a type share a name, no two virtual
// hosts of a route configuration share a name or a domain (Envoy rejects the whole route
// configuration: "Only unique values for domains are permitted"), every weighted_clusters
// has explicit weights summing to more than 0 and at most MaxUint32, every route's
// clusters exist, every listener's route configuration exists, and a LOGICAL_DNS cluster
// has exactly one endpoint. It reports every problem, each naming the resource.
func Validate(res Resources) error { return (&validator{}).validate(res) }

// validator runs Validate, remembering from one call to the next which messages passed the
// checks that depend on the message alone (and each listener's route configuration names),
// so a snapshot that reuses unchanged resources re-checks only the new ones. The
// cross-resource checks run every time. Safe for concurrent use.
type validator struct {
	mu   sync.Mutex
	prev map[proto.Message][]string // passed; for a listener, its route configuration names
}

func (v *validator) validate(res Resources) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	next := make(map[proto.Message][]string, len(res.Listeners)+len(res.Routes)+len(res.Clusters))
	var errs []error
	bad := func(kind, name string, err error) {
		errs = append(errs, fmt.Errorf("%w: %s %q: %w", ErrInvalidResources, kind, name, err))
	}
	clusters := make(map[string]bool, len(res.Clusters))
	for _, c := range res.Clusters {
		if clusters[c.Name] {
			bad("cluster", c.Name, ErrDuplicate)
		}
		clusters[c.Name] = true
		if _, ok := v.prev[c]; ok {
			next[c] = nil
			continue
		}
		n := len(errs)
		if err := c.ValidateAll(); err != nil {
			bad("cluster", c.Name, err)
		}
		if c.GetType() == clusterv3.Cluster_LOGICAL_DNS {
			eps := c.GetLoadAssignment().GetEndpoints()
			if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
				bad("cluster", c.Name, errors.New("a LOGICAL_DNS cluster needs exactly one locality with one endpoint"))
			}
		}
		if len(errs) == n {
			next[c] = nil
		}
	}
	routes := make(map[string]bool, len(res.Routes))
	for _, rc := range res.Routes {
		if _, ok := v.prev[rc]; !ok {
			if err := validateRouteConfiguration(rc, v.prev, next); err != nil {
				bad("route configuration", rc.Name, err)
			} else {
				next[rc] = nil
			}
		} else {
			next[rc] = nil
			for _, vh := range rc.VirtualHosts {
				next[vh] = nil
			}
		}
		if routes[rc.Name] {
			bad("route configuration", rc.Name, ErrDuplicate)
		}
		routes[rc.Name] = true
		errs = append(errs, duplicateHosts(rc)...)
		for _, vh := range rc.VirtualHosts {
			for _, r := range vh.Routes {
				for _, err := range checkRoute(r, clusters) {
					bad("route", rc.Name+"/"+vh.Name, err)
				}
			}
		}
	}
	for _, l := range res.Listeners {
		names, ok := v.prev[l]
		if !ok {
			n := len(errs)
			names = nil
			if err := l.ValidateAll(); err != nil {
				bad("listener", l.Name, err)
			}
			for _, hcmAny := range connectionManagers(l) {
				hcm := &hcmv3.HttpConnectionManager{}
				if err := hcmAny.UnmarshalTo(hcm); err != nil {
					bad("listener", l.Name, fmt.Errorf("http connection manager: %w", err))
					continue
				}
				if err := hcm.ValidateAll(); err != nil {
					bad("listener", l.Name, fmt.Errorf("http connection manager: %w", err))
				}
				names = append(names, hcm.GetRds().GetRouteConfigName())
			}
			if len(errs) == n {
				next[l] = names
			}
		} else {
			next[l] = names
		}
		for _, name := range names {
			if !routes[name] {
				bad("listener", l.Name, fmt.Errorf("route configuration %q does not exist", name))
			}
		}
	}
	if len(res.Listeners) > 1 {
		seen := make(map[string]bool, len(res.Listeners))
		for _, l := range res.Listeners {
			if seen[l.Name] {
				bad("listener", l.Name, ErrDuplicate)
			}
			seen[l.Name] = true
		}
	}
	v.prev = next
	return errors.Join(errs...)
}

// ErrDuplicate marks a name used twice where the data plane needs it unique.
var ErrDuplicate = errors.New("duplicate name")

// duplicateHosts reports every virtual host name and every domain (case-insensitively, as
// Envoy compares them) used twice within rc. A route configuration with one virtual host
// of a few domains (the gRPC flavour's) is checked without allocating.
func duplicateHosts(rc *routev3.RouteConfiguration) []error {
	var errs []error
	dup := func(kind, name string) {
		errs = append(errs, fmt.Errorf("%w: route configuration %q: %w: %s %q", ErrInvalidResources, rc.Name, ErrDuplicate, kind, name))
	}
	if len(rc.VirtualHosts) == 1 && len(rc.VirtualHosts[0].Domains) <= 8 {
		ds := rc.VirtualHosts[0].Domains
		for i := range ds {
			for j := range i {
				if strings.EqualFold(ds[i], ds[j]) {
					dup("domain", strings.ToLower(ds[i]))
				}
			}
		}
		return errs
	}
	names := make(map[string]bool, len(rc.VirtualHosts))
	domains := make(map[string]bool, len(rc.VirtualHosts))
	for _, vh := range rc.VirtualHosts {
		if names[vh.Name] {
			dup("virtual host", vh.Name)
		}
		names[vh.Name] = true
		for _, d := range vh.Domains {
			d = strings.ToLower(d)
			if domains[d] {
				dup("domain", d)
			}
			domains[d] = true
		}
	}
	return errs
}

// validateRouteConfiguration is rc.ValidateAll, with each virtual host in prev (passed
// before) not checked again and each that passes added to next: the Envoy flavour's one
// route configuration is new on every change but shares all other services' virtual hosts.
func validateRouteConfiguration(rc *routev3.RouteConfiguration, prev, next map[proto.Message][]string) error {
	if err := routeShell(rc).ValidateAll(); err != nil {
		return err
	}
	var errs []error
	for i, vh := range rc.VirtualHosts {
		if _, ok := prev[vh]; ok {
			next[vh] = nil
			continue
		}
		if err := vh.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("virtual_hosts[%d] %q: %w", i, vh.GetName(), err))
			continue
		}
		next[vh] = nil
	}
	return errors.Join(errs...)
}

// routeShell is rc without its virtual hosts, sharing every other field's value; read it,
// never change it.
func routeShell(rc *routev3.RouteConfiguration) *routev3.RouteConfiguration {
	shell := &routev3.RouteConfiguration{}
	dst := shell.ProtoReflect()
	rc.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != "virtual_hosts" {
			dst.Set(fd, v)
		}
		return true
	})
	return shell
}

func checkRoute(r *routev3.Route, clusters map[string]bool) []error {
	wc := r.GetRoute().GetWeightedClusters()
	if wc == nil {
		if r.GetDirectResponse() == nil {
			return []error{errors.New("a route needs weighted_clusters or a direct response")}
		}
		return nil
	}
	var errs []error
	var sum uint64
	for _, cw := range wc.Clusters {
		if cw.Weight == nil {
			errs = append(errs, fmt.Errorf("cluster %q has no explicit weight", cw.Name))
			continue
		}
		sum += uint64(cw.Weight.Value)
		if !clusters[cw.Name] {
			errs = append(errs, fmt.Errorf("cluster %q does not exist", cw.Name))
		}
	}
	if sum == 0 {
		errs = append(errs, errors.New("sum of weights in the weighted_clusters must be greater than 0"))
	}
	if sum > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("sum of weights %d exceeds %d", sum, uint64(math.MaxUint32)))
	}
	return errs
}

// connectionManagers returns the packed HTTP connection managers of a listener: in its
// filter chains (Envoy) or its api_listener (gRPC).
func connectionManagers(l *listenerv3.Listener) []*anypb.Any {
	var out []*anypb.Any
	if a := l.GetApiListener().GetApiListener(); a != nil {
		out = append(out, a)
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() == wellknown.HTTPConnectionManager && f.GetTypedConfig() != nil {
				out = append(out, f.GetTypedConfig())
			}
		}
	}
	return out
}

// TypeVersions returns, per type URL, a digest of that type's resources in their
// deterministic encoding: the same content always gives the same version, so republishing
// it sends nothing, also after a restart.
func TypeVersions(res Resources) (Versions, error) {
	return (&versioner{}).versions(res)
}

// versioner computes TypeVersions, remembering each resource's digest by message pointer
// from one call to the next: the Translator hands back an unchanged service's resources as
// the same immutable messages, so only new ones are encoded. Safe for concurrent use.
type versioner struct {
	mu   sync.Mutex
	prev map[proto.Message][sha256.Size]byte
}

func (v *versioner) versions(res Resources) (Versions, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sm := &summer{prev: v.prev, next: make(map[proto.Message][sha256.Size]byte, len(res.Listeners)+len(res.Routes)+len(res.Clusters))}
	listeners, err := digest(res.Listeners, sm.sum)
	if err != nil {
		return nil, err
	}
	routes, err := digest(res.Routes, func(m proto.Message) ([sha256.Size]byte, error) {
		return sm.route(m.(*routev3.RouteConfiguration))
	})
	if err != nil {
		return nil, err
	}
	clusters, err := digest(res.Clusters, sm.sum)
	if err != nil {
		return nil, err
	}
	v.prev = sm.next
	return Versions{resource.ListenerType: listeners, resource.RouteType: routes, resource.ClusterType: clusters}, nil
}

// summer returns a function that gives a resource's content digest (hex): the sum the last
// versions call gave it, else its encoding's.
func (v *versioner) summer() func(types.Resource) (string, error) {
	v.mu.Lock()
	prev := v.prev // replaced, never modified, by versions
	v.mu.Unlock()
	sm := &summer{prev: prev, next: map[proto.Message][sha256.Size]byte{}}
	return func(r types.Resource) (string, error) {
		var sum [sha256.Size]byte
		var err error
		if rc, ok := r.(*routev3.RouteConfiguration); ok {
			sum, err = sm.route(rc)
		} else {
			sum, err = sm.sum(r)
		}
		if err != nil {
			return "", err
		}
		return hex.EncodeToString(sum[:]), nil
	}
}

// clusterVersion is the cluster version of a set of clusters served between two of the
// versioner's calls (SetResources' union of old and new clusters); it remembers nothing.
func (v *versioner) clusterVersion(clusters []*clusterv3.Cluster) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sm := &summer{prev: v.prev, next: make(map[proto.Message][sha256.Size]byte, len(clusters))}
	return digest(clusters, sm.sum)
}

// digest hashes the sums of msgs, in order.
func digest[T proto.Message](msgs []T, sum func(proto.Message) ([sha256.Size]byte, error)) (string, error) {
	h := sha256.New()
	for _, m := range msgs {
		s, err := sum(m)
		if err != nil {
			return "", err
		}
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// summer sums messages by their deterministic encoding, reusing prev's sum of a message
// seen in the previous call and recording every sum it gives in next.
type summer struct {
	prev, next map[proto.Message][sha256.Size]byte
	buf        []byte
}

func (s *summer) sum(m proto.Message) ([sha256.Size]byte, error) {
	sum, ok := s.prev[m]
	if !ok {
		var err error
		if sum, err = s.encode(m); err != nil {
			return sum, err
		}
	}
	s.next[m] = sum
	return sum, nil
}

// encode sums m's deterministic encoding, remembering nothing.
func (s *summer) encode(m proto.Message) ([sha256.Size]byte, error) {
	var err error
	if s.buf, err = (proto.MarshalOptions{Deterministic: true}).MarshalAppend(s.buf[:0], m); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("encode %T: %w", m, err)
	}
	return sha256.Sum256(s.buf), nil
}

// route sums a route configuration as the sum of its other fields followed by its virtual
// hosts' sums, so a new route configuration encodes only its new virtual hosts (the Envoy
// flavour's one route configuration is new on every change).
func (s *summer) route(rc *routev3.RouteConfiguration) ([sha256.Size]byte, error) {
	sum, ok := s.prev[rc]
	if ok { // its virtual hosts are in prev too: keep them for the next call
		for _, vh := range rc.VirtualHosts {
			s.next[vh] = s.prev[vh]
		}
		s.next[rc] = sum
		return sum, nil
	}
	shell, err := s.encode(routeShell(rc))
	if err != nil {
		return sum, err
	}
	h := sha256.New()
	h.Write(shell[:])
	for _, vh := range rc.VirtualHosts {
		vs, err := s.sum(vh)
		if err != nil {
			return sum, err
		}
		h.Write(vs[:])
	}
	h.Sum(sum[:0])
	s.next[rc] = sum
	return sum, nil
}

// Partition translates and validates each service on its own, in both flavours (Envoy only
// when it has hostnames), and returns the services that can be served and, by key, why the
// others cannot. One invalid service then never keeps the others from being served.
func Partition(opts EnvoyOptions, services []Service) (valid []Service, invalid map[string]error) {
	invalid = map[string]error{}
	for _, s := range services {
		if err := validService(opts, s); err != nil {
			invalid[s.Key()] = err
			continue
		}
		valid = append(valid, s)
	}
	return valid, invalid
}

func validService(opts EnvoyOptions, s Service) error {
	one := []Service{s}
	if len(s.Hostnames) > 0 {
		res, err := TranslateEnvoy(opts, one)
		if err == nil {
			err = Validate(res)
		}
		if err != nil {
			return fmt.Errorf("envoy resources: %w", err)
		}
	}
	res, err := TranslateGRPC(one)
	if err == nil {
		err = Validate(res)
	}
	if err != nil {
		return fmt.Errorf("grpc resources: %w", err)
	}
	return nil
}
