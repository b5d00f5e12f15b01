package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/util/workqueue"
)

// snapshotKey is the one key of the rebuild queue: every change enqueues it, so a burst
// of changes coalesces into one rebuild.
const snapshotKey = "snapshot"

// flavours are the flavours the sink can build.
var flavours = []Flavour{FlavourEnvoy, FlavourGRPC}

// rebuilder is the sink's rebuild loop: it serves the plans the pipeline gave (wants),
// paced in storms. Its queue, translator, pacer, lastServed (when resources were last
// handed to the server), owner (which map serves each name) and demand (which maps the
// gRPC flavour carries) are used by the loop alone; what is served is the sink's, under
// the sink's lock.
type rebuilder struct {
	s          *Sink
	queue      workqueue.TypedRateLimitingInterface[string]
	translator *Translator
	pacer      pacer
	lastServed time.Time
	owner      map[string]string
	demand     demand
}

func newRebuilder(s *Sink) *rebuilder {
	return &rebuilder{s: s, translator: NewTranslator(s.envoy), owner: map[string]string{}, demand: demand{linger: DemandLinger},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "xds-snapshot"})}
}

// kick asks for a rebuild.
func (r *rebuilder) kick() { r.queue.Add(snapshotKey) }

// scope is what one rebuild looks at: the maps, whether every map, the flavours a client
// consumes that are not built yet, and the flavours served at all.
type scope struct {
	keys  map[string]bool
	full  bool
	build []Flavour
	serve map[Flavour]bool
}

// scope takes the maps marked dirty since the previous rebuild (every map on the first
// rebuild and after a failed one) and the flavours to build and serve.
func (r *rebuilder) scope(prevServed map[string]Service, prevInvalid map[string]error) scope {
	keys, full := r.s.wants.take()
	sc := scope{keys: keys, full: full, serve: map[Flavour]bool{}}
	consumed := map[Flavour]bool{}
	for _, f := range flavours {
		consumed[f] = r.s.server.Tracker().Consumed(f)
	}
	r.s.mu.Lock()
	for _, f := range flavours {
		if consumed[f] && !r.s.built[f] {
			sc.build = append(sc.build, f)
		}
		sc.serve[f] = consumed[f] || r.s.built[f]
	}
	r.s.mu.Unlock()
	if full {
		sc.keys = map[string]bool{}
		for _, src := range [][]string{slices.Collect(maps.Keys(prevServed)), slices.Collect(maps.Keys(prevInvalid)),
			r.s.wants.keys(), r.translator.Keys()} { // a failed rebuild may have left some in the translator
			for _, key := range src {
				sc.keys[key] = true
			}
		}
	}
	return sc
}

// rebuild serves the plans given for the maps in scope: it hands the server the resources
// of those whose served content changed (every other map's stay as they were) for each
// flavour a client consumes, builds a flavour when its first client has connected (the
// Envoy flavour from every served map, the gRPC flavour from the maps demanded: see
// demandChange), adds and drops maps of the gRPC flavour as its streams' subscriptions
// change, and hands news each map whose served content or validity changed or that joined
// the gRPC flavour. A map whose given resources fail validation keeps its last good
// content.
func (r *rebuilder) rebuild(ctx context.Context) (err error) {
	r.s.mu.Lock()
	prevServed, prevInvalid := r.s.served, r.s.invalid // written by this loop alone, under mu
	r.s.mu.Unlock()
	sc := r.scope(prevServed, prevInvalid)
	defer func() {
		if err != nil {
			r.s.wants.markFull() // what was taken is not served; the retry looks at everything
		}
	}()
	next, nextInvalid := r.plan(sc.keys, prevServed)
	if retry := r.exclusive(sc.keys, sc.full, prevServed, next, nextInvalid); len(retry) > 0 {
		defer r.s.wants.mark(retry...) // rebuilt again with the next change
	}
	changed, removed, tell := r.diff(sc, prevServed, prevInvalid, next, nextInvalid)
	wait := r.newOnlyWait(changed, removed, tell, sc.build, sc.full, prevServed)
	if wait > 0 {
		// Only maps no client could reach yet (a cold start journals them one reconcile at
		// a time): they go out with the ones after them, in one snapshot, within
		// coalesceNew of the last; a change to reachable content never waits. A change of
		// what the gRPC streams subscribe to is served now, alone: serving the new maps
		// with it on every subscription change (a cold start's gRPC clients subscribe as
		// their maps appear) sent every Envoy the fleet's route configuration every few
		// tens of milliseconds, and a map judged while an Envoy had not yet answered one
		// went back to Published False.
		r.s.wants.mark(slices.Collect(maps.Keys(sc.keys))...)
		r.queue.AddAfter(snapshotKey, wait)
		sc.keys, next, nextInvalid = map[string]bool{}, map[string]Service{}, map[string]error{}
		changed, removed, tell = nil, nil, nil
	}
	var step demandStep
	if sc.serve[FlavourGRPC] {
		step = r.demandChange(sc, prevServed, next, r.s.cfg.Now())
	}
	if len(changed) > 0 || len(removed) > 0 || len(sc.build) > 0 || sc.full || !step.empty() {
		if err := r.serve(ctx, sc, prevServed, next, changed, removed, step); err != nil {
			return err
		}
		if wait == 0 { // a subscription change served alone does not restart the new maps' wait
			r.lastServed = time.Now()
		}
	}
	r.commit(sc.keys, next, nextInvalid, sc.build)
	if len(sc.build) > 0 {
		// A flavour built now recorded its versions only now: a client of it that declared
		// or ACKed them before (a reconnecting client declares what it holds on its first
		// requests, which come before the build they trigger) was judged against a history
		// without them, and may send nothing more. Every map still waiting is judged again.
		tell = append(tell, r.s.watch.waiting()...)
	}
	tell = append(tell, step.add...) // recorded in the gRPC flavour's history only now
	r.s.news.Add(r.s.watch.worthTelling(tell)...)
	return nil
}

// diff compares what the maps in scope serve now with before: the services whose content
// changed, the keys no longer served, and the keys whose served content or validity
// changed (their confirmation may have).
func (r *rebuilder) diff(sc scope, prevServed map[string]Service, prevInvalid map[string]error, next map[string]Service, nextInvalid map[string]error) (changed []Service, removed, tell []string) {
	for _, key := range slices.Sorted(maps.Keys(sc.keys)) {
		a, hadA := prevServed[key]
		b, hasB := next[key]
		switch {
		case hasB && (!hadA || !reflect.DeepEqual(a, b)):
			changed = append(changed, b)
		case hadA && !hasB:
			removed = append(removed, key)
		}
		if hadA != hasB || (hasB && a.Digest() != b.Digest()) {
			tell = append(tell, key)
			continue
		}
		if e, f := prevInvalid[key], nextInvalid[key]; (e == nil) != (f == nil) {
			tell = append(tell, key)
		}
	}
	if sc.full {
		for _, key := range r.translator.Keys() {
			if _, ok := next[key]; !ok && !slices.Contains(removed, key) {
				removed = append(removed, key)
			}
		}
	}
	return changed, removed, tell
}

// serve translates the change and hands each flavour served its resources, recording in
// the history which content each version carries: the gRPC flavour's only for the maps it
// carries (step).
func (r *rebuilder) serve(ctx context.Context, sc scope, prevServed, next map[string]Service, changed []Service, removed []string, step demandStep) error {
	update := changed
	if sc.full { // after a failed rebuild the translator may hold content never served
		update = slices.Collect(maps.Values(next))
	}
	r.translator.Update(update, removed)
	if sc.serve[FlavourGRPC] {
		r.translator.Demand(step.add, step.drop)
	}
	for _, f := range flavours {
		if !sc.serve[f] {
			continue
		}
		res, err := r.translator.Resources(f)
		if err != nil {
			return fmt.Errorf("translate %s resources: %w", f, err)
		}
		versions, err := r.s.server.SetResources(ctx, f, res)
		if err != nil {
			return fmt.Errorf("serve %s resources: %w", f, err)
		}
		reset := slices.Contains(sc.build, f) || sc.full
		switch {
		case f == FlavourGRPC:
			in, out := r.gRPCRecord(reset, prevServed, next, sc.keys, changed, removed, step)
			r.s.history.Record(f, versions, in, out)
		case reset:
			r.s.history.Record(f, versions, ofFlavour(f, everyService(prevServed, sc.keys, next)), removed)
		default:
			r.s.history.Record(f, versions, ofFlavour(f, changed), append(removed, notOfFlavour(f, changed)...))
		}
	}
	return nil
}

// plan reads the given plans of keys: what each would serve (a map given nothing serves
// nothing) and which fail validation (keeping their last good content), before name
// exclusivity.
func (r *rebuilder) plan(keys map[string]bool, prevServed map[string]Service) (map[string]Service, map[string]error) {
	next := make(map[string]Service, len(keys))
	nextInvalid := map[string]error{}
	for key := range keys {
		svc, given := r.s.wants.get(key)
		if !given {
			continue
		}
		if err := r.translator.Validate(svc); err != nil {
			nextInvalid[key] = err
			if prev, had := prevServed[key]; had {
				next[key] = prev
			}
			continue
		}
		next[key] = svc
	}
	return next, nextInvalid
}

// everyService is every service served once next replaces the keys' content.
func everyService(prevServed map[string]Service, keys map[string]bool, next map[string]Service) []Service {
	out := make([]Service, 0, len(prevServed)+len(next))
	for key, svc := range prevServed {
		if !keys[key] {
			out = append(out, svc)
		}
	}
	for _, svc := range next {
		out = append(out, svc)
	}
	return out
}

// ofFlavour are the services flavour serves: the Envoy flavour only those with hostnames.
func ofFlavour(f Flavour, services []Service) []Service {
	if f != FlavourEnvoy {
		return services
	}
	return slices.DeleteFunc(slices.Clone(services), func(svc Service) bool { return len(svc.Hostnames) == 0 })
}

// notOfFlavour are the keys of the services flavour does not serve.
func notOfFlavour(f Flavour, services []Service) []string {
	var out []string
	for _, svc := range services {
		if f == FlavourEnvoy && len(svc.Hostnames) == 0 {
			out = append(out, svc.Key())
		}
	}
	return out
}

// commit stores what the keys now serve and which are invalid, and the flavours built.
func (r *rebuilder) commit(keys map[string]bool, next map[string]Service, nextInvalid map[string]error, build []Flavour) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range keys {
		if svc, ok := next[key]; ok {
			s.served[key] = svc
		} else {
			delete(s.served, key)
		}
		if e := nextInvalid[key]; e != nil {
			s.invalid[key] = e
		} else {
			delete(s.invalid, key)
		}
		if _, ok := next[key]; !ok && nextInvalid[key] == nil {
			delete(s.pending, key) // a deleted map leaves nothing behind
		}
	}
	for _, f := range build {
		s.built[f] = true
	}
}

// errNameTaken marks a map whose content would serve a name another map's served content
// has: the plans hand a name over in two steps (one map gives it up, the other takes it),
// which a rebuild may see half done.
var errNameTaken = errors.New("name served for another trafficmap")

// exclusive makes every name (gRPC listener name, which covers the Envoy domains) served
// for one map only, so the shared route configuration never has a duplicate domain and no
// listener name is served twice. Maps keep their names in this order: those not rebuilt
// now (not in keys), then the others by key. A rebuilt map that would take a name already
// kept falls back to its last good content when that does not, else serves nothing; it is
// marked invalid (errNameTaken) and returned, to be rebuilt with the next change. The
// index of names (r.owner) is kept from one rebuild to the next, so only the rebuilt maps'
// names are looked at (all of them when full).
func (r *rebuilder) exclusive(keys map[string]bool, full bool, prevServed, next map[string]Service, invalid map[string]error) []string {
	if full {
		r.owner = map[string]string{}
	} else {
		for key := range keys {
			if prev, ok := prevServed[key]; ok {
				for _, n := range ListenerNames(prev) {
					if r.owner[n] == key {
						delete(r.owner, n)
					}
				}
			}
		}
	}
	clash := func(key string, svc Service) error {
		for _, n := range ListenerNames(svc) {
			if other, ok := r.owner[n]; ok && other != key {
				return fmt.Errorf("%w: %q is served for trafficmap %s", errNameTaken, n, other)
			}
		}
		return nil
	}
	var retry []string
	for _, key := range slices.Sorted(maps.Keys(next)) {
		svc := next[key]
		if err := clash(key, svc); err != nil {
			retry = append(retry, key)
			invalid[key] = err
			prev, ok := prevServed[key]
			if !ok || clash(key, prev) != nil {
				delete(next, key)
				continue
			}
			svc = prev
			next[key] = prev
		}
		for _, n := range ListenerNames(svc) {
			r.owner[n] = key
		}
	}
	return retry
}

// coalesceNew is how long after the last snapshot a rebuild whose only changes are maps
// no client could reach yet waits for more of them (see newOnlyWait). Longer windows were
// measured at 10,000 maps (BENCHMARKS.md, "What bounds the rest", P2): each snapshot sends
// the state-of-the-world Envoys every cluster, so 5 s cut the cold start from 2.08x to 1.57x
// the write floor, but left 98 MiB of heap in use beyond the live objects after it (51 at
// 1 s), and resident memory over its target.
const coalesceNew = time.Second

// newOnlyWait is how long the rebuild should wait before serving changed: zero unless every
// change is a map no client could reach before (not served, or served with every name
// withheld: a new map whose claim journal has just landed) and nothing else changed (no
// removal, no flavour to build, no full rebuild, no other map to tell of), and the last
// snapshot is younger than coalesceNew. No client routes by such a map yet, and its
// Published condition waits for its content anyway; serving them together turns a cold
// start's one snapshot per few maps into one per coalesceNew.
func (r *rebuilder) newOnlyWait(changed []Service, removed, tell []string, build []Flavour, full bool, prev map[string]Service) time.Duration {
	if full || len(build) > 0 || len(removed) > 0 || len(changed) == 0 || len(tell) != len(changed) || r.lastServed.IsZero() {
		return 0
	}
	for _, svc := range changed {
		if a, ok := prev[svc.Key()]; ok && len(ListenerNames(a)) > 0 {
			return 0 // reachable: a change to it is served at once
		}
	}
	return max(0, coalesceNew-time.Since(r.lastServed))
}

// processNext rebuilds the snapshot for one queued request, then waits as the pacer says;
// false once the queue is shut.
func (r *rebuilder) processNext(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	start := time.Now()
	if err := r.rebuild(ctx); err != nil {
		r.s.log.Info("xds snapshot not rebuilt; the last good one stays served; retrying", zap.Error(err))
		r.queue.AddRateLimited(key)
	} else {
		r.queue.Forget(key)
	}
	r.queue.Done(key)
	if pause := r.pacer.pause(start, time.Now()); pause > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return true
}
