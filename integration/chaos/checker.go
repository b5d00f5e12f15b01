package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	ominformers "github.com/trafficmap/publisher/api/client/informers/externalversions"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// The checker reads the publisher's output only through the API server and its own xDS
// probes, and the inputs only through the API server; it shares no code with the
// publisher beyond the TrafficMap API types.
var (
	isvcResource = schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "inferenceservices"}
	wcResource   = schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "workloadclusters"}
)

// The labels the publisher documents on what it writes (docs/reference/written.md).
const (
	labelManagedBy       = "app.kubernetes.io/managed-by"
	labelSourceNamespace = "publisher.trafficmap.dev/source-namespace"
	labelSourceName      = "publisher.trafficmap.dev/source-name"
	labelCluster         = "publisher.trafficmap.dev/cluster"
)

// lie is one Published=True the checker's own observations contradict.
type lie struct {
	Map      string
	RV       string
	At       time.Time
	Rule     string
	Detail   string
	Timeline string
}

// pubState is what the checker last saw of one map's Published condition.
type pubState struct {
	Status             metav1.ConditionStatus
	Reason             string
	ObservedGeneration int64
	Message            string
}

// falseWindow is one stretch of Published=False (or no condition after having had one).
type falseWindow struct {
	Map        string
	Start, End time.Time
	// Settled is when the map's inputs last changed before End, as the checker saw them
	// (inputLog.LastChange; Start when they did not change during the window): the time
	// to publish is End - Settled.
	Settled time.Time
	Reasons []string // every reason the condition had meanwhile, in order
}

// settled is Settled, or Start when unset.
func (w falseWindow) settled() time.Time {
	if w.Settled.IsZero() {
		return w.Start
	}
	return w.Settled
}

// waiting reports whether the window only waited for sinks (Publishing, XDSRejected,
// RouteNotAccepted): a fault can cause those, while the other reasons come from the
// workload's own inputs (a contested hostname, a malformed annotation, a ramp, a deletion).
func (w falseWindow) waiting() bool {
	for _, r := range w.Reasons {
		if r != "Publishing" && r != "XDSRejected" && r != "RouteNotAccepted" {
			return false
		}
	}
	return true
}

// transition is one change of a map's Published condition as the checker's watch saw it.
type transition struct {
	At     time.Time
	RV     string
	Status metav1.ConditionStatus
	Reason string
	Gen    int64
}

// trueEvent is a True to check.
type trueEvent struct {
	Map *v1beta1.TrafficMap
	At  time.Time
}

// checkerConfig wires the checker.
type checkerConfig struct {
	OME          omeclient.Interface
	Kube         kubernetes.Interface
	Gateway      gwclient.Interface
	Dynamic      dynamic.Interface
	Namespaces   []string
	GatewayNS    string
	GatewayName  string
	HostTemplate string
	IPEndpoints  bool // observed.IPEndpoints
	// DNS is the current answer of the harness's DNS server for an endpoint hostname (false:
	// it has none); set, the checker holds the maps' EndpointSlices to it (dnsoracle.go).
	DNS    func(host string) ([]string, bool)
	Probes func() []*probe
	// ProbeMaps says whether a probe subscribes to the map key (gRPC probes: their maps;
	// Envoy probes: every map).
	ProbeMaps func(p *probe, key string) bool
	// Lag is how far before its observation a True may have been written (the watch's
	// delay, longer around apiserver faults).
	Lag  func(at time.Time) time.Duration
	Logf func(string, ...any)
}

// checker records every Published transition and checks each True against its own
// observations: the stored route at that resourceVersion, the gateway's verdict on it, the
// inputs at that resourceVersion (oracle.go) and what every connected probe holds. One lock
// (mu) guards its records; checks run on their own goroutines and read the API server.
type checker struct {
	cfg checkerConfig

	mu          sync.Mutex
	last        map[string]pubState
	history     map[string][]transition
	falseSince  map[string]time.Time
	falseReason map[string][]string
	windows     []falseWindow
	lies        []lie
	checked     int
	unchecked   []string
	transitions int
	trues       int
	olderGen    int            // Trues about an older generation (not checked: skipped, counted)
	skips       map[string]int // the per-True check's other skips, by kind
	races       []race
	changes     map[string][]time.Time // every change of a map's condition, message included
	// inputs are the changes of the maps' inputs; sources and gens what each map's last
	// observation said of its inputs and its generation.
	inputs  *inputLog
	sources map[string]source
	gens    map[string]int64

	queue chan trueEvent
	wg    sync.WaitGroup
	// mon is the continuous judge (monitor.go); judged what it found, set by settleMonitor.
	mon    *monitor
	judged judged
}

func newChecker(cfg checkerConfig) *checker {
	c := &checker{cfg: cfg, last: map[string]pubState{}, history: map[string][]transition{},
		falseSince: map[string]time.Time{}, falseReason: map[string][]string{}, changes: map[string][]time.Time{},
		inputs: newInputLog(), sources: map[string]source{}, gens: map[string]int64{}, skips: map[string]int{}, queue: make(chan trueEvent, 100000)}
	c.mon = newMonitor(c)
	return c
}

// Start watches the TrafficMaps and the inputs of every namespace and runs the checks until
// ctx ends.
func (c *checker) Start(ctx context.Context) error {
	if err := c.inputs.Watch(ctx, c.cfg.Dynamic, c.cfg.Namespaces); err != nil {
		return err
	}
	for _, ns := range c.cfg.Namespaces {
		inf := ominformers.NewSharedInformerFactoryWithOptions(c.cfg.OME, 0, ominformers.WithNamespace(ns)).Ome().V1beta1().TrafficMaps().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.observe(obj.(*v1beta1.TrafficMap), false) },
			UpdateFunc: func(_, obj any) { c.observe(obj.(*v1beta1.TrafficMap), false) },
			DeleteFunc: func(obj any) {
				if tm, ok := obj.(*v1beta1.TrafficMap); ok {
					c.observe(tm, true)
				}
			},
		})
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("checker trafficmap cache for namespace %s: %w", ns, ctx.Err())
		}
	}
	if err := c.mon.Start(ctx); err != nil {
		return err
	}
	for range 2 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-c.queue:
					c.check(ctx, ev)
				}
			}
		}()
	}
	return nil
}

// Drain waits until every queued True was checked (or ctx ends).
func (c *checker) Drain(ctx context.Context) {
	for len(c.queue) > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func published(tm *v1beta1.TrafficMap) (pubState, bool) {
	cond := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	if cond == nil {
		return pubState{}, false
	}
	return pubState{Status: cond.Status, Reason: cond.Reason, ObservedGeneration: cond.ObservedGeneration, Message: cond.Message}, true
}

// observe records a transition and queues a check for a True; a True whose generation,
// reason or message changed is checked again (a True message changes only with new content).
func (c *checker) observe(tm *v1beta1.TrafficMap, deleted bool) {
	key := tm.Namespace + "/" + tm.Name
	now := time.Now()
	ev, queue := c.record(key, tm, deleted, now)
	if queue {
		// Sent without mu: a full queue blocks this watch handler until a check takes
		// one, and the checks take mu.
		c.queue <- ev
	}
}

// record is observe's bookkeeping under mu; it returns the True to check, if any.
func (c *checker) record(key string, tm *v1beta1.TrafficMap, deleted bool, now time.Time) (trueEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		c.closeWindow(key, now)
		delete(c.last, key)
		delete(c.gens, key)
		return trueEvent{}, false
	}
	if g, ok := c.gens[key]; ok && g != tm.Generation {
		c.inputs.SpecChanged(key, now)
	}
	c.gens[key] = tm.Generation
	c.sources[key] = sourceOf(tm)
	st, ok := published(tm)
	if !ok {
		return trueEvent{}, false
	}
	prev, had := c.last[key]
	if had && prev == st {
		return trueEvent{}, false
	}
	c.last[key] = st
	c.changes[key] = append(c.changes[key], now)
	if !had || prev.Status != st.Status || prev.Reason != st.Reason || prev.ObservedGeneration != st.ObservedGeneration {
		c.transitions++
		c.history[key] = append(c.history[key], transition{At: now, RV: tm.ResourceVersion, Status: st.Status, Reason: st.Reason, Gen: st.ObservedGeneration})
		if h := c.history[key]; len(h) > 40 {
			c.history[key] = h[len(h)-40:]
		}
	}
	if st.Status == metav1.ConditionTrue {
		c.closeWindow(key, now)
		c.trues++
		if st.ObservedGeneration != tm.Generation {
			// A True about an older generation claims nothing of the current spec: counted
			// as a skip, and the continuous judge holds the map to its inputs meanwhile.
			c.olderGen++
			return trueEvent{}, false
		}
		return trueEvent{Map: tm.DeepCopy(), At: now}, true
	}
	if _, open := c.falseSince[key]; !open {
		c.falseSince[key] = now
		c.falseReason[key] = nil
	}
	if rs := c.falseReason[key]; len(rs) == 0 || rs[len(rs)-1] != st.Reason {
		c.falseReason[key] = append(rs, st.Reason)
	}
	return trueEvent{}, false
}

// closeWindow ends the map's False window, if one is open. The caller holds mu.
func (c *checker) closeWindow(key string, now time.Time) {
	if start, open := c.falseSince[key]; open {
		c.windows = append(c.windows, c.window(key, start, now))
		delete(c.falseSince, key)
	}
}

// window is the map's False window from start to end, with the last input change in it.
// The caller holds mu.
func (c *checker) window(key string, start, end time.Time) falseWindow {
	return falseWindow{Map: key, Start: start, End: end, Settled: c.inputs.LastChange(key, c.sources[key], start, end), Reasons: c.falseReason[key]}
}

// check judges one True against the API server's state at its resourceVersion and the
// probes' records. An API error (a fault is on) is retried for a while; a True the
// checker could not judge is listed as unchecked, never counted as fine.
func (c *checker) check(ctx context.Context, ev trueEvent) {
	key := ev.Map.Namespace + "/" + ev.Map.Name
	var problems []string
	var err error
	for attempt := 0; attempt < 60 && ctx.Err() == nil; attempt++ {
		problems, err = c.judge(ctx, ev)
		if err == nil {
			break
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			// etcd compacted that resourceVersion away: the state is gone for good. The
			// continuous judge held the map to its inputs meanwhile.
			c.skip(skipCompacted)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.unchecked = append(c.unchecked, fmt.Sprintf("%s at resourceVersion %s: %v", key, ev.Map.ResourceVersion, err))
		return
	}
	c.checked++
	for _, p := range problems {
		rule, detail, _ := strings.Cut(p, ": ")
		c.lies = append(c.lies, lie{Map: key, RV: ev.Map.ResourceVersion, At: ev.At, Rule: rule, Detail: detail, Timeline: c.timeline(key, ev.At)})
		c.cfg.Logf("LIE %s at resourceVersion %s: %s", key, ev.Map.ResourceVersion, p)
	}
}

// stateAt is what the API server held at one resourceVersion for one map.
type stateAt struct {
	in       observed
	route    *gwapiv1.HTTPRoute
	clusters map[string]string // Service name -> cluster label
	// slices are the ready addresses of the publisher's EndpointSlices by Service (read only
	// with checkerConfig.DNS: the rule "endpointslice addresses", dnsoracle.go).
	slices sliceAddresses
	isvcRV string
	wcRV   map[string]string
}

// inputs renders what the inputs were, for a lie's report.
func (st stateAt) inputs() string {
	var entries []string
	for _, e := range st.in.Map.Spec.Entries {
		entries = append(entries, fmt.Sprintf("%s=%d%v", e.Cluster, e.Weight, e.DrainRefs))
	}
	var taints []string
	for _, e := range st.in.Map.Spec.Entries {
		if v, ok := st.in.Taints[e.Cluster]; ok {
			taints = append(taints, fmt.Sprintf("%s(rv %s)=%s", e.Cluster, st.wcRV[e.Cluster], v))
		}
	}
	return fmt.Sprintf("entries %v; inferenceservice rv %s drains %s tolerations %s ramp %s; taints %v",
		entries, st.isvcRV, st.in.ISVC[annDrain], st.in.ISVC[annTolerations], st.in.ISVC[annRamp], taints)
}

// read lists, at exactly resourceVersion rv, the map's InferenceService, every
// WorkloadCluster, its route and its Services.
func (c *checker) read(ctx context.Context, tm *v1beta1.TrafficMap, rv string) (stateAt, error) {
	st := stateAt{in: observed{Map: tm, HostTemplate: c.cfg.HostTemplate, IPEndpoints: c.cfg.IPEndpoints, Taints: map[string]string{}}, clusters: map[string]string{}, wcRV: map[string]string{}}
	at := func(selector string) metav1.ListOptions {
		return metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, FieldSelector: selector}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	isvcs, err := c.cfg.Dynamic.Resource(isvcResource).Namespace(tm.Namespace).List(ctx, at("metadata.name="+tm.Spec.Service))
	if err != nil {
		return st, fmt.Errorf("list inferenceservice %s at %s: %w", tm.Spec.Service, rv, err)
	}
	if len(isvcs.Items) == 1 {
		st.isvcRV = isvcs.Items[0].GetResourceVersion()
		st.in.ISVC = isvcs.Items[0].GetAnnotations()
		if st.in.ISVC == nil {
			st.in.ISVC = map[string]string{}
		}
	}
	wcs, err := c.cfg.Dynamic.Resource(wcResource).List(ctx, at(""))
	if err != nil {
		return st, fmt.Errorf("list workloadclusters at %s: %w", rv, err)
	}
	for _, wc := range wcs.Items {
		// Every cluster's version, tainted or not: removing the annotation is a change too.
		st.wcRV[wc.GetName()] = wc.GetResourceVersion()
		if v, ok := wc.GetAnnotations()[annTaints]; ok {
			st.in.Taints[wc.GetName()] = v
		}
	}
	routes, err := c.cfg.Gateway.GatewayV1().HTTPRoutes(tm.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		LabelSelector: labelSourceNamespace + "=" + tm.Namespace + "," + labelSourceName + "=" + tm.Name})
	if err != nil {
		return st, fmt.Errorf("list httproutes of %s at %s: %w", tm.Name, rv, err)
	}
	for i := range routes.Items {
		if owned(routes.Items[i].OwnerReferences, tm) {
			st.route = &routes.Items[i]
		}
	}
	svcs, err := c.cfg.Kube.CoreV1().Services(tm.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		LabelSelector: labelSourceNamespace + "=" + tm.Namespace + "," + labelSourceName + "=" + tm.Name})
	if err != nil {
		return st, fmt.Errorf("list services of %s at %s: %w", tm.Name, rv, err)
	}
	for _, s := range svcs.Items {
		st.clusters[s.Name] = s.Labels[labelCluster]
	}
	return st, nil
}

func owned(refs []metav1.OwnerReference, tm *v1beta1.TrafficMap) bool {
	for _, r := range refs {
		if r.Kind == "TrafficMap" && r.Name == tm.Name && r.UID == tm.UID {
			return true
		}
	}
	return false
}

// judge returns the rules a True breaks ("rule: detail"), or an error when the state
// could not be read.
func (c *checker) judge(ctx context.Context, ev trueEvent) ([]string, error) {
	tm := ev.Map
	st, err := c.read(ctx, tm, tm.ResourceVersion)
	if err != nil {
		return nil, err
	}
	problems := c.against(tm, ev.At, st, st)
	if len(problems) == 0 {
		return nil, nil
	}
	// Kubernetes has no transaction over two objects: a publisher reads the inputs (live,
	// just before its write) and then writes the map's status, and an input written in
	// between is newer than what the True is about. Such a True is a race, not a lie, only
	// if it is exactly right for the inputs just before the latest input change and the
	// publisher retracts it (changes the condition) within retractWithin.
	changed := latestRV(st)
	if changed <= 1 {
		return problems, nil
	}
	before, err := c.read(ctx, tm, strconv.FormatInt(changed-1, 10))
	if err != nil {
		return nil, err
	}
	if len(c.against(tm, ev.At, before, st)) > 0 {
		return problems, nil
	}
	c.mu.Lock()
	c.races = append(c.races, race{Map: tm.Namespace + "/" + tm.Name, RV: tm.ResourceVersion, At: ev.At, Changed: changed})
	c.mu.Unlock()
	return nil, nil
}

// against judges a True with the inputs of in and the route of out (both stateAt reads).
func (c *checker) against(tm *v1beta1.TrafficMap, at time.Time, in, out stateAt) []string {
	v := expect(in.in)
	if !v.TrueAllowed {
		return []string{"inputs allow no True: " + v.Why + " (" + in.inputs() + ")"}
	}
	withRoute := in
	withRoute.route, withRoute.clusters = out.route, out.clusters
	problems := c.judgeRoute(tm, withRoute, v)
	for _, p := range c.judgeXDS(tm, at, v) {
		problems = append(problems, p+" ("+in.inputs()+")")
	}
	return problems
}

// latestRV is the resourceVersion of the newest input object read (the InferenceService
// and the entry clusters' WorkloadClusters), 0 when none parses.
func latestRV(st stateAt) int64 {
	latest, _ := strconv.ParseInt(st.isvcRV, 10, 64)
	for _, e := range st.in.Map.Spec.Entries {
		if rv, err := strconv.ParseInt(st.wcRV[e.Cluster], 10, 64); err == nil && rv > latest {
			latest = rv
		}
	}
	return latest
}

// retractWithin bounds how long a True about inputs that changed during its write may stand:
// as after any input change, the publisher must react to it.
const retractWithin = 30 * time.Second

// race is a True about the inputs just before a change that landed during its write.
type race struct {
	Map     string
	RV      string
	At      time.Time
	Changed int64 // the resourceVersion of that change
	// Retracted is how long after At the condition changed; 0 while not (yet).
	Retracted time.Duration
}

// settleRaces turns every race whose True stood longer than retractWithin (plus
// outage(at): how long the API server or the leader could not write meanwhile) into a lie
// and records how long the others stood. Called once the queue is drained.
func (c *checker) settleRaces(now time.Time, outage outageFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.races {
		r := &c.races[i]
		if next, ok := c.nextChange(r.Map, r.At); ok {
			r.Retracted = next.Sub(r.At)
		} else if back, ok := c.agreedAgain(r.Map, r.At, now); ok {
			r.Retracted = back.Sub(r.At) // the inputs came back to what the True was about
		}
		bound := retractWithin + outage(r.At, retractWithin)
		if (r.Retracted == 0 && now.Sub(r.At) > bound) || r.Retracted > bound {
			c.lies = append(c.lies, lie{Map: r.Map, RV: r.RV, At: r.At, Rule: "stale True",
				Detail:   fmt.Sprintf("about the inputs before resourceVersion %d and not retracted within %s", r.Changed, bound),
				Timeline: c.timeline(r.Map, r.At)})
		}
	}
}

// settleMonitor applies the continuous judge's bounds at now (tracker.judge) and adds each
// True that stood past its bound as the lie "True not retracted". Called once, after the
// run.
func (c *checker) settleMonitor(now time.Time, outage outageFunc) {
	j := c.mon.Judge(now, outage)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.judged = j
	for _, e := range j.Lies {
		c.lies = append(c.lies, lie{Map: e.Map, At: e.Start, Rule: "True not retracted",
			Detail: fmt.Sprintf("Published stood True for %s (%s) while the data plane and the inputs disagreed, bound %s: %s",
				e.length(now).Round(time.Millisecond), e.How, retractWithin+outage(e.Start, retractWithin), e.Detail),
			Timeline: c.timeline(e.Map, e.Start)})
		c.cfg.Logf("LIE %s at %s: True not retracted: %s", e.Map, e.Start.Format(timeLayout), e.Detail)
	}
}

// agreedAgain is when a True about older inputs became right again without a change of
// the condition: the inputs came back (a malformed annotation put back as it was) and the
// continuous judge finds the map agreeing now. It is the inputs' last change after at (the
// inputLog); false while the judge still finds a disagreement, or when nothing changed.
// The caller holds mu; the monitor's lock is taken under it (never the other way round).
func (c *checker) agreedAgain(key string, at, now time.Time) (time.Time, bool) {
	if c.mon == nil || c.mon.disagrees(key) {
		return time.Time{}, false
	}
	back := c.inputs.LastChange(key, c.sources[key], at, now)
	return back, back.After(at)
}

// nextChange is when the map's condition next changed after at. The caller holds mu.
func (c *checker) nextChange(key string, at time.Time) (time.Time, bool) {
	for _, t := range c.changes[key] {
		if t.After(at) {
			return t, true
		}
	}
	return time.Time{}, false
}

// judgeRoute: the stored route holds exactly the expected weights and hostname, and the
// gateway accepted that generation.
func (c *checker) judgeRoute(tm *v1beta1.TrafficMap, st stateAt, v verdict) []string {
	r := st.route
	if r == nil {
		return []string{"route: no HTTPRoute of the map is stored"}
	}
	var problems []string
	got := map[string]int32{}
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			cl, ok := st.clusters[string(b.Name)]
			if !ok {
				problems = append(problems, fmt.Sprintf("route: backendRef %s is not a Service of the map", b.Name))
				continue
			}
			w := int32(1)
			if b.Weight != nil {
				w = *b.Weight
			}
			got[cl] += w
		}
	}
	if !maps.Equal(got, v.Weights) {
		problems = append(problems, fmt.Sprintf("route weights: route %s generation %d (rv %s) holds %s, the inputs give %s (%s)", r.Name, r.Generation, r.ResourceVersion, render(got), render(v.Weights), st.inputs()))
	}
	if len(r.Spec.Hostnames) != 1 || string(r.Spec.Hostnames[0]) != v.Hostname {
		problems = append(problems, fmt.Sprintf("route hostname: route %s holds %v, the inputs give %s", r.Name, r.Spec.Hostnames, v.Hostname))
	}
	if !c.accepted(r) {
		problems = append(problems, fmt.Sprintf("gateway: route %s generation %d is not Accepted and ResolvedRefs by %s/%s at that generation", r.Name, r.Generation, c.cfg.GatewayNS, c.cfg.GatewayName))
	}
	return problems
}

func (c *checker) accepted(r *gwapiv1.HTTPRoute) bool {
	for _, p := range r.Status.Parents {
		if string(p.ParentRef.Name) != c.cfg.GatewayName || p.ParentRef.Namespace == nil || string(*p.ParentRef.Namespace) != c.cfg.GatewayNS {
			continue
		}
		ok := 0
		for _, t := range []string{string(gwapiv1.RouteConditionAccepted), string(gwapiv1.RouteConditionResolvedRefs)} {
			cond := meta.FindStatusCondition(p.Conditions, t)
			if cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == r.Generation {
				ok++
			}
		}
		return ok == 2
	}
	return false
}

// judgeXDS: every probe subscribed to the map that was connected throughout the window
// before the True was seen held the expected weights at some moment of that window.
func (c *checker) judgeXDS(tm *v1beta1.TrafficMap, at time.Time, v verdict) []string {
	key := tm.Namespace + "/" + tm.Name
	want := canonical(v.Weights)
	from, to := at.Add(-c.cfg.Lag(at)), at
	// The True was written before the watch showed it: a client that took the weights on
	// after the write (but before the event arrived) did not hold them when Published
	// said so. The status write's time is in managedFields, to the second.
	if wt, ok := statusWriteTime(tm); ok {
		to = minTime(to, wt.Add(time.Second))
		from = minTime(from, wt)
	} else {
		c.skip(skipNoWriteTime)
	}
	var problems []string
	for _, p := range c.cfg.Probes() {
		if !c.cfg.ProbeMaps(p, key) {
			continue
		}
		if !connectedThroughout(p, key, from, to) {
			c.skip(skipReconnected)
			continue
		}
		if !heldWithin(p, key, want, from, to) {
			got, _, _ := p.HeldAt(key, to)
			problems = append(problems, fmt.Sprintf("xds: probe %s, connected throughout, holds %q, not %q, at any moment from %s to %s", p.ID(), got, want, from.Format(timeLayout), to.Format(timeLayout)))
		}
	}
	return problems
}

// Kinds of skip of the per-True check, counted beside the continuous judge's.
const (
	skipNoWriteTime = "per-True check: no status write time in managedFields (window up to the watch event)"
	skipReconnected = "per-True check: client not connected throughout the window"
	skipCompacted   = "per-True check: state at the True's resourceVersion compacted away"
)

// skip counts one skip of kind.
func (c *checker) skip(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skips[kind]++
}

// statusWriteTime is when the publisher last wrote the map's status, from managedFields
// (the status subresource, a manager named trafficmap-publisher..., docs/reference/written.md);
// the API server records it to the second.
func statusWriteTime(tm *v1beta1.TrafficMap) (time.Time, bool) {
	var latest time.Time
	for _, f := range tm.ManagedFields {
		if f.Subresource != "status" || !strings.HasPrefix(f.Manager, "trafficmap-publisher") || f.Time == nil {
			continue
		}
		if f.Time.After(latest) {
			latest = f.Time.Time
		}
	}
	return latest, !latest.IsZero()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

const timeLayout = "15:04:05.000"

// connectedThroughout: connected at from, and no disconnect up to at.
func connectedThroughout(p *probe, key string, from, to time.Time) bool {
	if _, _, connected := p.HeldAt(key, from); !connected {
		return false
	}
	for _, e := range p.History(key) {
		if e.Kind == "disconnected" && e.At.After(from) && !e.At.After(to) {
			return false
		}
	}
	return true
}

// heldWithin: the probe held want at from or took it on (an ACK) before to.
func heldWithin(p *probe, key, want string, from, to time.Time) bool {
	if got, present, _ := p.HeldAt(key, from); present && got == want {
		return true
	}
	for _, e := range p.History(key) {
		if e.Kind == "held" && e.Present && e.Weights == want && e.At.After(from) && !e.At.After(to) {
			return true
		}
	}
	return false
}

// render is "cluster=weight,..." sorted by cluster, zeros included.
func render(w map[string]int32) string {
	parts := make([]string, 0, len(w))
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, k+"="+strconv.Itoa(int(w[k])))
	}
	return strings.Join(parts, ",")
}

// timeline renders the map's recent transitions and the probes' recent records of it, for
// a lie's report. The caller holds mu.
func (c *checker) timeline(key string, at time.Time) string {
	var b strings.Builder
	for _, t := range c.history[key] {
		fmt.Fprintf(&b, "  %s rv %s Published=%s %s gen %d\n", t.At.Format(timeLayout), t.RV, t.Status, t.Reason, t.Gen)
	}
	for _, p := range c.cfg.Probes() {
		if !c.cfg.ProbeMaps(p, key) {
			continue
		}
		h := p.History(key)
		if len(h) > 12 {
			h = h[len(h)-12:]
		}
		for _, e := range h {
			if e.At.After(at.Add(-time.Minute)) {
				fmt.Fprintf(&b, "  %s probe %s %s %q present=%v", e.At.Format(timeLayout), p.ID(), e.Kind, e.Weights, e.Present)
				if e.Broken != "" {
					fmt.Fprintf(&b, " broken: %s", e.Broken)
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// results is what the checker found.
type checkResults struct {
	Transitions, Trues, Checked int
	Unchecked                   []string
	Lies                        []lie
	Windows                     []falseWindow
	Races                       []race
	OlderGen                    int            // Trues about an older generation, skipped
	Skips                       map[string]int // the per-True check's other skips
	Judged                      judged         // the continuous judge's findings (settleMonitor)
}

// Results closes the open False windows at now and returns a copy of the records.
func (c *checker) Results(now time.Time) checkResults {
	c.mu.Lock()
	defer c.mu.Unlock()
	windows := slices.Clone(c.windows)
	for key, start := range c.falseSince {
		windows = append(windows, c.window(key, start, now))
	}
	return checkResults{Transitions: c.transitions, Trues: c.trues, Checked: c.checked,
		Unchecked: slices.Clone(c.unchecked), Lies: slices.Clone(c.lies), Windows: windows, Races: slices.Clone(c.races), OlderGen: c.olderGen, Skips: maps.Clone(c.skips), Judged: c.judged}
}

// finalState is the end-of-run check of one map: Published True at its generation, the
// route and every connected probe at the inputs' weights (nothing lost).
func (c *checker) finalState(ctx context.Context, ns, name string) error {
	tm, err := c.cfg.OME.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get trafficmap %s/%s: %w", ns, name, err)
	}
	st, ok := published(tm)
	if !ok || st.Status != metav1.ConditionTrue || st.ObservedGeneration != tm.Generation {
		return fmt.Errorf("trafficmap %s/%s: Published is %s/%s at generation %d (map generation %d): %s; %s", ns, name, st.Status, st.Reason,
			st.ObservedGeneration, tm.Generation, st.Message, c.probeView(ns+"/"+name))
	}
	// The inputs as they are now, not as at the map's last write: a True written before an
	// input changed and changed back (a malformed annotation put back as it was) is right
	// again without a write.
	now, err := c.cfg.OME.OmeV1beta1().TrafficMaps(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("list trafficmaps in %s: %w", ns, err)
	}
	s, err := c.read(ctx, tm, now.ResourceVersion)
	if err != nil {
		return err
	}
	v := expect(s.in)
	if !v.TrueAllowed {
		return fmt.Errorf("trafficmap %s/%s: final inputs allow no True: %s", ns, name, v.Why)
	}
	problems := c.judgeRoute(tm, s, v)
	if c.cfg.DNS != nil {
		es, err := c.cfg.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: labelSliceManagedBy + "=" + sliceManagedBy})
		if err != nil {
			return fmt.Errorf("list endpointslices in %s: %w", ns, err)
		}
		s.slices = sliceAddresses{}
		for i := range es.Items {
			s.slices.addSlice(&es.Items[i])
		}
		problems = append(problems, judgeSliceAddresses(tm, s, c.cfg.DNS)...)
	}
	key := ns + "/" + name
	want := canonical(v.Weights)
	for _, p := range c.cfg.Probes() {
		if !c.cfg.ProbeMaps(p, key) {
			continue
		}
		if got, present, connected := p.HeldAt(key, time.Now()); connected && (!present || got != want) {
			problems = append(problems, fmt.Sprintf("xds: probe %s holds %q (present %v), not %q", p.ID(), got, present, want))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("trafficmap %s/%s: %s", ns, name, strings.Join(problems, "; "))
	}
	return nil
}

// probeView is, for a map not correct at the end, what every checker probe subscribed to it
// holds and since when ("probes: id holds "w" since hh:mm:ss.mmm (connected), ..."): a
// probe that stopped taking on new content stands out by its old time.
func (c *checker) probeView(key string) string {
	var parts []string
	for _, p := range c.cfg.Probes() {
		if !c.cfg.ProbeMaps(p, key) {
			continue
		}
		h := p.History(key)
		since, link := "never", "disconnected"
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].Kind == eventHeld {
				since = h[i].At.Format(timeLayout)
				break
			}
		}
		got, present, connected := p.HeldAt(key, time.Now())
		if connected {
			link = "connected"
		}
		parts = append(parts, fmt.Sprintf("%s holds %q (present %v) since %s (%s)", p.ID(), got, present, since, link))
	}
	return "probes: " + strings.Join(parts, ", ")
}

// orphans lists the publisher's objects (routes, Services, by its labels) whose TrafficMap
// is gone or has another UID.
func (c *checker) orphans(ctx context.Context) ([]string, error) {
	var out []string
	for _, ns := range c.cfg.Namespaces {
		maps, err := c.cfg.OME.OmeV1beta1().TrafficMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list trafficmaps in %s: %w", ns, err)
		}
		uids := map[string]string{}
		for _, m := range maps.Items {
			uids[m.Name] = string(m.UID)
		}
		live := func(labels map[string]string, refs []metav1.OwnerReference) bool {
			uid, ok := uids[labels[labelSourceName]]
			if !ok {
				return false
			}
			for _, r := range refs {
				if r.Kind == "TrafficMap" && string(r.UID) == uid {
					return true
				}
			}
			return false
		}
		sel := metav1.ListOptions{LabelSelector: labelManagedBy + "=trafficmap-publisher"}
		routes, err := c.cfg.Gateway.GatewayV1().HTTPRoutes(ns).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list httproutes in %s: %w", ns, err)
		}
		for _, r := range routes.Items {
			if !live(r.Labels, r.OwnerReferences) {
				out = append(out, "httproute "+ns+"/"+r.Name)
			}
		}
		svcs, err := c.cfg.Kube.CoreV1().Services(ns).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list services in %s: %w", ns, err)
		}
		for _, s := range svcs.Items {
			if !live(s.Labels, s.OwnerReferences) || !usedByRoute(s, routes.Items) {
				out = append(out, "service "+ns+"/"+s.Name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// usedByRoute: a Service of a live map is an orphan when no route of the map refers to it
// (the publisher prunes unreferenced Services after the route).
func usedByRoute(s corev1.Service, routes []gwapiv1.HTTPRoute) bool {
	for _, r := range routes {
		if r.Labels[labelSourceName] != s.Labels[labelSourceName] {
			continue
		}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if string(b.Name) == s.Name {
					return true
				}
			}
		}
	}
	return false
}
