package xds

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/untrusted"
	"github.com/trafficmap/publisher/weights"
)

// waitingPrefix begins every Confirmation message that waits for clients to connect or ACK;
// the rest counts them.
const waitingPrefix = "waiting for xds clients: "

// Key returns the service's TrafficMap namespace/name.
func (s Service) Key() string { return s.key() }

// Digest is a digest of everything about one service that the xDS resources carry (its
// spec.service, its hostnames and, per entry, cluster, endpoint and effective weight), so two versions that
// serve the same service the same way give it the same digest. A service returned by
// Sealed answers from the digest it computed then.
func (s Service) Digest() string {
	if s.digest != "" {
		return s.digest
	}
	return s.computeDigest()
}

// Sealed returns s with its digest (and its ListenerNames) computed once, for a service that is read many times
// (every rebuild digests every served service several times). Its fields must not change
// afterwards; build a new Service instead (Sealed returns a sealed service as it is).
//
// A sealed service keeps of its Result only what the resources read (its Result is cleared):
// each entry's cluster, endpoint host, port, scheme and effective weight, and, when no
// weight is positive, the fixed response body.
func (s Service) Sealed() Service {
	if s.digest != "" { // its Result is gone: sealed once
		return s
	}
	s.digest = s.computeDigest()
	s.listeners = listenerNames(s)
	s.backends = backendsOf(s.Result)
	if !s.routable() {
		s.noRoute = noRouteReason(s.Result)
	}
	s.Result = weights.Result{}
	return s
}

func (s Service) computeDigest() string {
	return model.ContentDigest(s.Service, s.Hostnames, s.Withheld, s.Result.Entries)
}

// History remembers which content of each service the recent versions of each type served
// to each flavour carried, so a client's ACKed version of a type can be checked for a
// service's current content. A version that stays served while a service changes in
// another type (a drain changes routes, not clusters) carries the service's new digest
// too: its content for that service is the same.
//
// It is kept as two timelines per flavour, one tick per Record: when each type's version
// was served and when each service's digest changed (its last digestsPerKey changes); a
// version carries a digest when their times overlap. So a Record costs what changed, not
// the fleet. The versions kept per type are the last max, and, once the History follows a
// Tracker (Follow), every older one a connected client of the flavour holds or was sent
// (heldVersions): a client that has answered nothing for longer than max versions (a
// stalled Envoy) still holds the content of the services that have not changed since,
// and is judged so. So what is kept is bounded by max plus the versions the connected
// streams hold, usually one or two each. Safe for concurrent use.
type History struct {
	mu       sync.Mutex
	max      int
	flavours map[Flavour]*flavourHistory
	held     func(Flavour) map[string]map[string]bool // nil: none
}

// flavourHistory is one flavour's timelines.
type flavourHistory struct {
	tick    uint64
	changes map[string][]digestSpan // by service key, oldest first
	served  map[string]*typeHistory // by type URL
	// removed is the tick each service was last removed at, until it is served again or
	// forgotten (ForgetRemoval).
	removed map[string]uint64
}

// digestSpan: from tick on (until the next span), the service had digest.
type digestSpan struct {
	tick   uint64
	digest string
}

// typeHistory is when each recent version of one type was served.
type typeHistory struct {
	current string
	spans   []versionSpan // oldest first
}

// versionSpan: version was served from tick from to tick to (excluded; 0 while served).
type versionSpan struct {
	version  string
	from, to uint64
}

// digestsPerKey bounds the digest changes remembered per service; the newest (current)
// one is always kept.
const digestsPerKey = 8

// NewHistory keeps the last max versions per flavour and type (and, with Follow, those
// the connected clients hold).
func NewHistory(max int) *History {
	return &History{max: max, flavours: map[Flavour]*flavourHistory{}}
}

// Follow makes h keep, beyond the last max versions of each type, every version the
// connected streams of t hold or were sent (see History). Call it before the first Record.
func (h *History) Follow(t *Tracker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = func(f Flavour) map[string]map[string]bool { return heldVersions(t, f) }
}

// Record notes that versions are now served to flavour, with changed (new or changed
// services) at their digests and without the services removed; every other service keeps
// the digest it had. The first Record of a flavour names every service it serves.
func (h *History) Record(f Flavour, versions Versions, changed []Service, removed []string) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	var keep map[string]map[string]bool
	if held != nil {
		keep = held(f) // read before h's lock: the tracker is never called under it
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fh := h.flavours[f]
	if fh == nil {
		fh = &flavourHistory{changes: map[string][]digestSpan{}, served: map[string]*typeHistory{}, removed: map[string]uint64{}}
		h.flavours[f] = fh
	}
	fh.tick++
	for _, typ := range confirmTypes {
		version, ok := versions[typ]
		if !ok {
			continue
		}
		th := fh.served[typ]
		if th == nil {
			th = &typeHistory{}
			fh.served[typ] = th
		}
		if len(th.spans) > 0 && th.current == version {
			continue
		}
		if n := len(th.spans); n > 0 {
			th.spans[n-1].to = fh.tick
		}
		th.current = version
		th.spans = append(th.spans, versionSpan{version: version, from: fh.tick})
		th.spans = trimSpans(th.spans, h.max, keep[typ])
	}
	for _, s := range changed {
		key, d := s.Key(), s.Digest()
		spans := fh.changes[key]
		if n := len(spans); n > 0 && spans[n-1].digest == d {
			continue
		}
		spans = append(spans, digestSpan{tick: fh.tick, digest: d})
		if len(spans) > digestsPerKey {
			spans = slices.Delete(spans, 0, len(spans)-digestsPerKey)
		}
		fh.changes[key] = spans
		delete(fh.removed, key)
	}
	for _, key := range removed {
		delete(fh.changes, key)
		fh.removed[key] = fh.tick
	}
}

// trimSpans keeps the last max of spans (oldest first) and the older ones whose version
// is in keep.
func trimSpans(spans []versionSpan, max int, keep map[string]bool) []versionSpan {
	if len(spans) <= max {
		return spans
	}
	old := len(spans) - max
	kept := spans[:0]
	for i, v := range spans {
		if i >= old || keep[v.version] {
			kept = append(kept, v)
		}
	}
	clear(spans[len(kept):]) // drop the forgotten versions' strings
	return kept
}

// RemovedBy reports whether version of typeURL, served to flavour, was served at or after
// the last removal of the service key: a client that ACKed it holds none of the service's
// resources of that type (a type the removal left unchanged never carried any). False while
// no removal of key is recorded, and for a version no longer remembered.
func (h *History) RemovedBy(f Flavour, typeURL, version, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	fh := h.flavours[f]
	if fh == nil || fh.served[typeURL] == nil {
		return false
	}
	at, ok := fh.removed[key]
	if !ok {
		return false
	}
	for _, v := range fh.served[typeURL].spans {
		if v.version == version && (v.to == 0 || v.to > at) {
			return true
		}
	}
	return false
}

// ForgetRemoval drops what h remembers of the removal of the service key.
func (h *History) ForgetRemoval(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fh := range h.flavours {
		delete(fh.removed, key)
	}
}

// Carries reports whether version of typeURL served to flavour carried the service key
// with digest.
func (h *History) Carries(f Flavour, typeURL, version, key, digest string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	fh := h.flavours[f]
	if fh == nil || fh.served[typeURL] == nil {
		return false
	}
	spans := fh.changes[key]
	for _, v := range fh.served[typeURL].spans {
		if v.version == version && spanCarries(v, spans, digest) {
			return true
		}
	}
	return false
}

// spanCarries reports whether the version served over v carried a service whose digest
// changes are spans (oldest first) with digest: their times overlap.
func spanCarries(v versionSpan, spans []digestSpan, digest string) bool {
	for i, d := range spans {
		if d.digest != digest {
			continue
		}
		// d's digest held from d.tick until the next change (excluded).
		if v.to != 0 && d.tick >= v.to {
			continue
		}
		if i+1 < len(spans) && spans[i+1].tick <= v.from {
			continue
		}
		return true
	}
	return false
}

// onlyDigest reports whether a service whose digest changes are spans (oldest first) had
// digest, and no other, from tick from to tick to (excluded).
func onlyDigest(spans []digestSpan, digest string, from, to uint64) bool {
	if len(spans) == 0 || spans[0].tick > from {
		return false // not served then, or its changes then forgotten
	}
	for i, d := range spans {
		if d.tick >= to || (i+1 < len(spans) && spans[i+1].tick <= from) {
			continue // outside [from, to)
		}
		if d.digest != digest {
			return false
		}
	}
	return true
}

// CarriesSince reports whether version of typeURL served to flavour and every later one, up
// to the one served now, carried the service key with digest (Carries): a client that holds
// a resource as in version or any later version holds the service's content. A later
// version forgotten (see History) counts as carrying it only if the key's digest was digest
// alone while it was served. False for a version no longer remembered.
func (h *History) CarriesSince(f Flavour, typeURL, version, key, digest string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	fh := h.flavours[f]
	if fh == nil || fh.served[typeURL] == nil || version == "" {
		return false
	}
	served, spans := fh.served[typeURL].spans, fh.changes[key]
	start := slices.IndexFunc(served, func(v versionSpan) bool { return v.version == version })
	if start < 0 {
		return false
	}
	for i := start; i < len(served); i++ {
		v := served[i]
		if !spanCarries(v, spans, digest) {
			return false
		}
		if i+1 < len(served) && v.to != served[i+1].from && !onlyDigest(spans, digest, v.to, served[i+1].from) {
			return false // versions forgotten in between
		}
	}
	return true
}

// holds reports whether the stream cl, which holds a service's resources (names) of
// typeURL as hd says, holds them with the service key's digest: none fresh (not held at
// all), as in its ACKed version or a later one that changed none of names (so a version
// it rejected, or was never sent, since a change of other maps' resources leaves what it
// holds of this one where it was) and, for the resources sent again and not ACKed yet, as
// in the version it held them at or any later one (CarriesSince).
func (h *History) holds(cl ClientState, typeURL string, names []string, hd holding, key, digest string) bool {
	if hd.none || (hd.acked && !h.carriesUnchanged(cl, typeURL, names, key, digest)) {
		return false
	}
	for _, v := range hd.since {
		if !h.CarriesSince(cl.Flavour, typeURL, v, key, digest) {
			return false
		}
	}
	return true
}

// carriesUnchanged reports whether a version that cl holds names of typeURL as in (its
// ACKed version, or a later one that changed none of them: ClientState.unchanged) carried
// the service key with digest. The later ones are looked at only when the ACKed one did
// not carry it.
func (h *History) carriesUnchanged(cl ClientState, typeURL string, names []string, key, digest string) bool {
	acked := cl.Acked[typeURL]
	if h.Carries(cl.Flavour, typeURL, acked, key, digest) {
		return true
	}
	for _, v := range cl.unchanged(typeURL, acked, names)[1:] {
		if h.Carries(cl.Flavour, typeURL, v, key, digest) {
			return true
		}
	}
	return false
}

// concerns reports whether the rejection hd names concerns the service's resources
// (names) of typeURL. A delta stream's rejections are per resource (ClientState.held
// names only the service's own). A state-of-the-world NACK is of a whole version of the
// type: it concerns the service only when that version changed the service's resources
// from those the stream holds (its ACKed version), so one map's rejected resource does
// not hold the maps whose resources the rejected version left as they were.
func (cl ClientState) concerns(typeURL string, names []string, hd holding) bool {
	if !hd.rejected {
		return false
	}
	if cl.Unacked != nil {
		return true
	}
	return !slices.Contains(cl.unchanged(typeURL, cl.Acked[typeURL], names), hd.nack.Version)
}

// ServesCurrent reports whether the version of typeURL served to flavour now carries the
// service key with digest: the current content is out, so a client's other version of the
// type is older content (not a version this process has not built yet, as right after a
// restart, before its first snapshot).
func (h *History) ServesCurrent(f Flavour, typeURL, key, digest string) bool {
	h.mu.Lock()
	fh := h.flavours[f]
	current := ""
	if fh != nil && fh.served[typeURL] != nil {
		current = fh.served[typeURL].current
	}
	h.mu.Unlock()
	return current != "" && h.Carries(f, typeURL, current, key, digest)
}

// confirmTypes are the resource types that carry a service's weights and endpoints.
var confirmTypes = []string{resource.ListenerType, resource.RouteType, resource.ClusterType}

// Served is what one flavour serves of one service: the digest of its content and the
// names of its resources, per type URL.
type Served struct {
	Digest string
	Names  map[string][]string
}

// ServedBy returns what each flavour serves of s, for Confirm: the gRPC flavour its
// listeners (ListenerNames), its route configuration (named by its key) and its clusters;
// the Envoy flavour, for a service with hostnames, the one listener and route
// configuration shaped by opts and its clusters.
func ServedBy(opts EnvoyOptions, s Service) map[Flavour]Served {
	digest := s.Digest()
	entries := s.entries()
	clusters := make([]string, 0, len(entries))
	for _, e := range entries {
		clusters = append(clusters, ClusterName(s.Namespace, s.Name, e.cluster))
	}
	grpc := Served{Digest: digest, Names: map[string][]string{}}
	if listeners := ListenerNames(s); len(listeners) > 0 {
		grpc.Names[resource.ListenerType] = listeners
		grpc.Names[resource.RouteType] = []string{s.key()}
		grpc.Names[resource.ClusterType] = clusters
	}
	out := map[Flavour]Served{FlavourGRPC: grpc}
	if len(s.Hostnames) > 0 {
		out[FlavourEnvoy] = Served{Digest: digest, Names: map[string][]string{
			resource.ListenerType: {opts.ListenerName},
			resource.RouteType:    {opts.RouteConfigName},
			resource.ClusterType:  clusters,
		}}
	}
	return out
}

// ConfirmRemoval checks the clients that held the service key's resources, as held names
// them (what each flavour served of it before it was withdrawn): every client that may see
// it and still subscribes to one of them (by name or by wildcard) is relevant, and has
// confirmed once it ACKed, for each such type, a version served after the removal
// (History.RemovedBy). A client that dropped its subscriptions holds nothing of it.
func ConfirmRemoval(clients []ClientState, h *History, key string, held map[Flavour]Served) (acked, total int) {
	for _, cl := range clients {
		sv, ok := held[cl.Flavour]
		if !ok || !cl.MaySee(key) {
			continue
		}
		relevant, done := false, true
		for _, typ := range confirmTypes {
			names := sv.Names[typ]
			if len(names) == 0 || (cl.TypeURL != "" && cl.TypeURL != typ) || !cl.Subscribed[typ].IncludesAny(names) {
				continue
			}
			relevant = true
			// A resource sent again and not ACKed is held as in the version it was held
			// at then or a later one: each is served after the removal if that one was.
			// A fresh one (hd.none) is not held at all.
			hd := cl.held(typ, names)
			if hd.acked && !h.RemovedBy(cl.Flavour, typ, cl.Acked[typ], key) {
				done = false
			}
			for _, v := range hd.since {
				if !h.RemovedBy(cl.Flavour, typ, v, key) {
					done = false
				}
			}
		}
		if !relevant {
			continue
		}
		total++
		if done {
			acked++
		}
	}
	return acked, total
}

// Confirmation is the xDS side of one service's Published condition.
type Confirmation struct {
	// Done is true when at least the required number of clients is connected and every
	// relevant client has ACKed, for every resource type of the service it gets, a version
	// carrying the service's current content.
	Done bool
	// Acked and Total count the relevant clients that confirmed and all relevant ones.
	Acked, Total int
	// Connected counts the connected clients of the flavours that serve the service,
	// relevant or not (what --xds-min-clients is compared with).
	Connected int
	// Nack is the first rejection, by a relevant client, of a version carrying this
	// content, if any.
	Nack *ClientNack
	// Message says which confirmations were obtained, for the condition.
	Message string
}

// ClientNack is one client's rejection. NodeID and Nack.Message are the client's own
// words: show them only through Describe.
type ClientNack struct {
	NodeID, TypeURL string
	// Identity is the client's certificate identity, "" without mutual TLS.
	Identity string
	Nack
}

// Describe says who rejected what, for a condition, an Event or a log: the client by its
// certificate identity when it has one (its node id second), and every client-chosen part
// escaped and shortened (package untrusted: at most MaxID bytes for an id, MaxMessage for
// the NACK's text). The version is the server's own (the one it sent).
func (n ClientNack) Describe() string {
	return fmt.Sprintf("xds client %s rejected version %s (%s): %s", describeClient(n.Identity, n.NodeID),
		n.Version, typeLabel(n.TypeURL), untrusted.Quote(n.Message, untrusted.MaxMessage))
}

// Verdict is what Confirm decided about one client for one service.
type Verdict struct {
	// Relevant: the client subscribes to one of the service's resources (by name or by
	// wildcard), so it must confirm the service; an irrelevant client neither blocks nor
	// counts.
	Relevant bool
	// Acked: the client ACKed, for every type of the service it gets, a version carrying
	// the service's current content.
	Acked bool
	// Nack is the client's rejection of a version carrying that content, if any.
	Nack *ClientNack
}

// Judge decides whether cl is relevant to the service key served as served (by cl's
// flavour; a flavour absent from served does not serve it) and whether it has confirmed
// it. A client that may not see the service's namespace (see ClientState.MaySee) is never
// relevant: it is not sent the service's resources, so it neither holds nor confirms it. A
// relevant ADS stream must have ACKed every type the service has resources of (a
// gRPC client that subscribed to a listener goes on to its route configuration and
// clusters); a per-type stream only its own type.
func Judge(cl ClientState, h *History, key string, served map[Flavour]Served) Verdict {
	if !relevant(cl, key, served) {
		return Verdict{}
	}
	sv := served[cl.Flavour]
	v := Verdict{Relevant: true, Acked: true}
	for _, typ := range confirmTypes {
		if len(sv.Names[typ]) == 0 || (cl.TypeURL != "" && cl.TypeURL != typ) {
			continue
		}
		// A delta stream is judged per resource: only the service's own resources' ACKs
		// and NACKs count, and a resource sent again and not ACKed yet counts as held as
		// in the version it was held at then or any later one (see ClientState.Unacked).
		names := sv.Names[typ]
		hd := cl.held(typ, names)
		if v.Nack == nil && cl.concerns(typ, names, hd) && h.Carries(cl.Flavour, typ, hd.nack.Version, key, sv.Digest) {
			v.Nack = &ClientNack{NodeID: cl.NodeID, TypeURL: typ, Identity: cl.Access.Identity, Nack: hd.nack}
		}
		if !h.holds(cl, typ, names, hd, key, sv.Digest) {
			v.Acked = false
		}
	}
	return v
}

// relevant reports whether cl must confirm the service key served as served (see Judge):
// its flavour serves it, it may see it and it subscribes to one of its resources.
func relevant(cl ClientState, key string, served map[Flavour]Served) bool {
	sv, ok := served[cl.Flavour]
	if !ok || !cl.MaySee(key) {
		return false
	}
	for _, typ := range confirmTypes {
		if cl.Subscribed[typ].IncludesAny(sv.Names[typ]) {
			return true
		}
	}
	return false
}

// Confirm checks the ACKs of the clients relevant to the service key (see Judge) for its
// current content as served. minClients is the number of clients (of the flavours serving
// it, relevant or not, that may see its namespace) that must be connected.
func Confirm(clients []ClientState, h *History, key string, served map[Flavour]Served, minClients int) Confirmation {
	var c Confirmation
	var versions []string
	forgiven := false // lieplant.KindUnackedClient
	for _, cl := range clients {
		if _, ok := served[cl.Flavour]; !ok || !cl.MaySee(key) {
			continue
		}
		c.Connected++
		v := Judge(cl, h, key, served)
		if !v.Relevant {
			continue
		}
		if lieplant.On && lieplant.Is(lieplant.KindUnackedClient) && !v.Acked && v.Nack == nil && !forgiven {
			v.Acked, forgiven = true, true // one client's missing ACK counts as one
		}
		c.Total++
		if v.Nack != nil && c.Nack == nil {
			c.Nack = v.Nack
		}
		if v.Acked {
			c.Acked++
			if r := cl.Acked[resource.RouteType]; r != "" {
				versions = append(versions, r)
			}
		}
	}
	slices.Sort(versions)
	versions = slices.Compact(versions)
	switch {
	case c.Nack != nil:
		c.Message = c.Nack.Describe()
	case c.Connected < minClients:
		c.Message = fmt.Sprintf(waitingPrefix+"%d connected, --xds-min-clients is %d", c.Connected, minClients)
	case c.Connected == 0:
		c.Done = true
		c.Message = "no xds client is connected"
	case c.Total == 0:
		c.Done = true
		c.Message = fmt.Sprintf("none of the %d connected xds clients subscribes to its resources", c.Connected)
	case c.Acked < c.Total:
		c.Message = fmt.Sprintf(waitingPrefix+"%d/%d ACKed a version with these weights", c.Acked, c.Total)
	case len(versions) == 0: // per-type streams without route configurations
		c.Done = true
		c.Message = fmt.Sprintf("xds content ACKed by %d/%d clients", c.Acked, c.Total)
	default:
		c.Done = true
		c.Message = fmt.Sprintf("xds version %s ACKed by %d/%d clients", strings.Join(versions, ","), c.Acked, c.Total)
	}
	return c
}
