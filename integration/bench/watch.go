package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	omeinformers "github.com/trafficmap/publisher/api/client/informers/externalversions"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// watcher is one informer whose events fire registered waiters: a waiter gets the time of
// the first event after which its object satisfies its predicate.
type watcher struct {
	inf cache.SharedIndexInformer

	mu      sync.Mutex
	waiters map[string][]objWaiter
	onEvent func(obj any) // optional, called for every add and update
}

type objWaiter struct {
	want func(obj any) bool
	ch   chan time.Time
}

func newWatcher(inf cache.SharedIndexInformer) *watcher {
	w := &watcher{inf: inf, waiters: map[string][]objWaiter{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	})
	return w
}

func (w *watcher) observe(obj any) {
	now := time.Now()
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	onEvent := w.onEvent
	ws := w.waiters[key]
	kept := ws[:0]
	for _, x := range ws {
		if x.want(obj) {
			x.ch <- now
			continue
		}
		kept = append(kept, x)
	}
	if len(kept) == 0 {
		delete(w.waiters, key)
	} else {
		w.waiters[key] = kept
	}
	w.mu.Unlock()
	if onEvent != nil {
		onEvent(obj)
	}
}

// expect returns a channel that receives the time of the first event on namespace/name
// after which want holds. Register it before making the change.
func (w *watcher) expect(name string, want func(obj any) bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.waiters[namespace+"/"+name] = append(w.waiters[namespace+"/"+name], objWaiter{want: want, ch: ch})
	w.mu.Unlock()
	return ch
}

func (w *watcher) setOnEvent(fn func(obj any)) {
	w.mu.Lock()
	w.onEvent = fn
	w.mu.Unlock()
}

// get returns the cached object namespace/name, or nil.
func (w *watcher) get(name string) any {
	obj, ok, err := w.inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	return obj
}

// watchers are the benchmark's views of the bench namespace: what an operator's watch sees.
type watchers struct {
	maps, routes, probes *watcher
}

func startWatchers(ctx context.Context, c clients) (*watchers, error) {
	mapsInf := omeinformers.NewSharedInformerFactoryWithOptions(c.tm, 0, omeinformers.WithNamespace(namespace)).Ome().V1beta1().TrafficMaps().Informer()
	routesInf := gwinformers.NewSharedInformerFactoryWithOptions(c.gw, 0, gwinformers.WithNamespace(namespace)).Gateway().V1().HTTPRoutes().Informer()
	probesInf := kubeinformers.NewSharedInformerFactoryWithOptions(c.kube, 0, kubeinformers.WithNamespace(namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + floorProbe })).
		Core().V1().ConfigMaps().Informer()
	w := &watchers{maps: newWatcher(mapsInf), routes: newWatcher(routesInf), probes: newWatcher(probesInf)}
	for _, inf := range []cache.SharedIndexInformer{mapsInf, routesInf, probesInf} {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), mapsInf.HasSynced, routesInf.HasSynced, probesInf.HasSynced) {
		return nil, fmt.Errorf("benchmark watch caches did not sync: %w", ctx.Err())
	}
	return w, nil
}

// probeIs is a predicate: the floor probe holds value.
func probeIs(value string) func(obj any) bool {
	return func(obj any) bool {
		cm, ok := obj.(*corev1.ConfigMap)
		return ok && cm.Data["v"] == value
	}
}

// routeIs is a predicate: map i's HTTPRoute has the canonical weights want.
func routeIs(i int, want string) func(obj any) bool {
	return func(obj any) bool {
		r, ok := obj.(*gwapiv1.HTTPRoute)
		return ok && routeWeights(r, i) == want
	}
}

// mapPublished is a predicate: the map is Published True for the intent.
func mapPublished(in intent) func(obj any) bool {
	return func(obj any) bool {
		tm, ok := obj.(*v1beta1.TrafficMap)
		return ok && publishedFor(tm, in)
	}
}

// wait receives from ch or fails after timeout.
func wait(ch <-chan time.Time, timeout time.Duration, what string) (time.Time, error) {
	select {
	case t := <-ch:
		return t, nil
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%s: not seen within %s", what, timeout)
	}
}

func sortStrings(s []string) { slices.Sort(s) }
