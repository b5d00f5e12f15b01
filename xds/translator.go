package xds

import (
	"maps"
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
)

// Translator translates services into both flavours and validates each service on its own,
// reusing what it built for every service whose content is unchanged since the previous
// call, so one drain re-translates one service, not the fleet. Its output is the same as
// TranslateEnvoy's, TranslateGRPC's and Partition's. It is not safe for concurrent use.
//
// Used through Update and Resources, it holds the fleet itself: a change hands it only the
// changed services, a flavour is translated only when asked for, and a drain patches the
// previous lists (see Resources). A service's resources that a change leaves equal are
// kept as the same messages (Envoy: the same encodings; that flavour's clusters and
// virtual hosts are held only encoded, see envoyEnc).
// Validate and Partition go with either use; Prune must not be called once Update has been.
type Translator struct {
	opts  EnvoyOptions
	cache map[string]*translated // by service key
	seen  map[string]bool        // keys used since the last Prune
	fleet *fleet                 // the services set by Update; nil until then
}

// translated is what one service's content translates to.
type translated struct {
	content string // what the entry was built from (see contentKey)
	valid   error  // Partition's verdict
	envoy   *envoyEnc
	envoyOK error
	grpc    *Resources
	grpcOK  error
	// wasEnvoy and wasGRPC are the parts of the service's previous content, until this
	// content's parts are built: the resources equal to theirs are reused (a drain changes
	// the route, not the clusters or listeners), so later stages see the same messages.
	wasEnvoy *envoyEnc
	wasGRPC  *Resources
}

// NewTranslator returns a Translator for the Envoy flavour shaped by opts.
func NewTranslator(opts EnvoyOptions) *Translator {
	return &Translator{opts: opts, cache: map[string]*translated{}, seen: map[string]bool{}}
}

// contentKey is everything about s that its resources are built from: the content digest
// (which covers spec.service, the gRPC listener name) and, with no positive weight, the
// fixed response body.
func contentKey(s Service) string {
	k := s.Digest()
	if !s.routable() {
		k += "\x00" + s.noRouteBody()
	}
	return k
}

func (t *Translator) entry(s Service) *translated {
	key := s.key()
	t.seen[key] = true
	content := contentKey(s)
	e := t.cache[key]
	if e == nil || e.content != content {
		next := &translated{content: content, valid: validService(t.opts, s)}
		if e != nil {
			next.wasEnvoy, next.wasGRPC = e.envoy, e.grpc
			if next.wasEnvoy == nil {
				next.wasEnvoy = e.wasEnvoy
			}
			if next.wasGRPC == nil {
				next.wasGRPC = e.wasGRPC
			}
		}
		e = next
		t.cache[key] = e
	}
	return e
}

// Partition is Partition(opts, services), with each service's verdict reused while its
// content is unchanged.
func (t *Translator) Partition(services []Service) (valid []Service, invalid map[string]error) {
	invalid = map[string]error{}
	for _, s := range services {
		if err := t.entry(s).valid; err != nil {
			invalid[s.Key()] = err
			continue
		}
		valid = append(valid, s)
	}
	return valid, invalid
}

// Validate is Partition's verdict on one service, reused while its content is unchanged.
func (t *Translator) Validate(s Service) error { return t.entry(s).valid }

// Envoy is TranslateEnvoy(opts, services), its route configuration and clusters held
// encoded (see Resources).
func (t *Translator) Envoy(services []Service) (Resources, error) {
	parts := make([]*envoyEnc, 0, len(services))
	for _, s := range sortedServices(services) {
		p, err := t.envoyPart(s)
		if err != nil {
			return Resources{}, err
		}
		parts = append(parts, p)
	}
	return assembleEnvoyEncoded(t.opts, parts)
}

// GRPC is TranslateGRPC(services).
func (t *Translator) GRPC(services []Service) (Resources, error) {
	parts := make([]Resources, 0, len(services))
	for _, s := range sortedServices(services) {
		e := t.entry(s)
		if e.grpc == nil && e.grpcOK == nil {
			part, err := translateGRPCService(s)
			e.grpc, e.grpcOK = &part, err
		}
		if e.grpcOK != nil {
			return Resources{}, e.grpcOK
		}
		parts = append(parts, *e.grpc)
	}
	return assembleGRPC(parts), nil
}

// Prune forgets the services not used since the previous Prune.
func (t *Translator) Prune() {
	for key := range t.cache {
		if !t.seen[key] {
			delete(t.cache, key)
		}
	}
	t.seen = map[string]bool{}
}

// fleet is the set of services a Translator holds for Update and Resources, and what each
// flavour's last Resources was assembled from.
type fleet struct {
	services map[string]Service
	order    []string // the keys of services, sorted
	asm      map[Flavour]*assembly
	// limited: the gRPC flavour holds only the services in demanded (see Demand).
	limited  bool
	demanded map[string]bool
}

// inGRPC reports whether the gRPC flavour holds the service key (once set by Update).
func (f *fleet) inGRPC(key string) bool { return !f.limited || f.demanded[key] }

// assembly is one flavour's last assembled resources, with where each service's parts are,
// so that a change of a few services that keeps their resource names patches those
// positions instead of assembling the fleet again.
type assembly struct {
	res   Resources
	full  bool            // assemble everything next time
	dirty map[string]bool // services updated since res was assembled
	// The parts res was assembled from, by service key, and their positions.
	grpc      map[string]*Resources
	envoy     map[string]*envoyEnc
	listeners map[string]int // gRPC: listener name -> position
	routes    map[string]int // gRPC route configuration (by key) or Envoy virtual host -> position
	clusters  map[string]int // service key -> position of its first cluster
}

// Update sets the services the Translator holds for Resources: services (sealed, each
// valid on its own and with names no other holds; see Partition) replace the ones with
// their keys or join, and the services removed leave. What was translated for a removed
// service is forgotten.
func (t *Translator) Update(services []Service, removed []string) {
	f := t.fleetOf()
	for _, s := range services {
		key := s.key()
		if _, ok := f.services[key]; !ok {
			i, _ := slices.BinarySearch(f.order, key)
			f.order = slices.Insert(f.order, i, key)
		}
		f.services[key] = s
		for _, a := range f.asm {
			a.dirty[key] = true
		}
	}
	for _, key := range removed {
		if _, ok := f.services[key]; !ok {
			continue
		}
		delete(f.services, key)
		delete(f.demanded, key)
		delete(t.cache, key)
		delete(t.seen, key)
		if i, ok := slices.BinarySearch(f.order, key); ok {
			f.order = slices.Delete(f.order, i, i+1)
		}
		for _, a := range f.asm {
			a.dirty[key] = true
		}
	}
}

// Demand limits the gRPC flavour to the services demanded: from the first call on, its
// Resources hold only the services added here and not dropped since (each one also set by
// Update; a service Update removes is dropped too). Adding a service held or dropping one
// not held changes nothing. What was translated of a dropped service for the gRPC flavour
// is forgotten, so its memory goes once nothing else holds it (the server, until it serves
// the next resources). The Envoy flavour holds every service with hostnames.
func (t *Translator) Demand(add, drop []string) {
	f := t.fleetOf()
	f.limited = true
	if f.demanded == nil {
		f.demanded = map[string]bool{}
	}
	a := f.asm[FlavourGRPC]
	for _, key := range add {
		if f.demanded[key] {
			continue
		}
		f.demanded[key] = true
		if a != nil {
			a.dirty[key] = true
		}
	}
	for _, key := range drop {
		if !f.demanded[key] {
			continue
		}
		delete(f.demanded, key)
		if a != nil {
			a.dirty[key] = true
		}
		if e := t.cache[key]; e != nil {
			e.grpc, e.grpcOK, e.wasGRPC = nil, nil, nil
		}
	}
}

func (t *Translator) fleetOf() *fleet {
	if t.fleet == nil {
		t.fleet = &fleet{services: map[string]Service{}, asm: map[Flavour]*assembly{}}
	}
	return t.fleet
}

// Resources returns flavour's resources for the services Update has set: the same as
// TranslateEnvoy (of the services with hostnames) or TranslateGRPC (of the services
// demanded, see Demand) would. Each service is
// translated for a flavour only when that flavour is first asked for after the service
// changed, so a flavour never asked for costs nothing. When the services updated since the
// flavour's previous call kept their resource names (a drain), the previous lists are
// copied and only those services' positions replaced; the resources of every other
// service are the same messages as before.
func (t *Translator) Resources(flavour Flavour) (Resources, error) {
	a := t.fleetOf().asm[flavour]
	if a == nil {
		a = &assembly{full: true, dirty: map[string]bool{}}
		t.fleet.asm[flavour] = a
	}
	if !a.full {
		ok, err := t.patch(flavour, a)
		if err != nil {
			return Resources{}, err
		}
		if ok {
			a.dirty = map[string]bool{}
			return a.res, nil
		}
	}
	if err := t.assemble(flavour, a); err != nil {
		a.full = true
		return Resources{}, err
	}
	a.full, a.dirty = false, map[string]bool{}
	return a.res, nil
}

// gRPCPart is the gRPC translation of s, made once per content.
func (t *Translator) gRPCPart(s Service) (*Resources, error) {
	e := t.entry(s)
	if e.grpc == nil && e.grpcOK == nil {
		part, err := translateGRPCService(s)
		if err == nil {
			if e.wasGRPC != nil {
				reuseEqual(part.Listeners, e.wasGRPC.Listeners)
				reuseEqual(part.Routes, e.wasGRPC.Routes)
				reuseEqual(part.Clusters, e.wasGRPC.Clusters)
			}
		}
		e.grpc, e.grpcOK, e.wasGRPC = &part, err, nil
	}
	return e.grpc, e.grpcOK
}

// envoyPart is the Envoy translation of s, made once per content and held encoded: the
// messages are dropped once encoded. The resources whose encoding is the same as in the
// service's previous part are that part's.
func (t *Translator) envoyPart(s Service) (*envoyEnc, error) {
	e := t.entry(s)
	if e.envoy == nil && e.envoyOK == nil {
		part, err := translateEnvoyService(s)
		var enc *envoyEnc
		if err == nil {
			enc, err = encodeEnvoyPart(t.opts.RouteConfigName, part, e.wasEnvoy)
		}
		if err != nil {
			enc = nil
		}
		e.envoy, e.envoyOK, e.wasEnvoy = enc, err, nil
	}
	return e.envoy, e.envoyOK
}

// reuseEqual replaces each message of next that equals the one of the same name at the
// same position in prev with prev's.
func reuseEqual[T interface {
	proto.Message
	GetName() string
}](next, prev []T) {
	for i := range min(len(next), len(prev)) {
		if next[i].GetName() == prev[i].GetName() && proto.Equal(next[i], prev[i]) {
			next[i] = prev[i]
		}
	}
}

// assemble builds flavour's resources from every service it holds, in key order.
func (t *Translator) assemble(flavour Flavour, a *assembly) error {
	f := t.fleet
	a.listeners, a.routes, a.clusters = map[string]int{}, map[string]int{}, map[string]int{}
	a.grpc, a.envoy = nil, nil
	if flavour == FlavourEnvoy {
		a.envoy = make(map[string]*envoyEnc, len(f.order))
		parts := make([]*envoyEnc, 0, len(f.order))
		for _, key := range f.order {
			s := f.services[key]
			if len(s.Hostnames) == 0 {
				continue
			}
			p, err := t.envoyPart(s)
			if err != nil {
				return err
			}
			a.envoy[key] = p
			a.routes[key] = len(parts)
			parts = append(parts, p)
		}
		res, err := assembleEnvoyEncoded(t.opts, parts)
		if err != nil {
			return err
		}
		if len(a.res.Listeners) == 1 && proto.Equal(a.res.Listeners[0], res.Listeners[0]) {
			res.Listeners[0] = a.res.Listeners[0] // the same listener: the same message
		}
		at := 0
		for _, key := range f.order {
			if p := a.envoy[key]; p != nil {
				a.clusters[key] = at
				at += len(p.clusters)
			}
		}
		a.res = res
		return nil
	}
	order := f.order
	if f.limited { // the demanded services, not the fleet
		order = slices.DeleteFunc(slices.Sorted(maps.Keys(f.demanded)), func(key string) bool { _, ok := f.services[key]; return !ok })
	}
	a.grpc = make(map[string]*Resources, len(order))
	parts := make([]Resources, 0, len(order))
	var res Resources
	for _, key := range order {
		p, err := t.gRPCPart(f.services[key])
		if err != nil {
			return err
		}
		a.grpc[key] = p
		a.clusters[key] = len(res.Clusters)
		if len(p.Routes) > 0 {
			a.routes[key] = len(res.Routes)
		}
		res.Routes = append(res.Routes, p.Routes...)
		res.Clusters = append(res.Clusters, p.Clusters...)
		parts = append(parts, *p)
	}
	res.Listeners = assembleGRPC(parts).Listeners
	for i, l := range res.Listeners {
		a.listeners[l.Name] = i
	}
	a.res = res
	return nil
}

// patch replaces, in copies of the last assembled lists, the parts of the services updated
// since, and reports whether it could: every one of them was and still is in the flavour,
// with the same resource names. A list is copied only when one of its positions gets
// another message (the previous lists may still be read by whoever has them).
func (t *Translator) patch(flavour Flavour, a *assembly) (bool, error) {
	if len(a.dirty) == 0 {
		return true, nil
	}
	f := t.fleet
	res := a.res
	if flavour == FlavourEnvoy {
		parts := make(map[string]*envoyEnc, len(a.dirty))
		for key := range a.dirty {
			s, ok := f.services[key]
			old := a.envoy[key]
			in := ok && len(s.Hostnames) > 0
			if old == nil && !in {
				continue // neither was nor is in the flavour
			}
			if old == nil || !in {
				return false, nil
			}
			p, err := t.envoyPart(s)
			if err != nil {
				return false, err
			}
			if !sameNames(old.clusters, p.clusters) {
				return false, nil
			}
			parts[key] = p
		}
		prev := a.res.envoy
		set := *prev
		for key, p := range parts {
			set.vhosts = patchList(set.vhosts, prev.vhosts, a.routes[key], []*encodedMsg{p.vhost})
			set.clusters = patchList(set.clusters, prev.clusters, a.clusters[key], p.clusters)
			a.envoy[key] = p
		}
		res.envoy = &set
		a.res = res
		return true, nil
	}
	parts := make(map[string]*Resources, len(a.dirty))
	for key := range a.dirty {
		s, ok := f.services[key]
		old := a.grpc[key]
		in := ok && f.inGRPC(key)
		if old == nil && !in {
			continue // neither was nor is in the flavour
		}
		if old == nil || !in {
			return false, nil
		}
		p, err := t.gRPCPart(s)
		if err != nil {
			return false, err
		}
		if !sameNames(old.Listeners, p.Listeners) || !sameNames(old.Routes, p.Routes) || !sameNames(old.Clusters, p.Clusters) {
			return false, nil
		}
		parts[key] = p
	}
	for key, p := range parts {
		for _, l := range p.Listeners {
			res.Listeners = patchList(res.Listeners, a.res.Listeners, a.listeners[l.Name], []*listenerv3.Listener{l})
		}
		if len(p.Routes) > 0 {
			res.Routes = patchList(res.Routes, a.res.Routes, a.routes[key], p.Routes)
		}
		res.Clusters = patchList(res.Clusters, a.res.Clusters, a.clusters[key], p.Clusters)
		a.grpc[key] = p
	}
	a.res = res
	return true, nil
}

// patchList puts msgs at position at of list, a copy of prev made the first time a
// position gets another message (list is prev until then).
func patchList[T comparable](list, prev []T, at int, msgs []T) []T {
	for i, m := range msgs {
		if list[at+i] == m {
			continue
		}
		if &list[0] == &prev[0] {
			list = slices.Clone(prev)
		}
		list[at+i] = m
	}
	return list
}

// sameNames reports whether a and b name the same resources in the same order.
func sameNames[T interface{ GetName() string }](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return x.GetName() == y.GetName() })
}

// Keys returns the keys of the services Update has set, sorted.
func (t *Translator) Keys() []string {
	if t.fleet == nil {
		return nil
	}
	return slices.Clone(t.fleet.order)
}
