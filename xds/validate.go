package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	dnsclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dns/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
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
// clusters exist, every listener's route configuration exists, and a logical DNS cluster
// (type LOGICAL_DNS, or DNSClusterType with all addresses in one endpoint) has exactly one
// endpoint. It reports every problem, each naming the resource.
func Validate(res Resources) error { return (&validator{}).validate(res) }

// validator runs Validate, remembering from one call to the next what it found per
// message, so a snapshot that reuses unchanged resources re-checks only the new ones. A
// list that differs from the last call's in a few positions, each new message keeping the
// name of the one it replaces (a drain: one new route configuration; a changed map: its
// clusters and routes), is patched: only the new messages are checked, the cross-resource
// checks included, since the names they check against are the same. Any other change
// checks the list again, the unchanged messages' own checks remembered. Safe for
// concurrent use.
type validator struct {
	mu        sync.Mutex
	clusters  checkedKind[*clusterv3.Cluster]
	routes    checkedKind[*routev3.RouteConfiguration]
	listeners checkedKind[*listenerv3.Listener]
	// vhosts are the virtual hosts that passed their own checks (ValidateAll) and, in
	// crossed, those whose routes passed the checks against the cluster names.
	vhosts, crossed map[proto.Message]bool
	live            int     // len(vhosts)+len(crossed) after the last prune
	refErrs         []error // listeners naming a route configuration that does not exist
	// encoded checks the route configuration and clusters of a set that holds them
	// encoded (see envoySet).
	encoded encodedChecks
}

type namedMessage interface {
	proto.Message
	GetName() string
}

// checkedKind is what the validator found for one kind of resource.
type checkedKind[T namedMessage] struct {
	list   []T
	names  map[string]int             // how many messages have each name
	refs   map[proto.Message][]string // a listener's route configuration names
	passed map[proto.Message]bool     // passed every check of its own
	failed map[proto.Message][]error  // what its checks found
	dups   []string                   // the names used twice, sorted
}

// patch returns the positions where list has other messages than the last list, and
// whether patching them is right: the lengths match, few positions changed, and each new
// message has the name of the one it replaces.
func (k *checkedKind[T]) patch(list []T) ([]int, bool) {
	if k.passed == nil || len(list) != len(k.list) {
		return nil, false
	}
	var changed []int
	for i, m := range list {
		if any(m) != any(k.list[i]) {
			if m.GetName() != k.list[i].GetName() || len(changed) > len(list)/4 {
				return nil, false
			}
			changed = append(changed, i)
		}
	}
	return changed, true
}

// check runs one kind's checks: own checks a message (its errors, and for a listener its
// route configuration names). Only the changed positions are checked when the list can be
// patched and patchable says the names own depends on are the same; then and when the
// messages' own checks are reused, patchable must say so. It reports whether the kind's
// names are the same as before and whether the list is.
func (k *checkedKind[T]) check(list []T, patchable bool, own func(m T) ([]error, []string)) (sameNames, unchanged bool) {
	if changed, ok := k.patch(list); ok && patchable {
		for _, i := range changed {
			old := k.list[i]
			delete(k.passed, old)
			delete(k.failed, old)
			delete(k.refs, old)
			k.record(list[i], own)
		}
		if len(changed) > 0 {
			k.list = slices.Clone(list)
		}
		return true, len(changed) == 0
	}
	prev := *k
	*k = checkedKind[T]{list: slices.Clone(list), names: make(map[string]int, len(list)), refs: map[proto.Message][]string{},
		passed: make(map[proto.Message]bool, len(list)), failed: map[proto.Message][]error{}}
	for _, m := range list {
		k.names[m.GetName()]++
		if prev.passed[m] && patchable {
			k.passed[m] = true
			if r, ok := prev.refs[m]; ok {
				k.refs[m] = r
			}
			continue
		}
		k.record(m, own)
	}
	same := len(prev.names) == len(k.names)
	for n, c := range k.names {
		if c > 1 {
			k.dups = append(k.dups, n)
		}
		if same && prev.names[n] != c {
			same = false
		}
	}
	slices.Sort(k.dups)
	return same, false
}

func (k *checkedKind[T]) record(m T, own func(m T) ([]error, []string)) {
	errs, refs := own(m)
	if refs != nil {
		k.refs[m] = refs
	}
	if len(errs) > 0 {
		k.failed[m] = errs
		return
	}
	k.passed[m] = true
}

// errs lists what the checks found, in list order, duplicates first.
func (k *checkedKind[T]) errs(kind string) []error {
	var out []error
	for _, n := range k.dups {
		bad(&out, kind, n, ErrDuplicate)
	}
	if len(k.failed) == 0 {
		return out
	}
	for _, m := range k.list {
		out = append(out, k.failed[m]...)
	}
	return out
}

func (v *validator) validate(res Resources) error {
	if res.envoy != nil {
		return v.validateEncoded(res)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	sameClusters, _ := v.clusters.check(res.Clusters, true, v.checkCluster)
	if !sameClusters || v.crossed == nil {
		v.crossed = map[proto.Message]bool{}
	}
	if v.vhosts == nil {
		v.vhosts = map[proto.Message]bool{}
	}
	sameRoutes, _ := v.routes.check(res.Routes, sameClusters, v.checkRoutes)
	_, sameListeners := v.listeners.check(res.Listeners, true, v.checkListener)
	if !sameRoutes || !sameListeners || v.refErrs == nil {
		v.refErrs = []error{}
		for _, l := range res.Listeners {
			for _, name := range v.listeners.refs[l] {
				if v.routes.names[name] == 0 {
					bad(&v.refErrs, "listener", l.Name, fmt.Errorf("route configuration %q does not exist", name))
				}
			}
		}
	}
	v.prune(res.Routes)
	return errors.Join(slices.Concat(v.clusters.errs("cluster"), v.routes.errs("route configuration"), v.listeners.errs("listener"), v.refErrs)...)
}

// prune forgets the virtual hosts no route configuration has any more, once they are as
// many again as at the last prune (so its cost is spread over the calls between).
func (v *validator) prune(routes []*routev3.RouteConfiguration) {
	if len(v.vhosts)+len(v.crossed) <= 2*v.live+64 {
		return
	}
	live := map[proto.Message]bool{}
	for _, rc := range routes {
		for _, vh := range rc.VirtualHosts {
			live[vh] = true
		}
	}
	maps.DeleteFunc(v.vhosts, func(m proto.Message, _ bool) bool { return !live[m] })
	maps.DeleteFunc(v.crossed, func(m proto.Message, _ bool) bool { return !live[m] })
	v.live = len(v.vhosts) + len(v.crossed)
}

func bad(errs *[]error, kind, name string, err error) {
	*errs = append(*errs, fmt.Errorf("%w: %s %q: %w", ErrInvalidResources, kind, name, err))
}

func (v *validator) checkCluster(c *clusterv3.Cluster) ([]error, []string) {
	var errs []error
	if err := c.ValidateAll(); err != nil {
		bad(&errs, "cluster", c.Name, err)
	}
	logical, err := logicalDNS(c)
	if err != nil {
		bad(&errs, "cluster", c.Name, err)
	}
	if logical {
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
			bad(&errs, "cluster", c.Name, errors.New("a logical DNS cluster needs exactly one locality with one endpoint"))
		}
	}
	return errs, nil
}

// logicalDNS reports whether c resolves its one host as one endpoint: type LOGICAL_DNS, or
// the cluster type DNSClusterType with all_addresses_in_single_endpoint. An unreadable
// DNSClusterType config is an error.
func logicalDNS(c *clusterv3.Cluster) (bool, error) {
	if c.GetType() == clusterv3.Cluster_LOGICAL_DNS {
		return true, nil
	}
	ct := c.GetClusterType()
	if ct.GetName() != DNSClusterType {
		return false, nil
	}
	var dns dnsclusterv3.DnsCluster
	if err := ct.GetTypedConfig().UnmarshalTo(&dns); err != nil {
		return false, fmt.Errorf("cluster type %s: %w", DNSClusterType, err)
	}
	return dns.GetAllAddressesInSingleEndpoint(), nil
}

// checkRoutes checks one route configuration: its own fields and virtual hosts (each
// virtual host remembered), its hosts, and its routes against the cluster names.
func (v *validator) checkRoutes(rc *routev3.RouteConfiguration) ([]error, []string) {
	var errs []error
	if err := validateRouteConfiguration(rc, v.vhosts); err != nil {
		bad(&errs, "route configuration", rc.Name, err)
	}
	errs = append(errs, duplicateHosts(rc)...)
	for _, vh := range rc.VirtualHosts {
		if v.crossed[vh] {
			continue
		}
		n := len(errs)
		for _, r := range vh.Routes {
			for _, err := range checkRoute(r, v.clusters.names) {
				bad(&errs, "route", rc.Name+"/"+vh.Name, err)
			}
		}
		if len(errs) == n {
			v.crossed[vh] = true
		}
	}
	return errs, nil
}

func (v *validator) checkListener(l *listenerv3.Listener) ([]error, []string) {
	var errs []error
	if err := l.ValidateAll(); err != nil {
		bad(&errs, "listener", l.Name, err)
	}
	names := []string{}
	for _, hcmAny := range connectionManagers(l) {
		hcm := &hcmv3.HttpConnectionManager{}
		if err := hcmAny.UnmarshalTo(hcm); err != nil {
			bad(&errs, "listener", l.Name, fmt.Errorf("http connection manager: %w", err))
			continue
		}
		if err := hcm.ValidateAll(); err != nil {
			bad(&errs, "listener", l.Name, fmt.Errorf("http connection manager: %w", err))
		}
		names = append(names, hcm.GetRds().GetRouteConfigName())
	}
	return errs, names
}

// ErrDuplicate marks a name used twice where the data plane needs it unique.
var ErrDuplicate = errors.New("duplicate name")

// duplicateHosts reports every virtual host name and every domain (case-insensitively, as
// Envoy compares them) used twice within rc. A route configuration with one virtual host
// of a few domains (the gRPC flavour's) is checked without allocating.
func duplicateHosts(rc *routev3.RouteConfiguration) []error {
	var errs []error
	if len(rc.VirtualHosts) == 1 && len(rc.VirtualHosts[0].Domains) <= 8 {
		ds := rc.VirtualHosts[0].Domains
		for i := range ds {
			for j := range i {
				if strings.EqualFold(ds[i], ds[j]) {
					errs = append(errs, duplicateErr(rc.Name, "domain", strings.ToLower(ds[i])))
				}
			}
		}
		return errs
	}
	hosts := newHostNames(rc.Name, len(rc.VirtualHosts))
	for _, vh := range rc.VirtualHosts {
		hosts.add(vh.Name, vh.Domains)
	}
	return append(errs, hosts.errs...)
}

// hostNames finds, across the virtual hosts of one route configuration added to it, each
// virtual host name and each domain (case-insensitively, as Envoy compares them) used
// more than once; each is reported once, in errs.
type hostNames struct {
	rc      string
	names   map[string]bool
	domains map[string]int // by lower-case domain: how many virtual hosts have it
	errs    []error
}

func newHostNames(rc string, vhosts int) *hostNames {
	return &hostNames{rc: rc, names: make(map[string]bool, vhosts), domains: make(map[string]int, vhosts)}
}

// add counts one virtual host's name and domains.
func (h *hostNames) add(name string, domains []string) {
	if h.names[name] {
		h.errs = append(h.errs, duplicateErr(h.rc, "virtual host", name))
	}
	h.names[name] = true
	for _, d := range domains {
		d = strings.ToLower(d)
		if h.domains[d]++; h.domains[d] == 2 {
			h.errs = append(h.errs, duplicateErr(h.rc, "domain", d))
		}
	}
}

// duplicateErr is the error for a kind's name used twice in route configuration rc.
func duplicateErr(rc, kind, name string) error {
	return fmt.Errorf("%w: route configuration %q: %w: %s %q", ErrInvalidResources, rc, ErrDuplicate, kind, name)
}

// validateRouteConfiguration is rc.ValidateAll, with each virtual host in passed not
// checked again and each that passes added to it: the Envoy flavour's one route
// configuration is new on every change but shares all other services' virtual hosts.
func validateRouteConfiguration(rc *routev3.RouteConfiguration, passed map[proto.Message]bool) error {
	if err := routeShell(rc).ValidateAll(); err != nil {
		return err
	}
	var errs []error
	for i, vh := range rc.VirtualHosts {
		if passed[vh] {
			continue
		}
		if err := vh.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("virtual_hosts[%d] %q: %w", i, vh.GetName(), err))
			continue
		}
		passed[vh] = true
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

func checkRoute(r *routev3.Route, clusters map[string]int) []error {
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
		if clusters[cw.Name] == 0 {
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
	if res.envoy != nil {
		v, _, err := (&versioner{}).encodedVersions(res)
		return v, err
	}
	return (&versioner{}).versions(res)
}

// versioner computes TypeVersions, remembering each resource's digest by message pointer
// from one call to the next: the Translator hands back an unchanged service's resources as
// the same immutable messages, so only new ones are encoded. A type whose list is the same
// messages as in the last call keeps its version without a look at them. Safe for
// concurrent use.
type versioner struct {
	mu        sync.Mutex
	listeners summed[*listenerv3.Listener]
	routes    summed[*routev3.RouteConfiguration]
	clusters  summed[*clusterv3.Cluster]
	// envoy versions the route configuration and clusters of a set that holds them
	// encoded (see envoySet).
	envoy encodedVersions
}

// summed is one type's last list, the sums of its messages by position and by message
// (with, for route configurations, their virtual hosts') and its version.
type summed[T proto.Message] struct {
	list    []T
	sums    [][sha256.Size]byte
	byMsg   map[proto.Message][sha256.Size]byte
	base    int // len(byMsg) after the last full update
	version string
}

// update sets the version of list. A list that differs from the last one in a few
// positions sums only the new messages there; any other list is summed again, the sums
// of messages seen before reused (which also forgets the sums of messages gone).
func (s *summed[T]) update(list []T, sum func(sm *summer, m proto.Message) ([sha256.Size]byte, error)) error {
	if changed, ok := patchable(s.list, list); ok && s.byMsg != nil && len(s.byMsg) <= 2*s.base+64 {
		if len(changed) == 0 {
			return nil
		}
		sm := &summer{prev: []map[proto.Message][sha256.Size]byte{s.byMsg}, next: s.byMsg}
		for _, i := range changed {
			delete(s.byMsg, s.list[i])
			v, err := sum(sm, list[i])
			if err != nil {
				return err
			}
			s.sums[i] = v
			s.list[i] = list[i]
		}
		s.version = digestSums(s.sums)
		return nil
	}
	sm := &summer{prev: []map[proto.Message][sha256.Size]byte{s.byMsg}, next: make(map[proto.Message][sha256.Size]byte, len(list))}
	sums := make([][sha256.Size]byte, len(list))
	for i, m := range list {
		v, err := sum(sm, m)
		if err != nil {
			return err
		}
		sums[i] = v
	}
	s.list, s.sums, s.byMsg, s.base, s.version = slices.Clone(list), sums, sm.next, len(sm.next), digestSums(sums)
	return nil
}

// patchable returns the positions where list has other messages than prev, and whether
// they are few enough (and the lengths equal) to update only those.
func patchable[T proto.Message](prev, list []T) ([]int, bool) {
	if len(list) != len(prev) {
		return nil, false
	}
	var changed []int
	for i, m := range list {
		if any(m) != any(prev[i]) {
			if len(changed) > len(list)/4 {
				return nil, false
			}
			changed = append(changed, i)
		}
	}
	return changed, true
}

// digestSums is the version of a type whose messages have sums, in order.
func digestSums(sums [][sha256.Size]byte) string {
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (v *versioner) versions(res Resources) (Versions, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	plain := func(sm *summer, m proto.Message) ([sha256.Size]byte, error) { return sm.sum(m) }
	if err := v.listeners.update(res.Listeners, plain); err != nil {
		return nil, err
	}
	if err := v.routes.update(res.Routes, func(sm *summer, m proto.Message) ([sha256.Size]byte, error) {
		return sm.route(m.(*routev3.RouteConfiguration))
	}); err != nil {
		return nil, err
	}
	if err := v.clusters.update(res.Clusters, plain); err != nil {
		return nil, err
	}
	return Versions{resource.ListenerType: v.listeners.version, resource.RouteType: v.routes.version, resource.ClusterType: v.clusters.version}, nil
}

// summer returns a function that gives a resource's content digest (hex): the sum the last
// versions call gave it, else its encoding's.
func (v *versioner) summer() func(types.Resource) (string, error) {
	v.mu.Lock()
	prev := []map[proto.Message][sha256.Size]byte{v.listeners.byMsg, v.routes.byMsg, v.clusters.byMsg} // changed only by versions, which SetResources serializes with this
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
		return resourceVersion(sum), nil
	}
}

// resourceVersion is the version of a resource whose content digest is sum: the digest's
// first 128 bits in hex. A collision between two contents of one name is as unlikely as
// one of a 128-bit hash; the full 64 digits cost 32 bytes more for every served resource
// and every stream's record of it.
func resourceVersion(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:16]) }

// clusterVersion is the cluster version of a set of clusters served between two of the
// versioner's calls (SetResources' union of old and new clusters); it remembers nothing.
func (v *versioner) clusterVersion(clusters []*clusterv3.Cluster) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sm := &summer{prev: []map[proto.Message][sha256.Size]byte{v.clusters.byMsg}, next: make(map[proto.Message][sha256.Size]byte, len(clusters))}
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
	prev []map[proto.Message][sha256.Size]byte // looked up in order
	next map[proto.Message][sha256.Size]byte
	buf  []byte
}

// lookup is m's sum in prev.
func (s *summer) lookup(m proto.Message) ([sha256.Size]byte, bool) {
	for _, p := range s.prev {
		if sum, ok := p[m]; ok {
			return sum, true
		}
	}
	return [sha256.Size]byte{}, false
}

func (s *summer) sum(m proto.Message) ([sha256.Size]byte, error) {
	sum, ok := s.lookup(m)
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
	sum, ok := s.lookup(rc)
	if ok { // its virtual hosts are in prev too: keep them for the next call
		for _, vh := range rc.VirtualHosts {
			s.next[vh], _ = s.lookup(vh)
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
