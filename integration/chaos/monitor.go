package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	ominformers "github.com/trafficmap/publisher/api/client/informers/externalversions"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// The continuous judge. A True is a claim that stands until it is retracted, not a moment:
// while a map stands Published True at its generation, every change of its inputs (its
// spec, its InferenceService, its clusters' taints), of its route and Services, and of what
// every counted xDS probe holds is judged, on every tick (monitorEvery) of the monitor's
// caches and the probes' records. Where the data plane and the inputs disagree, Published
// must turn False (or the data plane come to agree) within retractWithin plus the outages
// meanwhile (faults.outage); a True standing longer is the lie "True not retracted". The
// other way round, a map that every part agrees on but that is not True within stuckWithin
// plus the outages is stuck (liveness).

const (
	// monitorEvery is how often the continuous judge looks.
	monitorEvery = 200 * time.Millisecond
	// stuckWithin bounds how long a map that every part agrees on may stay not True.
	stuckWithin = 15 * time.Second
	// departedGrace is the replicas' --xds-departed-grace (the default; replicas.go sets
	// none): a disconnected client counts with what it held for this long after it left
	// (docs/concepts/published.md, "a client cut off").
	departedGrace = 60 * time.Second
)

// Kinds of skip the continuous judge counts: a judgement, or one client's part of one, it
// could not make.
const (
	skipOlderGeneration = "True about an older generation"
	skipNeverConnected  = "client never connected"
	skipNewClient       = "client new to the map (never held it)"
	skipDeparted        = "client departed past --xds-departed-grace"
)

// Kinds of episode.
const (
	episodeTrue  = "true"  // Published True while the data plane and the inputs disagree
	episodeStuck = "stuck" // every part agrees, Published not True
)

// episode is one stretch of a map in one state the judge watches: open while End is zero.
type episode struct {
	Map        string
	Kind       string
	Start, End time.Time
	// How says how it ended: "retracted" (Published left True), "agreed" (the data plane
	// and inputs came to agree), "published" (a stuck map went True), "changed" (a stuck
	// map's parts stopped agreeing), "deleted", or "open".
	How string
	// Detail is the first disagreement seen (episodeTrue), or the Published condition when
	// the episode began (episodeStuck).
	Detail string
}

// length is the episode's length, up to now while it is open.
func (e episode) length(now time.Time) time.Duration {
	if e.End.IsZero() {
		return now.Sub(e.Start)
	}
	return e.End.Sub(e.Start)
}

// look is one map at one tick, as the judge reads it.
type look struct {
	Map      string
	True     bool     // Published True at the map's current generation
	Problems []string // where the data plane and the inputs disagree (none: they agree)
	Host     string   // the hostname the inputs give ("" when they allow no True)
	Skips    []string // the parts not judged
	// Published is the condition's reason and message when not True (a stuck map's detail).
	Published string
}

// tracker turns the looks of each tick into episodes. It is pure (no clock, no I/O) so its
// rules are unit-tested; the monitor owns it under its lock.
type tracker struct {
	open       map[string]*episode // kind + " " + map
	checked    map[checkKey]bool   // open episodes whose caches were found current (monitorfresh.go)
	closed     []episode
	trueSince  map[string]time.Time
	judgements int
	skips      map[string]int
}

func newTracker() *tracker {
	return &tracker{open: map[string]*episode{}, checked: map[checkKey]bool{}, trueSince: map[string]time.Time{}, skips: map[string]int{}}
}

// step takes one tick's looks at now. Maps absent from looks were deleted: their episodes
// end. Two maps True on one hostname: the one True since later gets the problem "rival True
// on a held name".
func (t *tracker) step(now time.Time, looks []look) {
	seen := map[string]bool{}
	for i := range looks {
		l := &looks[i]
		seen[l.Map] = true
		for _, s := range l.Skips {
			t.skips[s]++
		}
		if l.True {
			t.judgements++
			if _, ok := t.trueSince[l.Map]; !ok {
				t.trueSince[l.Map] = now
			}
		} else {
			delete(t.trueSince, l.Map)
		}
	}
	t.rivals(looks)
	for _, l := range looks {
		agree := len(l.Problems) == 0
		switch {
		case l.True && agree:
			t.end(episodeTrue, l.Map, now, "agreed")
			t.end(episodeStuck, l.Map, now, "published")
		case l.True:
			t.begin(episodeTrue, l.Map, now, l.Problems[0])
			t.end(episodeStuck, l.Map, now, "published")
		case agree:
			t.end(episodeTrue, l.Map, now, "retracted")
			t.begin(episodeStuck, l.Map, now, l.Published)
		default:
			t.end(episodeTrue, l.Map, now, "retracted")
			t.end(episodeStuck, l.Map, now, "changed")
		}
	}
	for _, e := range t.open {
		if !seen[e.Map] {
			t.end(e.Kind, e.Map, now, "deleted") // removes it from open
		}
	}
	for m := range t.trueSince {
		if !seen[m] {
			delete(t.trueSince, m)
		}
	}
}

// rivals adds the cross-map rule: one owner per hostname. Of two maps True on one name,
// the later True is the rival; a map whose name another True map holds does not agree
// (it cannot be stuck for want of that name).
func (t *tracker) rivals(looks []look) {
	holder := map[string]int{}
	for i, l := range looks {
		if !l.True || l.Host == "" {
			continue
		}
		j, ok := holder[l.Host]
		if !ok {
			holder[l.Host] = i
			continue
		}
		later, first := i, j
		if t.trueSince[looks[i].Map].Before(t.trueSince[looks[j].Map]) ||
			(t.trueSince[looks[i].Map].Equal(t.trueSince[looks[j].Map]) && looks[i].Map < looks[j].Map) {
			later, first = j, i
			holder[l.Host] = i
		}
		looks[later].Problems = append(looks[later].Problems, fmt.Sprintf("rival True on a held name: %s is also True (since earlier) on %s", looks[first].Map, l.Host))
	}
	for i, l := range looks {
		if j, ok := holder[l.Host]; ok && !l.True && l.Host != "" && len(l.Problems) == 0 {
			looks[i].Problems = []string{fmt.Sprintf("name %s is held by %s", l.Host, looks[j].Map)}
		}
	}
}

func (t *tracker) begin(kind, m string, now time.Time, detail string) {
	if _, ok := t.open[kind+" "+m]; !ok {
		t.open[kind+" "+m] = &episode{Map: m, Kind: kind, Start: now, Detail: detail}
	}
}

func (t *tracker) end(kind, m string, now time.Time, how string) {
	if e, ok := t.open[kind+" "+m]; ok {
		e.End, e.How = now, how
		t.closed = append(t.closed, *e)
		delete(t.open, kind+" "+m)
		delete(t.checked, checkKey{kind, m, e.Start})
	}
}

// episodes returns every episode, the open ones marked "open", in order of start.
func (t *tracker) episodes() []episode {
	out := slices.Clone(t.closed)
	for _, e := range t.open {
		c := *e
		c.How = "open"
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Map+out[i].Kind < out[j].Map+out[j].Kind
	})
	return out
}

// judged is what the continuous judge found, for the report.
type judged struct {
	Judgements int            // map-ticks judged while True
	Skips      map[string]int // per skip kind
	// Retract are the lengths of every episode of True while disagreeing (retracted,
	// agreed again, or still open at the end), in order: the time to retract.
	Retract []time.Duration
	// Slices are the lengths of those of them that began with the rule "endpointslice
	// addresses" (dnsoracle.go): how long the EndpointSlices took to follow the DNS.
	Slices []time.Duration
	Lies   []episode // episodes of True standing past their bound
	Stuck  []episode // maps agreed on but not True past their bound
}

// outageFunc is how long from t on within within the publisher could not act (faults.outage).
type outageFunc func(t time.Time, within time.Duration) time.Duration

// judge applies the bounds to the episodes: a True episode longer than retractWithin plus
// the outages within retractWithin of its start is a lie; a stuck one longer than its
// stuckBound is stuck.
func (t *tracker) judge(now time.Time, outage outageFunc) judged {
	j := judged{Judgements: t.judgements, Skips: maps.Clone(t.skips)}
	for _, e := range t.episodes() {
		d := e.length(now)
		switch e.Kind {
		case episodeTrue:
			j.Retract = append(j.Retract, d)
			if strings.HasPrefix(e.Detail, ruleSliceAddresses+":") {
				j.Slices = append(j.Slices, d)
			}
			if d > retractWithin+outage(e.Start, retractWithin) {
				j.Lies = append(j.Lies, e)
			}
		case episodeStuck:
			if d > stuckBound(e.Start, outage) {
				j.Stuck = append(j.Stuck, e)
			}
		}
	}
	return j
}

// stuckBound is how long a map every part agrees on from start may stay not True:
// stuckWithin plus the outages that begin within retractWithin of start (or whose
// aftermath reaches into it). Not a fixpoint over later outages: under the run's schedule
// a leader change comes every 20-30 s and its aftermath lasts 39 s, so a bound pushed by
// every outage that begins before it runs out never runs out, and the rule would judge
// nothing.
func stuckBound(start time.Time, outage outageFunc) time.Duration {
	return stuckWithin + outage(start, retractWithin)
}

// percentiles renders count, p50, p99 and max of ds.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "0 episodes"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("%d episodes, p50 %s, p99 %s, max %s", len(s), at(0.5).Round(time.Millisecond),
		at(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// monitor feeds the tracker from its own caches of the maps, their inputs, routes and
// Services, and from the checker's probes. mu guards tracker; the caches are the
// informers'.
type monitor struct {
	chk *checker

	tms, isvcs, routes, svcs []cache.Store
	wcs                      cache.Store
	slices                   []cache.Store // the publisher's EndpointSlices (with checkerConfig.DNS)

	mu sync.Mutex
	tr *tracker
}

// newMonitor returns a monitor of chk's maps; Start runs it.
func newMonitor(chk *checker) *monitor { return &monitor{chk: chk, tr: newTracker()} }

// Start fills the caches and judges every monitorEvery until ctx ends.
func (m *monitor) Start(ctx context.Context) error {
	cfg := m.chk.cfg
	var infs []cache.SharedIndexInformer
	for _, ns := range cfg.Namespaces {
		tm := ominformers.NewSharedInformerFactoryWithOptions(cfg.OME, 0, ominformers.WithNamespace(ns)).Ome().V1beta1().TrafficMaps().Informer()
		isvc := dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, 0, ns, nil).ForResource(isvcResource).Informer()
		route := gwinformers.NewSharedInformerFactoryWithOptions(cfg.Gateway, 0, gwinformers.WithNamespace(ns)).Gateway().V1().HTTPRoutes().Informer()
		svc := kubeinformers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, kubeinformers.WithNamespace(ns),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManagedBy + "=trafficmap-publisher" })).Core().V1().Services().Informer()
		m.tms, m.isvcs, m.routes, m.svcs = append(m.tms, tm.GetStore()), append(m.isvcs, isvc.GetStore()), append(m.routes, route.GetStore()), append(m.svcs, svc.GetStore())
		infs = append(infs, tm, isvc, route, svc)
		if cfg.DNS != nil {
			es := kubeinformers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, kubeinformers.WithNamespace(ns),
				kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelSliceManagedBy + "=" + sliceManagedBy })).Discovery().V1().EndpointSlices().Informer()
			m.slices = append(m.slices, es.GetStore())
			infs = append(infs, es)
		}
	}
	wc := dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, 0).ForResource(wcResource).Informer()
	m.wcs = wc.GetStore()
	infs = append(infs, wc)
	for _, inf := range infs {
		go inf.RunWithContext(ctx)
	}
	for _, inf := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("monitor caches: %w", ctx.Err())
		}
	}
	go wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		m.tick(time.Now())
		m.check(ctx, time.Now())
	}, monitorEvery)
	return nil
}

// tick judges every map once.
func (m *monitor) tick(now time.Time) {
	looks := m.looks(now)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tr.step(now, looks)
}

// disagrees reports whether the map key stands True while the data plane and the inputs
// disagree, as the last tick saw it (an open True episode).
func (m *monitor) disagrees(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, open := m.tr.open[episodeTrue+" "+key]
	return open
}

// Judge applies the bounds at now (see tracker.judge).
func (m *monitor) Judge(now time.Time, outage outageFunc) judged {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tr.judge(now, outage)
}

// looks reads every map from the caches.
func (m *monitor) looks(now time.Time) []look {
	routes := map[string][]*gwapiv1.HTTPRoute{} // "namespace/source-name"
	for _, s := range m.routes {
		for _, o := range s.List() {
			r := o.(*gwapiv1.HTTPRoute)
			k := r.Namespace + "/" + r.Labels[labelSourceName]
			routes[k] = append(routes[k], r)
		}
	}
	svcs := map[string]map[string]string{} // "namespace/source-name" -> Service name -> cluster
	for _, s := range m.svcs {
		for _, o := range s.List() {
			svc := o.(*corev1.Service)
			k := svc.Namespace + "/" + svc.Labels[labelSourceName]
			if svcs[k] == nil {
				svcs[k] = map[string]string{}
			}
			svcs[k][svc.Name] = svc.Labels[labelCluster]
		}
	}
	var out []look
	slicesByNS := map[string]sliceAddresses{}
	for _, s := range m.tms {
		for _, o := range s.List() {
			tm := o.(*v1beta1.TrafficMap)
			key := tm.Namespace + "/" + tm.Name
			st := stateAt{in: m.inputs(tm), clusters: svcs[key]}
			if m.chk.cfg.DNS != nil {
				if _, ok := slicesByNS[tm.Namespace]; !ok {
					slicesByNS[tm.Namespace] = slicesOf(m.slices, tm.Namespace)
				}
				st.slices = slicesByNS[tm.Namespace]
			}
			for _, r := range routes[key] {
				if owned(r.OwnerReferences, tm) {
					st.route = r
				}
			}
			out = append(out, m.look(tm, st, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Map < out[j].Map })
	return out
}

// inputs is what the caches hold of the map's inputs.
func (m *monitor) inputs(tm *v1beta1.TrafficMap) observed {
	in := observed{Map: tm, HostTemplate: m.chk.cfg.HostTemplate, IPEndpoints: m.chk.cfg.IPEndpoints, Taints: map[string]string{}}
	for _, s := range m.isvcs {
		if o, ok, _ := s.GetByKey(tm.Namespace + "/" + tm.Spec.Service); ok {
			in.ISVC = o.(*unstructured.Unstructured).GetAnnotations()
			if in.ISVC == nil {
				in.ISVC = map[string]string{}
			}
		}
	}
	for _, e := range tm.Spec.Entries {
		if o, ok, _ := m.wcs.GetByKey(e.Cluster); ok {
			if v, ok := o.(*unstructured.Unstructured).GetAnnotations()[annTaints]; ok {
				in.Taints[e.Cluster] = v
			}
		}
	}
	return in
}

// look judges one map: the inputs allow a True, the route serves their weights and the
// gateway accepted it, and every counted probe holds their weights.
func (m *monitor) look(tm *v1beta1.TrafficMap, st stateAt, now time.Time) look {
	key := tm.Namespace + "/" + tm.Name
	l := look{Map: key}
	pub, ok := published(tm)
	switch {
	case ok && pub.Status == metav1.ConditionTrue && pub.ObservedGeneration == tm.Generation:
		l.True = true
	case ok && pub.Status == metav1.ConditionTrue:
		l.Skips = append(l.Skips, skipOlderGeneration)
		l.Published = fmt.Sprintf("Published True at generation %d, the map is at %d", pub.ObservedGeneration, tm.Generation)
	case ok:
		l.Published = fmt.Sprintf("Published %s %s: %.300s", pub.Status, pub.Reason, pub.Message)
	default:
		l.Published = "no Published condition"
	}
	v := expect(st.in)
	if !v.TrueAllowed {
		l.Problems = []string{"inputs allow no True: " + v.Why}
		return l
	}
	l.Host = v.Hostname
	l.Problems = m.chk.judgeRoute(tm, st, v)
	l.Problems = append(l.Problems, judgeSliceAddresses(tm, st, m.chk.cfg.DNS)...)
	want := canonical(v.Weights)
	for _, p := range m.chk.cfg.Probes() {
		if !m.chk.cfg.ProbeMaps(p, key) {
			continue
		}
		ps := p.Status(key, now)
		if skip := counted(ps, now); skip != "" {
			l.Skips = append(l.Skips, skip)
			continue
		}
		if !ps.Present || ps.Weights != want {
			state := "connected"
			if !ps.Connected {
				state = "departed " + ps.LinkAt.Format(timeLayout)
			}
			held := fmt.Sprintf("%q (present %v)", ps.Weights, ps.Present)
			if ps.Broken != "" {
				held += ", chain broken: " + ps.Broken
			}
			l.Problems = append(l.Problems, fmt.Sprintf("xds: probe %s (%s) holds %s, the inputs give %q", p.ID(), state, held, want))
		}
	}
	return l
}

// counted says why a probe's status does not count against a True ("" when it does): a
// client that never connected, one that departed longer than departedGrace ago, one that
// never held the map (new to it: it routes nothing by it). A frozen or partitioned client
// with its stream open counts, and so does a departed one within the grace, with what it
// held.
func counted(ps probeStatus, now time.Time) string {
	switch {
	case !ps.EverConnected:
		return skipNeverConnected
	case !ps.Connected && now.Sub(ps.LinkAt) > departedGrace:
		return skipDeparted
	case !ps.EverHeld:
		return skipNewClient
	}
	return ""
}

// describe renders episodes for the report, at most limit of them.
func describe(es []episode, now time.Time, limit int) []string {
	var out []string
	for _, e := range es {
		if len(out) == limit {
			out = append(out, fmt.Sprintf("... and %d more", len(es)-limit))
			break
		}
		s := fmt.Sprintf("%s from %s for %s (%s)", e.Map, e.Start.Format(timeLayout), e.length(now).Round(time.Millisecond), e.How)
		if e.Detail != "" {
			s += ": " + strings.TrimSpace(e.Detail)
		}
		out = append(out, s)
	}
	return out
}
