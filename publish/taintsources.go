package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The taint sources' freshness and discovery (issue 25 item 5):
//
//   - A map turns Published True only if the taints its decision used are the ones on the
//     API server, read after the decision's inputs (staleClusters): the caches may be
//     behind a taint patched just after `publisher taint` flipped the map False, and a
//     source whose API no informer watches yet contributes no taints to the caches at all.
//   - A source whose API turns served after the publisher started (its CRD installed
//     later) is found without a restart (taintDiscovery): discovery is checked every
//     Config.TaintSourcePeriod and at once when staleClusters finds a taint on a source no
//     informer watches; its informer then starts and, once synced, the maps of its
//     clusters are reconciled. A source no longer served is stopped the same way.

// DefaultTaintSourcePeriod is Config.TaintSourcePeriod's default.
const DefaultTaintSourcePeriod = 30 * time.Second

const (
	// minDiscoveryGap is the least time between two discovery checks that kicks start.
	minDiscoveryGap = time.Second
	// taintSyncTimeout bounds the wait for a newly started taint source informer's cache;
	// one that does not sync in time is stopped and tried again at the next check.
	taintSyncTimeout = time.Minute
	// liveReadTimeout bounds one round of live taint source reads.
	liveReadTimeout = 30 * time.Second
)

// taintSource is one optional taint source API.
type taintSource struct {
	kind     string
	gvr      schema.GroupVersionResource
	resource string // as named in logs, health and errors
	// read is the source's view of one object (InferenceClusterTaints,
	// WorkloadClusterTaints).
	read func(u *unstructured.Unstructured) model.ClusterTaints
}

// taintSources are the optional taint sources, in the order they are read.
var taintSources = []taintSource{
	{kind: model.KindInferenceCluster, gvr: model.InferenceClustersResource, resource: "inferenceclusters.modelplane.ai", read: model.InferenceClusterTaints},
	{kind: model.KindWorkloadCluster, gvr: model.WorkloadClustersResource, resource: "workloadclusters.ome.io",
		read: func(u *unstructured.Unstructured) model.ClusterTaints {
			return model.WorkloadClusterTaints(u.GetName(), u.GetAnnotations())
		}},
}

// clusterSources are the optional taint sources as the pipeline reads them: the informer of
// each source whose API is served, and the live reads past them.
type clusterSources struct {
	// mu guards inferenceClusters and workloadClusters: each is set once its API is served
	// and its informer synced, and cleared when the API is no longer served.
	mu                sync.RWMutex
	inferenceClusters cache.SharedIndexInformer // nil while the API is not served
	workloadClusters  cache.SharedIndexInformer // nil while the API is not served
	// live reads the taint sources past the caches (stale); discover is kicked when it
	// finds a taint on a source no informer watches yet (buffered 1, never blocks).
	live     *liveTaints
	discover chan struct{}
}

// informer is the running, synced informer of the taint source kind, or nil.
func (s *clusterSources) informer(kind string) cache.SharedIndexInformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if kind == model.KindWorkloadCluster {
		return s.workloadClusters
	}
	return s.inferenceClusters
}

// set sets (nil: clears) the informer of the taint source kind.
func (s *clusterSources) set(kind string, inf cache.SharedIndexInformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == model.KindWorkloadCluster {
		s.workloadClusters = inf
	} else {
		s.inferenceClusters = inf
	}
}

// kick asks the taint source discovery to check discovery now; it never blocks.
func (s *clusterSources) kick() {
	select {
	case s.discover <- struct{}{}:
	default:
	}
}

// clusterTaints reads every enabled taint source for the map's entry clusters.
func (s *clusterSources) clusterTaints(tm *v1beta1.TrafficMap) ([]model.ClusterTaints, error) {
	var out []model.ClusterTaints
	ics, wcs := s.informer(model.KindInferenceCluster), s.informer(model.KindWorkloadCluster)
	for _, e := range tm.Spec.Entries {
		if ics != nil {
			obj, ok, err := ics.GetIndexer().GetByKey(e.Cluster)
			if err != nil {
				return nil, fmt.Errorf("read cached inferencecluster %s: %w", e.Cluster, err)
			}
			if u, isU := obj.(*unstructured.Unstructured); ok && isU {
				out = append(out, model.InferenceClusterTaints(u))
			}
		}
		if wcs != nil {
			obj, ok, err := wcs.GetIndexer().GetByKey(e.Cluster)
			if err != nil {
				return nil, fmt.Errorf("read cached workloadcluster %s: %w", e.Cluster, err)
			}
			if m, isM := obj.(*metav1.PartialObjectMetadata); ok && isM {
				out = append(out, model.WorkloadClusterTaints(m.Name, m.Annotations))
			}
		}
	}
	return out, nil
}

// staleClusters reports whether the taints a decision about tm used (used, from the
// caches: every entry cluster's object of every source, a missing object meaning no
// taints) are still the ones on the API server, read after this call began. It returns ""
// when they are, else the first difference, naming the source and the cluster. Only the
// taints count: another field of a cluster object that changed holds no map. A difference
// on a source no informer watches kicks the discovery.
func (c *caches) staleClusters(ctx context.Context, tm *v1beta1.TrafficMap, used []model.ClusterTaints) (string, error) {
	return c.sources.stale(ctx, tm, used)
}

// stale is caches.staleClusters.
func (s *clusterSources) stale(ctx context.Context, tm *v1beta1.TrafficMap, used []model.ClusterTaints) (string, error) {
	live, err := s.live.read(ctx)
	if err != nil {
		return "", err
	}
	for _, e := range tm.Spec.Entries {
		for _, src := range taintSources {
			was := taintsKey(findTaints(used, src.kind, e.Cluster))
			ct, ok := live[src.kind][e.Cluster]
			now := taintsKey(ct, ok)
			if was == now {
				continue
			}
			if s.informer(src.kind) == nil {
				s.kick()
			}
			return fmt.Sprintf("%s %s: the caches say %s, the API server says %s", src.kind, e.Cluster, was, now), nil
		}
	}
	return "", nil
}

func findTaints(list []model.ClusterTaints, kind, cluster string) (model.ClusterTaints, bool) {
	for _, ct := range list {
		if ct.Kind == kind && ct.Cluster == cluster {
			return ct, true
		}
	}
	return model.ClusterTaints{}, false
}

// taintsKey is what a source says of a cluster, for comparison: its taints, or its parse
// error; no object says what an object without taints says.
func taintsKey(ct model.ClusterTaints, found bool) string {
	switch {
	case !found:
		return "taints " + model.DescribeTaints(nil)
	case ct.Err != nil:
		return "malformed taints (" + ct.Err.Error() + ")"
	}
	return "taints " + model.DescribeTaints(ct.Taints)
}

// liveTaints reads every taint source from the API server, past the caches: one list per
// source per round, without a resourceVersion (a consistent read). A round is shared by
// every caller that asked before it started, so each caller's read starts after its call
// and many maps turning True at once cost a few lists, not a read per map. The mutex
// guards next and running; a round's fields are written once, before done is closed.
type liveTaints struct {
	dyn     dynamic.Interface
	mu      sync.Mutex
	next    *liveRound // the round callers join; nil when none waits to start
	running bool       // a goroutine runs rounds
}

type liveRound struct {
	done chan struct{}
	// taints holds, per source kind, what each existing object says, by name; a source
	// whose API is not served has none.
	taints map[string]map[string]model.ClusterTaints
	err    error
}

// read returns the taint sources as read by a round that started after this call.
func (l *liveTaints) read(ctx context.Context) (map[string]map[string]model.ClusterTaints, error) {
	l.mu.Lock()
	r := l.next
	if r == nil {
		r = &liveRound{done: make(chan struct{})}
		l.next = r
		if !l.running {
			l.running = true
			go l.run()
		}
	}
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.taints, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run runs the waiting rounds one after another and ends when none waits.
func (l *liveTaints) run() {
	for {
		l.mu.Lock()
		r := l.next
		l.next = nil
		if r == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		r.taints, r.err = l.list()
		close(r.done)
	}
}

func (l *liveTaints) list() (map[string]map[string]model.ClusterTaints, error) {
	ctx, cancel := context.WithTimeout(context.Background(), liveReadTimeout)
	defer cancel()
	out := make(map[string]map[string]model.ClusterTaints, len(taintSources))
	for _, src := range taintSources {
		byName := map[string]model.ClusterTaints{}
		out[src.kind] = byName
		list, err := l.dyn.Resource(src.gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue // the API is not served: no objects
		}
		if err != nil {
			return nil, fmt.Errorf("read %s from the api server: %w", src.resource, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			byName[u.GetName()] = src.read(u)
		}
	}
	return out, nil
}

// taintDiscovery starts the informer of each taint source whose API is served and stops
// the one of a source no longer served. stops is owned by startTaintSources until it
// starts run, then by run alone.
type taintDiscovery struct {
	p     *Publisher
	stops map[string]context.CancelFunc // by kind: the running informers
}

// start builds and runs the informer of src until ctx ends or it is stopped.
func (d *taintDiscovery) start(ctx context.Context, src taintSource) cache.SharedIndexInformer {
	ctx, stop := context.WithCancel(ctx)
	inf := d.p.newTaintInformer(src)
	d.stops[src.kind] = stop
	go inf.RunWithContext(ctx)
	return inf
}

// run checks discovery every period (sooner, with backoff, after a failed check) and
// when kicked, until ctx ends.
func (d *taintDiscovery) run(ctx context.Context, period time.Duration) {
	if period <= 0 {
		period = DefaultTaintSourcePeriod
	}
	timer := time.NewTimer(period)
	defer timer.Stop()
	var last time.Time
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.p.caches.sources.discover:
			if wait := minDiscoveryGap - time.Since(last); wait > 0 {
				timer.Reset(wait)
				continue
			}
		case <-timer.C:
		}
		last = time.Now()
		next := period
		if err := d.sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			next = min(period, time.Second<<min(failures, 8))
			d.p.log.Info("taint source discovery failed; retrying", zap.Duration("in", next), zap.Error(err))
		} else {
			failures = 0
		}
		timer.Reset(next)
	}
}

// sync starts the informers of the sources now served and stops those of the sources no
// longer served; either way the maps of the source's clusters are reconciled.
func (d *taintDiscovery) sync(ctx context.Context) error {
	var errs []error
	for _, src := range taintSources {
		served, err := d.p.served(src.gvr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stop, running := d.stops[src.kind]
		switch {
		case served && !running:
			inf := d.start(ctx, src)
			wait, cancel := context.WithTimeout(ctx, taintSyncTimeout)
			synced := cache.WaitForCacheSync(wait.Done(), inf.HasSynced)
			cancel()
			if !synced {
				d.stops[src.kind]()
				delete(d.stops, src.kind)
				errs = append(errs, fmt.Errorf("%s is served but its cache did not sync", src.resource))
				continue
			}
			d.p.caches.sources.set(src.kind, inf)
			d.p.log.Info("taint source served since the start: watching it", zap.String("resource", src.resource),
				zap.Int("objects", d.p.enqueueClusters(inf)))
		case !served && running:
			inf := d.p.caches.sources.informer(src.kind)
			d.p.caches.sources.set(src.kind, nil)
			stop()
			delete(d.stops, src.kind)
			d.p.log.Info("taint source no longer served: its taints no longer apply", zap.String("resource", src.resource),
				zap.Int("objects", d.p.enqueueClusters(inf)))
		}
	}
	return errors.Join(errs...)
}

// enqueueClusters enqueues the maps of every cluster inf holds an object for, and returns
// how many objects it holds.
func (p *Publisher) enqueueClusters(inf cache.SharedIndexInformer) int {
	if inf == nil {
		return 0
	}
	keys := inf.GetStore().ListKeys()
	for _, k := range keys {
		p.enqueueCluster(normalPriority, k)
	}
	return len(keys)
}
