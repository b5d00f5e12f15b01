package xds

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The Translator holds the Envoy flavour's clusters and virtual hosts only encoded: each
// message is built, checked on its own and encoded when its service's content changes,
// then dropped. At 10,000 maps of 8 clusters the messages were most of the publisher's
// heap, their encodings several times smaller. The Server versions, validates and serves
// such a set from the digests and encodings it is handed (see envoySet), byte for byte as
// it would the messages.

// heldResource is a resource held encoded: its name, the digest of its deterministic
// encoding (its content digest, as the versioner sums a message) and that encoding.
type heldResource interface {
	GetName() string
	digest() [sha256.Size]byte
	encoding() ([]byte, error)
	// assembled: encoding builds a new copy of held encodings (the route configuration of
	// its virtual hosts'), which is kept only while a response holds it (entry.weak).
	assembled() bool
}

// encodedMsg is one cluster or virtual host held only as its deterministic encoding.
// Never modified once made.
type encodedMsg struct {
	name    string
	sum     [sha256.Size]byte // of enc
	enc     []byte
	domains []string // a virtual host's domains
	bad     error    // what the message's own checks found; nil when it passed them
}

// GetName is the resource's name.
func (m *encodedMsg) GetName() string           { return m.name }
func (m *encodedMsg) digest() [sha256.Size]byte { return m.sum }
func (m *encodedMsg) encoding() ([]byte, error) { return m.enc, nil }
func (m *encodedMsg) assembled() bool           { return false }

// same reports whether o is m's resource with m's content.
func (m *encodedMsg) same(o *encodedMsg) bool { return o != nil && m.name == o.name && m.sum == o.sum }

// encodeMsg encodes m deterministically, with bad the message's own checks' findings.
func encodeMsg(name string, m proto.Message, bad error) (*encodedMsg, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", name, err)
	}
	return &encodedMsg{name: name, sum: sha256.Sum256(b), enc: b, bad: bad}, nil
}

// envoyEnc is one service's share of the Envoy flavour, encoded.
type envoyEnc struct {
	vhost    *encodedMsg
	clusters []*encodedMsg
}

// encodeEnvoyPart encodes p (the translation of one service; rc names the route
// configuration its virtual host goes in), after the checks Validate makes of each message
// on its own and of the virtual host's routes against the service's clusters. A resource
// whose encoding equals prev's of the same name at the same position is prev's, so an
// unchanged resource stays the same value (later stages skip it by identity).
func encodeEnvoyPart(rc string, p envoyPart, prev *envoyEnc) (*envoyEnc, error) {
	out := &envoyEnc{clusters: make([]*encodedMsg, len(p.clusters))}
	names := make(map[string]int, len(p.clusters))
	for i, c := range p.clusters {
		names[c.GetName()]++
		errs, _ := (*validator)(nil).checkCluster(c)
		m, err := encodeMsg(c.GetName(), c, errors.Join(errs...))
		if err != nil {
			return nil, err
		}
		if prev != nil && i < len(prev.clusters) && m.same(prev.clusters[i]) && m.bad == nil {
			m = prev.clusters[i]
		}
		out.clusters[i] = m
	}
	vh := p.vhost
	var errs []error
	if err := vh.ValidateAll(); err != nil {
		bad(&errs, "route configuration", rc, fmt.Errorf("virtual host %q: %w", vh.GetName(), err))
	}
	for _, r := range vh.GetRoutes() {
		for _, err := range checkRoute(r, names) {
			bad(&errs, "route", rc+"/"+vh.GetName(), err)
		}
	}
	m, err := encodeMsg(vh.GetName(), vh, errors.Join(errs...))
	if err != nil {
		return nil, err
	}
	m.domains = vh.GetDomains()
	if prev != nil && m.same(prev.vhost) && m.bad == nil {
		m = prev.vhost
	}
	out.vhost = m
	return out, nil
}

// envoySet is the Envoy flavour's route configuration and clusters, held encoded in the
// Resources a Translator makes (whose Routes and Clusters are then nil): the route
// configuration is route (every field but its virtual hosts) with vhosts, in order.
// Its lists are never modified.
type envoySet struct {
	route    *routev3.RouteConfiguration
	vhosts   []*encodedMsg
	clusters []*encodedMsg
}

// envoyRoute is an envoySet's route configuration as served: encoded from its virtual
// hosts' encodings when a client is first sent it.
type envoyRoute struct {
	shell  *routev3.RouteConfiguration
	vhosts []*encodedMsg
	sum    [sha256.Size]byte
}

func (r *envoyRoute) GetName() string           { return r.shell.GetName() }
func (r *envoyRoute) digest() [sha256.Size]byte { return r.sum }
func (r *envoyRoute) assembled() bool           { return true }

// encoding is the route configuration's deterministic encoding: its name, then each
// virtual host (field 2), then its other fields (numbered above 2), as the protobuf
// encoding orders fields by number (see encodeRoute).
func (r *envoyRoute) encoding() ([]byte, error) {
	opts := proto.MarshalOptions{Deterministic: true}
	head, err := opts.Marshal(&routev3.RouteConfiguration{Name: r.shell.Name})
	if err != nil {
		return nil, err
	}
	rest := proto.Clone(r.shell).(*routev3.RouteConfiguration)
	rest.Name = ""
	tail, err := opts.Marshal(rest)
	if err != nil {
		return nil, err
	}
	size := len(head) + len(tail)
	for _, vh := range r.vhosts {
		size += 1 + protowire.SizeBytes(len(vh.enc))
	}
	buf := make([]byte, 0, size)
	buf = append(buf, head...)
	for _, vh := range r.vhosts {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendBytes(buf, vh.enc)
	}
	return append(buf, tail...), nil
}

// routeSum is the route configuration's content digest as the versioner sums a route
// configuration message (summer.route): the sum of its other fields, then its virtual
// hosts' sums.
func routeSum(shell *routev3.RouteConfiguration, vhosts []*encodedMsg) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(shell)
	if err != nil {
		return sum, fmt.Errorf("encode %T: %w", shell, err)
	}
	s := sha256.Sum256(b)
	h := sha256.New()
	h.Write(s[:])
	for _, vh := range vhosts {
		h.Write(vh.sum[:])
	}
	h.Sum(sum[:0])
	return sum, nil
}

// encodedVersions versions an envoySet, remembering the last one's lists: a list that is
// the same as the last one keeps its version without a look at it.
type encodedVersions struct {
	clusters []*encodedMsg
	cluster  string
	shell    *routev3.RouteConfiguration
	vhosts   []*encodedMsg
	route    *envoyRoute
	version  string
}

// versions returns the route and cluster versions of set, and its route configuration.
func (v *encodedVersions) versions(set *envoySet) (route *envoyRoute, routeVersion, clusterVersion string, err error) {
	if v.clusters == nil || !slices.Equal(v.clusters, set.clusters) {
		sums := make([][sha256.Size]byte, len(set.clusters))
		for i, c := range set.clusters {
			sums[i] = c.sum
		}
		v.clusters, v.cluster = set.clusters, digestSums(sums)
	}
	if v.route == nil || v.shell != set.route || !slices.Equal(v.vhosts, set.vhosts) {
		sum, err := routeSum(set.route, set.vhosts)
		if err != nil {
			return nil, "", "", err
		}
		v.shell, v.vhosts = set.route, set.vhosts
		v.route = &envoyRoute{shell: set.route, vhosts: set.vhosts, sum: sum}
		v.version = digestSums([][sha256.Size]byte{sum})
	}
	return v.route, v.version, v.cluster, nil
}

// encodedChecks validates an envoySet: what Validate checks of the route configuration and
// the clusters, each message's own checks made when it was encoded. It remembers the last
// set that passed, so a set that differs from it in a few positions, each keeping its
// name (a drain), is checked only there.
type encodedChecks struct {
	clusters, vhosts []*encodedMsg
	domains          map[string]int // by lower-case domain: how many virtual hosts have it
}

// check returns what is wrong with set.
func (k *encodedChecks) check(set *envoySet) []error {
	if k.patch(set) {
		return nil
	}
	errs := k.full(set)
	if len(errs) > 0 {
		*k = encodedChecks{}
	}
	return errs
}

// patch reports whether set passes, checking only its positions that differ from the last
// set that passed; false when it cannot tell that way (then nothing is remembered).
func (k *encodedChecks) patch(set *envoySet) bool {
	if k.domains == nil || len(set.clusters) != len(k.clusters) || len(set.vhosts) != len(k.vhosts) {
		return false
	}
	changed := func(next, prev []*encodedMsg) ([]int, bool) {
		var at []int
		for i, m := range next {
			if m != prev[i] {
				if m.name != prev[i].name || m.bad != nil || len(at) > len(next)/4 {
					return nil, false
				}
				at = append(at, i)
			}
		}
		return at, true
	}
	cs, ok := changed(set.clusters, k.clusters)
	if !ok {
		return false
	}
	vs, ok := changed(set.vhosts, k.vhosts)
	if !ok {
		return false
	}
	for _, i := range vs {
		if slices.Equal(set.vhosts[i].domains, k.vhosts[i].domains) {
			continue
		}
		for _, d := range k.vhosts[i].domains {
			k.domains[strings.ToLower(d)]--
		}
		dup := false
		for _, d := range set.vhosts[i].domains {
			d = strings.ToLower(d)
			k.domains[d]++
			dup = dup || k.domains[d] > 1
		}
		if dup {
			*k = encodedChecks{}
			return false
		}
	}
	if len(cs) > 0 {
		k.clusters = slices.Clone(set.clusters)
	}
	if len(vs) > 0 {
		k.vhosts = slices.Clone(set.vhosts)
	}
	return true
}

// full checks all of set and remembers it when it passes.
func (k *encodedChecks) full(set *envoySet) []error {
	var errs []error
	rc := set.route.GetName()
	clusters := make(map[string]bool, len(set.clusters))
	for _, c := range set.clusters {
		if clusters[c.name] {
			bad(&errs, "cluster", c.name, ErrDuplicate)
		}
		clusters[c.name] = true
		if c.bad != nil {
			errs = append(errs, c.bad)
		}
	}
	if err := set.route.ValidateAll(); err != nil {
		bad(&errs, "route configuration", rc, err)
	}
	hosts := newHostNames(rc, len(set.vhosts))
	for _, vh := range set.vhosts {
		hosts.add(vh.name, vh.domains)
		if vh.bad != nil {
			errs = append(errs, vh.bad)
		}
	}
	errs = append(errs, hosts.errs...)
	if len(errs) == 0 {
		k.clusters, k.vhosts, k.domains = slices.Clone(set.clusters), slices.Clone(set.vhosts), hosts.domains
	}
	return errs
}

// heldOf is e's resource held encoded: its own when it is held so, else its message
// encoded.
func heldOf(e *entry) (heldResource, error) {
	if e.src != nil {
		return e.src, nil
	}
	return encodeMsg(e.name, e.msg, nil)
}

// clusterOf is e's cluster message: its own, else its encoding decoded.
func clusterOf(e *entry) (*clusterv3.Cluster, error) {
	if c, ok := e.msg.(*clusterv3.Cluster); ok {
		return c, nil
	}
	b, err := e.src.encoding()
	if err != nil {
		return nil, err
	}
	c := &clusterv3.Cluster{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("decode cluster %s: %w", e.name, err)
	}
	return c, nil
}

// digestHeld is the version of a type whose resources are held, in order.
func digestHeld(rs []heldResource) string {
	sums := make([][sha256.Size]byte, len(rs))
	for i, r := range rs {
		sums[i] = r.digest()
	}
	return digestSums(sums)
}

// validateEncoded is validate for a set whose route configuration and clusters are held
// encoded (res.envoy).
func (v *validator) validateEncoded(res Resources) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	errs := v.encoded.check(res.envoy)
	v.listeners.check(res.Listeners, true, v.checkListener)
	v.refErrs = nil // the message path's, recomputed when it is used again
	var refErrs []error
	for _, l := range res.Listeners {
		for _, name := range v.listeners.refs[l] {
			if name != res.envoy.route.GetName() {
				bad(&refErrs, "listener", l.Name, fmt.Errorf("route configuration %q does not exist", name))
			}
		}
	}
	return errors.Join(slices.Concat(errs, v.listeners.errs("listener"), refErrs)...)
}

// encodedVersions is versions for a set whose route configuration and clusters are held
// encoded (res.envoy); it also returns the route configuration as served.
func (v *versioner) encodedVersions(res Resources) (Versions, *envoyRoute, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.listeners.update(res.Listeners, func(sm *summer, m proto.Message) ([sha256.Size]byte, error) { return sm.sum(m) }); err != nil {
		return nil, nil, err
	}
	route, routes, clusters, err := v.envoy.versions(res.envoy)
	if err != nil {
		return nil, nil, err
	}
	return Versions{resource.ListenerType: v.listeners.version, resource.RouteType: routes, resource.ClusterType: clusters}, route, nil
}
