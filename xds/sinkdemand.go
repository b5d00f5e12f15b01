package xds

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// DemandLinger is how long the gRPC flavour keeps a map's resources after the last stream
// subscribed to one of them left or unsubscribed: a client that reconnects within it (a
// pod restart, a stream reset by a proxy) finds the map still built and its content
// unchanged. A map demanded by no stream for longer is dropped by the next rebuild (the
// rebuild loop kicks itself when the linger of a map ends).
const DemandLinger = 30 * time.Second

// Demanded is what the identified clients of flavour f subscribe to, over every type: the
// names subscribed to, and whether one subscribes to a type by wildcard, which demands every
// resource (names is nil then).
func Demanded(clients []ClientState, f Flavour) (names map[string]struct{}, wildcard bool) {
	names = map[string]struct{}{}
	for _, cl := range clients {
		if cl.Flavour != f {
			continue
		}
		for _, sub := range cl.Subscribed {
			if sub.Wildcard {
				return nil, true
			}
			for n := range sub.Names {
				names[n] = struct{}{}
			}
		}
	}
	return names, false
}

// demand is which maps the gRPC flavour carries: the maps a gRPC stream subscribes to one
// of the names of (ServedBy), every map while one subscribes by wildcard, and the maps
// whose last subscriber left less than linger ago. It is the rebuild loop's alone.
type demand struct {
	linger time.Duration
	read   bool                 // names and all were read once
	gen    uint64               // the Tracker's Demand of the gRPC flavour when they were
	all    bool                 // a wildcard subscription: every map is demanded
	names  map[string]struct{}  // the names subscribed to
	built  map[string]bool      // the maps the gRPC flavour carries
	idle   map[string]time.Time // built maps no stream demands, since when
}

// demandStep is what one rebuild changes of the maps the gRPC flavour carries: the keys
// to add to and drop from the translator's gRPC flavour (every key looked at when reset),
// and among those dropped the ones it carried (gone).
type demandStep struct {
	add, drop, gone []string
}

func (d demandStep) empty() bool { return len(d.add) == 0 && len(d.drop) == 0 }

// demandChange decides which maps the gRPC flavour carries after this rebuild, reading
// what its streams subscribe to again only when the Tracker's Demand moved. It looks at
// the maps in scope, the maps named by what the streams subscribe to and those built when
// that moved, and the maps whose linger ended: never at the fleet, except on the flavour's
// first build, a full rebuild and when a wildcard subscription appears. sc.full (and the
// first build) hands every map it keeps in add, so the translator is set from scratch.
func (r *rebuilder) demandChange(sc scope, prevServed, next map[string]Service, now time.Time) demandStep {
	d := &r.demand
	if d.built == nil {
		d.built, d.idle = map[string]bool{}, map[string]time.Time{}
	}
	served := func(key string) (Service, bool) {
		if sc.keys[key] {
			svc, ok := next[key]
			return svc, ok
		}
		svc, ok := prevServed[key]
		return svc, ok
	}
	reset := sc.full || slices.Contains(sc.build, FlavourGRPC)
	candidates := maps.Clone(sc.keys)
	tracker := r.s.server.Tracker()
	if gen := tracker.Demand(FlavourGRPC); !d.read || gen != d.gen {
		wasAll := d.all
		d.names, d.all = Demanded(tracker.Clients(), FlavourGRPC)
		d.gen, d.read = gen, true
		switch {
		case d.all && !wasAll:
			reset = true
		case !d.all:
			for key := range d.built {
				candidates[key] = true
			}
			for n := range d.names {
				if key, ok := r.keyOf(n); ok {
					candidates[key] = true
				}
			}
		}
	}
	if reset {
		for _, src := range []map[string]Service{prevServed, next} {
			for key := range src {
				candidates[key] = true
			}
		}
		for key := range d.built {
			candidates[key] = true
		}
	}
	for key, since := range d.idle {
		if now.Sub(since) >= d.linger {
			candidates[key] = true
		}
	}
	var step demandStep
	for _, key := range slices.Sorted(maps.Keys(candidates)) {
		svc, ok := served(key)
		since, idle := d.idle[key]
		switch {
		case ok && (d.all || demands(d.names, svc)):
			delete(d.idle, key)
		case ok && d.built[key] && (!idle || now.Sub(since) < d.linger):
			if !idle {
				d.idle[key] = now
				r.queue.AddAfter(snapshotKey, d.linger)
			}
		default:
			delete(d.idle, key)
			if d.built[key] {
				step.gone = append(step.gone, key)
			}
			if d.built[key] || reset {
				step.drop = append(step.drop, key)
			}
			delete(d.built, key)
			continue
		}
		if !d.built[key] || reset {
			step.add = append(step.add, key)
		}
		d.built[key] = true
	}
	return step
}

// keyOf is the key of the map that serves the gRPC resource named n: a cluster is named
// "<namespace>/<name>/<cluster>" (ClusterName), a route configuration by the map's key
// "<namespace>/<name>", a listener by a name without "/" (r.owner says whose).
func (r *rebuilder) keyOf(n string) (string, bool) {
	switch strings.Count(n, "/") {
	case 0:
		key, ok := r.owner[n]
		return key, ok
	case 1:
		return n, true
	default:
		first := strings.IndexByte(n, '/')
		second := strings.IndexByte(n[first+1:], '/')
		return n[:first+1+second], true
	}
}

// demands reports whether names include one of the gRPC resources svc serves (ServedBy:
// none when every listener name is withheld).
func demands(names map[string]struct{}, svc Service) bool {
	listeners := ListenerNames(svc)
	if len(listeners) == 0 {
		return false
	}
	if _, ok := names[svc.Key()]; ok {
		return true
	}
	for _, n := range listeners {
		if _, ok := names[n]; ok {
			return true
		}
	}
	for _, e := range svc.entries() {
		if _, ok := names[ClusterName(svc.Namespace, svc.Name, e.cluster)]; ok {
			return true
		}
	}
	return false
}

// gRPCRecord is what the gRPC flavour's history records for a rebuild: the services it
// carries that changed or joined it (every one it carries when reset), and the keys
// removed and those it no longer carries. A map it never carried has no history in it.
func (r *rebuilder) gRPCRecord(reset bool, prevServed, next map[string]Service, keys map[string]bool, changed []Service, removed []string, step demandStep) ([]Service, []string) {
	served := func(key string) Service {
		if svc, ok := next[key]; ok && keys[key] {
			return svc
		}
		return prevServed[key]
	}
	var in []Service
	out := append(slices.Clone(removed), step.gone...)
	if reset {
		for key := range r.demand.built {
			in = append(in, served(key))
		}
		return in, out
	}
	seen := map[string]bool{}
	for _, svc := range changed {
		seen[svc.Key()] = true
		if r.demand.built[svc.Key()] {
			in = append(in, svc)
		}
	}
	for _, key := range step.add {
		if !seen[key] {
			in = append(in, served(key))
		}
	}
	return in, out
}
