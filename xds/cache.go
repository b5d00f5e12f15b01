package xds

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// typeCache serves one resource type to one flavour. It holds each resource once, encoded
// at most once (when a client is first sent it) and shared by every response that carries
// it, with a version derived from its content. Watches are indexed: wildcard ones apart,
// named ones per resource name, so an update answers only the watches of the names it
// changed or removed, and diffs only those names.
//
// Versions: a state-of-the-world response carries the type's content version (set by
// update); a delta response carries each resource's content digest. Both are the same in
// every process that serves the same content, so a restarted publisher sends nothing to a
// client that declares (delta) or holds (state of the world, wildcard) what it serves.
//
// A watch is answered under the cache's lock into the server's per-stream channel, which
// holds one response per type, as go-control-plane's caches do.
type typeCache struct {
	typeURL string

	mu        sync.Mutex
	served    bool   // update was called: until then every watch waits
	version   string // the type's content version
	seq       uint64 // counts updates (delta wildcard watches remember the one they saw)
	resources map[string]*entry
	all       []*anypb.Any // every resource encoded, sorted by name; nil until needed
	last      *change      // the last update (a state-of-the-world ACK of the version before it may come after it)
	log       deltaLog     // recent updates, for the delta wildcard streams
	watches   watchIndex   // the open watches
	enc       encoder      // the resources' encodings
}

// watchIndex indexes a typeCache's open watches: wildcard ones apart, named ones per
// resource name. Guarded by the typeCache's mu.
type watchIndex struct {
	wildcard map[*watch]struct{}
	named    map[string]map[*watch]struct{}
}

// add indexes w (a named watch under each name it subscribes to, remembered in w.names).
func (x *watchIndex) add(w *watch) {
	if w.sub.IsWildcard() {
		x.wildcard[w] = struct{}{}
		return
	}
	w.names = slices.Collect(maps.Keys(w.sub.SubscribedResources()))
	for _, name := range w.names {
		if x.named[name] == nil {
			x.named[name] = map[*watch]struct{}{}
		}
		x.named[name][w] = struct{}{}
	}
}

// remove forgets w.
func (x *watchIndex) remove(w *watch) {
	delete(x.wildcard, w)
	for _, name := range w.names {
		if ws := x.named[name]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(x.named, name)
			}
		}
	}
}

// encoder makes a typeCache's encodings of its resources. Guarded by the typeCache's mu
// (the entries' encodings are made while answering watches).
type encoder struct {
	typeURL string
	// vhosts are the encodings of the virtual hosts of the last large route configuration
	// encoded (the Envoy flavour's one), reused by the next: a drain encodes one.
	vhosts map[*routev3.VirtualHost][]byte
}

// entry is one resource as served: the message (or, for one held encoded, src), its
// content digest and its encoding, made once, when a client first needs it (see
// typeCache.encoded). A delta response wraps the encoding in a discoveryv3.Resource of its
// own (resource): the wrapper, with the name and version, would be a second copy of what
// the entry holds, for every served resource (about 12 MB at 10,000 maps, by the heap profile).
type entry struct {
	name, version string
	msg           types.Resource // nil when src is set
	src           heldResource   // a resource held encoded (the Envoy flavour's clusters and route configuration)
	res           *anypb.Any     // the encoding; nil until needed
	// weak is the encoding of an assembled src (res stays nil): a second copy of held
	// encodings (the Envoy route configuration's, about 6 MB at 10,000 maps), shared by the
	// responses that carry it while any of them lives, made again after.
	weak weak.Pointer[anypb.Any]
}

// resource is e as a delta response carries it: its name, version and encoding enc.
func (e *entry) resource(enc *anypb.Any) *discoveryv3.Resource {
	return &discoveryv3.Resource{Name: e.name, Version: e.version, Resource: enc}
}

// encoded returns e's encoding, made once and shared by every response that carries e
// (an assembled one: by every response while one holds it).
func (c *encoder) encoded(e *entry) (*anypb.Any, error) {
	if e.res != nil {
		return e.res, nil
	}
	if res := e.weak.Value(); res != nil {
		return res, nil
	}
	var b []byte
	var err error
	if e.src != nil {
		b, err = e.src.encoding()
	} else {
		b, err = c.encode(e.msg)
	}
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", typeLabel(c.typeURL), e.name, err)
	}
	res := &anypb.Any{TypeUrl: c.typeURL, Value: b}
	if e.src != nil && e.src.assembled() {
		e.weak = weak.Make(res)
		return res, nil
	}
	e.res = res
	return res, nil
}

// watch is one open request of one stream.
type watch struct {
	sotw    *cachev3.Request
	delta   *cachev3.DeltaRequest
	sub     cachev3.Subscription
	names   []string // the named subscription when tracked (the server changes sub's map later)
	sotwCh  chan cachev3.Response
	deltaCh chan cachev3.DeltaResponse
}

// Marks kept in a response's returned-resources map (which the server hands back with the
// stream's next request); "\x00" never begins a resource name.
const (
	// wildcardMark, in a state-of-the-world wildcard response's map, holds the type version
	// the response carried in full.
	wildcardMark = "\x00wildcard"
	// seqMark, in a delta wildcard response's map, holds the update it is complete for.
	seqMark = "\x00seq"
)

// size is what c holds: its resources, and the bytes of their encodings it holds (the
// virtual hosts kept for reuse included; a resource never sent to a client is not encoded,
// an assembled one counts while a response holds it).
func (c *typeCache) size() (resources, encoded int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.resources {
		if e.res != nil {
			encoded += len(e.res.GetValue())
		} else if res := e.weak.Value(); res != nil {
			encoded += len(res.GetValue())
		}
	}
	for _, b := range c.enc.vhosts {
		encoded += len(b)
	}
	return len(c.resources), encoded
}

func newTypeCache(typeURL string) *typeCache {
	return &typeCache{typeURL: typeURL, resources: map[string]*entry{},
		watches: watchIndex{wildcard: map[*watch]struct{}{}, named: map[string]map[*watch]struct{}{}},
		enc:     encoder{typeURL: typeURL}}
}

// current returns the type's version, "" before the first update.
func (c *typeCache) current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// entries returns the served resources by name; the map is a copy, the entries shared.
func (c *typeCache) entries() map[string]*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.resources)
}

// declared judges what a stream subscribed as wildcard/names that declares versions
// (delta initial_resource_versions) holds of the type. current: it holds every resource it
// subscribes to at its current content and nothing removed, then version is the type
// version. stale: the served resources it subscribes to that it declares at another
// version (it holds older content of them); only served names are kept, so what the
// tracker stores is bounded by what the publisher serves, not by the client. Before the
// type is first served, served is false and nothing is judged.
func (c *typeCache) declared(wildcard bool, names map[string]struct{}, versions map[string]string) (version string, served, current bool, stale map[string]struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.served {
		return "", false, false, nil
	}
	current = true
	for name, e := range c.resources {
		if !wildcard {
			if _, ok := names[name]; !ok {
				continue
			}
		}
		v, declared := versions[name]
		if v == e.version {
			continue
		}
		current = false // the server sends it: its ACK will count
		if declared {
			if stale == nil {
				stale = map[string]struct{}{}
			}
			stale[name] = struct{}{}
		}
	}
	for name := range versions {
		if _, ok := c.resources[name]; !ok {
			current = false // the server sends its removal: its ACK will count
		}
	}
	if !current {
		return "", true, false, stale
	}
	return c.version, true, true, nil
}

// update serves version: changed resources (new or with new content) replace theirs,
// removed ones go, and the watches of those names (and the wildcard ones) are answered.
func (c *typeCache) update(version string, changed []*entry, removed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.served
	prevVersion := c.version
	c.served, c.version = true, version
	c.seq++
	prev := make(map[string]string, len(changed)+len(removed))
	for _, e := range changed {
		if old, ok := c.resources[e.name]; ok {
			prev[e.name] = old.version
		} else {
			prev[e.name] = ""
		}
	}
	for _, name := range removed {
		if old, ok := c.resources[name]; ok {
			prev[name] = old.version
		}
	}
	c.log.record(c.seq, prev, removed, max(deltaLogNames, len(c.resources)))
	for _, e := range changed {
		c.resources[e.name] = e
	}
	for _, name := range removed {
		delete(c.resources, name)
	}
	c.all, c.last = nil, nil
	if first { // every waiting watch gets its first answer
		for w := range c.watches.wildcard {
			c.fire(w, nil)
		}
		for _, ws := range c.watches.named {
			for w := range ws {
				c.fire(w, nil)
			}
		}
		return
	}
	hint := &change{changed: changed, removed: removed, prevVersion: prevVersion}
	c.last = hint
	for w := range c.watches.wildcard {
		c.fire(w, hint)
	}
	seen := map[*watch]bool{}
	for _, names := range [][]string{entryNames(changed), removed} {
		for _, name := range names {
			for w := range c.watches.named[name] {
				if !seen[w] {
					seen[w] = true
					c.fire(w, nil)
				}
			}
		}
	}
}

func entryNames(es []*entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out
}

// change is what one update did, for the state-of-the-world wildcard watches that held the
// version before it.
type change struct {
	changed     []*entry
	removed     []string
	prevVersion string
}

// fire answers w if it has something to send, and then forgets it. Called with c.mu held.
func (c *typeCache) fire(w *watch, hint *change) {
	if w.sotw != nil {
		if resp := c.sotwAnswer(w.sotw, w.sub, hint); resp != nil {
			c.watches.remove(w)
			w.sotwCh <- resp
		}
		return
	}
	if resp := c.deltaAnswer(w.delta, w.sub); resp != nil {
		c.watches.remove(w)
		w.deltaCh <- resp
	}
}

// track indexes w until an update answers it, and returns the cancel that forgets it.
// Called with c.mu held.
func (c *typeCache) track(w *watch) func() {
	c.watches.add(w)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.watches.remove(w)
	}
}

// createWatch answers req at once when the stream lacks something, else waits for an
// update that concerns it.
func (c *typeCache) createWatch(req *cachev3.Request, sub cachev3.Subscription, value chan cachev3.Response) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served {
		if resp := c.sotwAnswer(req, sub, c.last); resp != nil {
			value <- resp
			return func() {}
		}
	}
	return c.track(&watch{sotw: req, sub: sub, sotwCh: value})
}

func (c *typeCache) createDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, value chan cachev3.DeltaResponse) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.served {
		if resp := c.deltaAnswer(req, sub); resp != nil {
			value <- resp
			return func() {}
		}
	}
	return c.track(&watch{delta: req, sub: sub, deltaCh: value})
}

// sotwAnswer is the state-of-the-world response req's stream needs now, nil when it holds
// what it subscribes to. A wildcard stream holds the type's version (it got every resource
// with it, or, on a new stream, says it holds that version); a named stream holds each
// subscribed resource at the content it was last sent, so an update of other names leaves it
// alone. The response carries every subscribed resource, as the protocol wants for
// listeners and clusters; for other types (route configurations), a wildcard stream that
// held the version before an update (hint) is sent only the resources it changed, as the
// protocol allows. Called with c.mu held.
func (c *typeCache) sotwAnswer(req *cachev3.Request, sub cachev3.Subscription, hint *change) cachev3.Response {
	returned := sub.ReturnedResources()
	fresh := req.GetResponseNonce() == ""
	if sub.IsWildcard() {
		if req.GetVersionInfo() == c.version && (fresh || returned[wildcardMark] == c.version) {
			return nil
		}
		mark := map[string]string{wildcardMark: c.version}
		if hint != nil && !fresh && !cachev3.ResourceRequiresFullStateInSotw(c.typeURL) &&
			req.GetVersionInfo() == hint.prevVersion && returned[wildcardMark] == hint.prevVersion {
			resp := &sotwResponse{req: req, version: c.version, resources: make([]*anypb.Any, 0, len(hint.changed)), returned: mark}
			for _, e := range hint.changed {
				if r, err := c.enc.encoded(e); err == nil {
					resp.resources = append(resp.resources, r)
				}
			}
			return resp
		}
		return &sotwResponse{req: req, version: c.version, resources: c.encodedAll(), returned: mark}
	}
	names := sub.SubscribedResources()
	respond := fresh && req.GetVersionInfo() != c.version
	for name := range names {
		if respond {
			break
		}
		e, exists := c.resources[name]
		v, known := returned[name]
		respond = exists != known || (exists && v != e.version)
	}
	for name := range returned {
		if respond {
			break
		}
		_, exists := c.resources[name]
		respond = !exists
	}
	if !respond {
		return nil
	}
	sorted := slices.Sorted(maps.Keys(names))
	resp := &sotwResponse{req: req, version: c.version, returned: make(map[string]string, len(sorted))}
	for _, name := range sorted {
		e, ok := c.resources[name]
		if !ok {
			continue
		}
		r, err := c.enc.encoded(e)
		if err != nil {
			continue // never: a valid message encodes
		}
		resp.resources = append(resp.resources, r)
		resp.returned[name] = e.version
	}
	return resp
}

// encodedAll returns every resource encoded, sorted by name, built once per update and
// shared by every wildcard response. Called with c.mu held.
func (c *typeCache) encodedAll() []*anypb.Any {
	if c.all == nil {
		es := slices.SortedFunc(maps.Values(c.resources), func(a, b *entry) int { return strings.Compare(a.name, b.name) })
		c.all = make([]*anypb.Any, 0, len(es))
		for _, e := range es {
			if r, err := c.enc.encoded(e); err == nil {
				c.all = append(c.all, r)
			}
		}
		sharedBodies.register(c.all)
	}
	return c.all
}

// deltaAnswer is the delta response req's stream needs now (the resources whose content
// it does not hold, the ones removed that it holds), nil when there are none; the first
// request of a wildcard stream is always answered, as Envoy waits for it. A wildcard
// stream's map is tiny (see wildcardDiff). Called with c.mu held.
func (c *typeCache) deltaAnswer(req *cachev3.DeltaRequest, sub cachev3.Subscription) cachev3.DeltaResponse {
	returned := sub.ReturnedResources()
	var send []*entry
	var removed []string
	var next map[string]string
	if sub.IsWildcard() {
		var err error
		if send, removed, err = c.wildcardDiff(returned); err != nil {
			return &deltaResponse{req: req, err: err}
		}
		next = map[string]string{seqMark: strconv.FormatUint(c.seq, 10)}
	} else {
		names := sub.SubscribedResources()
		next = make(map[string]string, len(names))
		for name := range names {
			v, known := returned[name]
			if e, ok := c.resources[name]; ok {
				if !known || v != e.version {
					send = append(send, e)
				}
				next[name] = e.version
			} else if known {
				removed = append(removed, name)
			}
		}
	}
	if len(send) == 0 && len(removed) == 0 && (!sub.IsWildcard() || req.GetResponseNonce() != "") {
		return nil
	}
	slices.SortFunc(send, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	slices.Sort(removed)
	resp := &deltaResponse{req: req, version: c.version, removed: removed, returned: next}
	for _, e := range send {
		if r, err := c.enc.encoded(e); err == nil {
			resp.resources = append(resp.resources, e.resource(r))
		}
	}
	return resp
}

// wildcardDiff is what a delta wildcard stream whose returned-resources map is returned
// lacks: the served resources it does not hold at their content, and the removed ones it
// holds. The map this cache answers with is {seqMark: the update}: the stream holds the
// table at that update. go-control-plane then edits it when the stream unsubscribes a name:
// it sets the name to "" (the stream must be told whether the name is served: it is sent
// or removed) or deletes it (the stream holds the table's version, as before). So a name
// in the map is an exception, held at its version there. A map from the stream's first
// request (its initial_resource_versions) has no seqMark and is diffed in full; one older
// than c.log is sent every served resource and the removals of c.log's tombstones, or,
// when even those no longer cover it, refused with errBehind. Called
// with c.mu held.
func (c *typeCache) wildcardDiff(returned map[string]string) (send []*entry, removed []string, err error) {
	mark, marked := returned[seqMark]
	var held map[string]string
	logged := false
	if marked { // the log is read only for a map this cache made (never on a first request)
		seq, err := strconv.ParseUint(mark, 10, 64)
		if err == nil {
			held, logged = c.log.since(seq, c.seq)
		}
		if !logged && (err != nil || seq < c.log.goneFrom) {
			return nil, nil, errBehind
		}
	}
	if !logged {
		for name, e := range c.resources {
			if v, known := returned[name]; !known || v != e.version || marked {
				send = append(send, e)
			}
		}
		for name := range returned {
			if _, ok := c.resources[name]; !ok && !strings.HasPrefix(name, "\x00") {
				removed = append(removed, name)
			}
		}
		if marked {
			for name := range c.log.gone {
				if _, known := returned[name]; !known {
					removed = append(removed, name)
				}
			}
		}
		return send, removed, nil
	}
	for name, v := range returned {
		if !strings.HasPrefix(name, "\x00") {
			if held == nil {
				held = map[string]string{}
			}
			held[name] = v
		}
	}
	for name, v := range held {
		_, exception := returned[name]
		known := v != "" || exception
		if e, ok := c.resources[name]; ok && (!known || v != e.version) {
			send = append(send, e)
		} else if !ok && known {
			removed = append(removed, name)
		}
	}
	return send, removed, nil
}

// sotwResponse is a state-of-the-world response whose encoded resources are shared.
type sotwResponse struct {
	req       *cachev3.Request
	version   string
	resources []*anypb.Any
	returned  map[string]string
}

// GetDiscoveryResponse returns a new message (the server sets its nonce) over the shared
// encoded resources.
func (r *sotwResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	return &discoveryv3.DiscoveryResponse{VersionInfo: r.version, Resources: r.resources, TypeUrl: r.req.GetTypeUrl()}, nil
}
func (r *sotwResponse) GetRequest() *discoveryv3.DiscoveryRequest            { return r.req }
func (r *sotwResponse) GetVersion() (string, error)                          { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string                           { return r.version }
func (r *sotwResponse) GetReturnedResources() map[string]string              { return r.returned }
func (r *sotwResponse) GetContext() context.Context                          { return context.Background() }
func (r *deltaResponse) GetDeltaRequest() *discoveryv3.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                   { return r.version, nil }
func (r *deltaResponse) GetResponseVersion() string                          { return r.version }
func (r *deltaResponse) GetNextVersionMap() map[string]string                { return r.returned }
func (r *deltaResponse) GetReturnedResources() map[string]string             { return r.returned }
func (r *deltaResponse) GetContext() context.Context                         { return context.Background() }

// deltaResponse is a delta response whose encoded resources are shared.
type deltaResponse struct {
	err       error // set: the stream is closed with it (see errBehind)
	req       *cachev3.DeltaRequest
	version   string
	resources []*discoveryv3.Resource
	removed   []string
	returned  map[string]string
}

// GetDeltaDiscoveryResponse returns a new message (the server sets its nonce) over the
// shared encoded resources.
func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discoveryv3.DeltaDiscoveryResponse, error) {
	if r.err != nil {
		return nil, r.err
	}
	return &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: r.version, Resources: r.resources, RemovedResources: r.removed, TypeUrl: r.req.GetTypeUrl()}, nil
}

var (
	_ cachev3.Response      = (*sotwResponse)(nil)
	_ cachev3.DeltaResponse = (*deltaResponse)(nil)
)

// diff compares next (one type's resources, with sums by message from the versioner) with
// what c serves: changed are the new and changed resources as entries, removed the names
// served and absent from next. A message served as is (the Translator hands an unchanged
// service's resources back as the same messages) or with the same digest is unchanged.
func (c *typeCache) diff(next []types.Resource, sum func(types.Resource) (string, error)) (changed []*entry, removed []string, err error) {
	c.mu.Lock()
	served := c.resources
	c.mu.Unlock() // only SetResources (serialized) writes resources; reading it here is safe
	names := make(map[string]bool, len(next))
	for _, r := range next {
		name := cachev3.GetResourceName(r)
		names[name] = true
		if e, ok := served[name]; ok && e.msg == r {
			continue
		}
		v, err := sum(r)
		if err != nil {
			return nil, nil, err
		}
		if e, ok := served[name]; ok && e.version == v {
			continue
		}
		changed = append(changed, &entry{name: name, version: v, msg: r})
	}
	for name := range served {
		if !names[name] {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	slices.SortFunc(changed, func(a, b *entry) int { return cmp.Compare(a.name, b.name) })
	return changed, removed, nil
}

// diffHeld is diff for resources held encoded (see heldResource): a resource served as
// is or with the same digest is unchanged.
func (c *typeCache) diffHeld(next []heldResource) (changed []*entry, removed []string) {
	c.mu.Lock()
	served := c.resources
	c.mu.Unlock() // only SetResources (serialized) writes resources; reading it here is safe
	names := make(map[string]bool, len(next))
	for _, r := range next {
		name := r.GetName()
		names[name] = true
		e, ok := served[name]
		if ok && e.src == r {
			continue
		}
		sum := r.digest()
		v := resourceVersion(sum)
		if ok && e.version == v {
			continue
		}
		changed = append(changed, &entry{name: name, version: v, src: r})
	}
	for name := range served {
		if !names[name] {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	slices.SortFunc(changed, func(a, b *entry) int { return cmp.Compare(a.name, b.name) })
	return changed, removed
}

// largeRoute is the number of virtual hosts from which a route configuration is encoded
// from its virtual hosts' remembered encodings.
const largeRoute = 16

// encode is a resource's deterministic encoding. A large route configuration is
// assembled from its virtual hosts' encodings, each remembered from the last one encoded,
// so that a drain encodes one virtual host, not the fleet's.
func (c *encoder) encode(r types.Resource) ([]byte, error) {
	rc, ok := r.(*routev3.RouteConfiguration)
	if !ok || len(rc.VirtualHosts) < largeRoute {
		return cachev3.MarshalResource(r)
	}
	b, vhosts, err := encodeRoute(rc, c.vhosts)
	if err != nil {
		return nil, err
	}
	c.vhosts = vhosts
	return b, nil
}

// encodeRoute is rc's deterministic encoding, made of its name, then each virtual host
// (field 2) from known when there, then its other fields (numbered above 2), as the
// protobuf encoding orders fields by number; it returns the virtual hosts' encodings.
func encodeRoute(rc *routev3.RouteConfiguration, known map[*routev3.VirtualHost][]byte) ([]byte, map[*routev3.VirtualHost][]byte, error) {
	opts := proto.MarshalOptions{Deterministic: true}
	head, err := opts.Marshal(&routev3.RouteConfiguration{Name: rc.Name})
	if err != nil {
		return nil, nil, err
	}
	shell := routeShell(rc)
	shell.Name = ""
	tail, err := opts.Marshal(shell)
	if err != nil {
		return nil, nil, err
	}
	vhosts := make(map[*routev3.VirtualHost][]byte, len(rc.VirtualHosts))
	size := len(head) + len(tail)
	for _, vh := range rc.VirtualHosts {
		b, ok := known[vh]
		if !ok {
			if b, err = opts.Marshal(vh); err != nil {
				return nil, nil, err
			}
		}
		vhosts[vh] = b
		size += 1 + protowire.SizeBytes(len(b))
	}
	buf := make([]byte, 0, size)
	buf = append(buf, head...)
	for _, vh := range rc.VirtualHosts {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendBytes(buf, vhosts[vh])
	}
	return append(buf, tail...), vhosts, nil
}

// servedTypes are the types the caches serve; any other type's watches wait forever, as on
// a snapshot without that type.
var servedTypes = []string{resource.ListenerType, resource.RouteType, resource.ClusterType}
