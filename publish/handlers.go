package publish

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// priority orders the work queue: every key waiting at normalPriority is reconciled before
// any key waiting at bulkPriority, and a key queued at both waits at the higher one.
type priority int

const (
	// normalPriority is for a change: a drain, a route the gateway accepted, an ACK.
	normalPriority priority = 0
	// bulkPriority is for work over the whole fleet: the informers' initial lists, resyncs,
	// and every map when this replica starts leading. A fleet's cold start therefore lets a
	// map whose route the gateway has just accepted publish its status without waiting for
	// the rest of the fleet's routes to be written.
	bulkPriority priority = -100
)

// add queues key at pr.
func (p *Publisher) add(pr priority, key cache.ObjectName) {
	n := int(pr)
	p.queue.AddWithOpts(priorityqueue.AddOpts{Priority: &n}, key)
}

// requeue queues key for a sink whose consumers said something about the map (an xDS
// client's ACK, a replica's report): at normalPriority once the map has been reconciled
// since this replica started, at bulkPriority before (such news cannot complete a map that
// is not published yet, and at a cold start every map hears from every new client at once:
// at normal priority that would queue the whole fleet ahead of the maps whose route the
// gateway has just accepted).
func (p *Publisher) requeue(key cache.ObjectName) {
	pr := bulkPriority
	if _, ok := p.reconciled.Load(key); ok {
		pr = normalPriority
	}
	p.add(pr, key)
}

// passed records that key was reconciled (requeue), or forgets it when the map is gone.
func (p *Publisher) passed(key cache.ObjectName) {
	if tm, err := p.caches.trafficMap(key.Namespace, key.Name); err == nil && tm != nil {
		p.reconciled.Store(key, struct{}{})
		return
	}
	p.reconciled.Delete(key)
}

// addPriority is the priority of an informer's add event.
func addPriority(initial bool) priority {
	if initial {
		return bulkPriority
	}
	return normalPriority
}

// updatePriority is the priority of an informer's update event: bulk for a resync (the same
// resourceVersion), normal for a change.
func updatePriority(old, obj any) priority {
	om, err1 := meta.Accessor(old)
	nm, err2 := meta.Accessor(obj)
	if err1 == nil && err2 == nil && om.GetResourceVersion() == nm.GetResourceVersion() {
		return bulkPriority
	}
	return normalPriority
}

// handle registers fn for every add, update and delete on inf. Handlers only turn objects
// into TrafficMap keys and enqueue them, at bulkPriority for what the informer lists when it
// starts and for resyncs (an update with an unchanged resourceVersion), so a change made
// while the publisher works through a fleet is not queued behind the fleet.
func (p *Publisher) handle(inf cache.SharedIndexInformer, fn func(pr priority, old, obj any)) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { fn(addPriority(initial), nil, obj) },
		UpdateFunc: func(old, obj any) { fn(updatePriority(old, obj), old, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			fn(normalPriority, nil, obj)
		},
	})
}

// registerHandlers registers the event handlers on every informer New built.
func (p *Publisher) registerHandlers() {
	for _, inf := range p.caches.maps {
		p.handle(inf, p.onTrafficMap)
	}
	for _, inf := range p.caches.isvcs {
		p.handle(inf, p.onInferenceService)
		p.handleTolerationEvents(inf)
	}
	for _, inf := range p.caches.routes {
		p.handle(inf, p.onRoute)
	}
	for _, inf := range p.caches.services {
		p.handle(inf, p.onOwnedObject)
	}
	for _, inf := range p.caches.records {
		p.handle(inf, p.onOwnedObject)
	}
}

// enqueue queues the map and tells the sinks that rebuild asynchronously that its plan may
// have changed.
func (p *Publisher) enqueue(pr priority, namespace, name string) {
	p.add(pr, cache.NewObjectName(namespace, name))
	for _, s := range p.sinks {
		if n, ok := s.(model.Notified); ok {
			n.Changed(namespace, name)
		}
	}
}

// enqueueReconcile queues the map alone, for a change that cannot alter its plan (only
// what a sink's consumers said about it).
func (p *Publisher) enqueueReconcile(pr priority, namespace, name string) {
	p.add(pr, cache.NewObjectName(namespace, name))
}

// enqueueAll queues every cached TrafficMap at bulkPriority.
func (p *Publisher) enqueueAll() {
	for _, key := range p.caches.keys() {
		ns, name, _ := strings.Cut(key, "/")
		p.enqueue(bulkPriority, ns, name)
	}
}

// onTrafficMap enqueues the map unless the change is only to conditions or publisher-owned
// status, which cannot change what is published (the periodic resync repairs a Published
// condition someone else edited). Resyncs, with an unchanged resourceVersion, always pass.
//
// A map that appears, goes, starts terminating or names another service also requeues the
// maps contending for its names (hand-over).
func (p *Publisher) onTrafficMap(pr priority, old, obj any) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return
	}
	if prev, ok := old.(*v1beta1.TrafficMap); ok && prev.ResourceVersion != tm.ResourceVersion &&
		prev.Generation == tm.Generation &&
		prev.Status.SourceUID == tm.Status.SourceUID &&
		maps.Equal(prev.Labels, tm.Labels) && maps.Equal(prev.Annotations, tm.Annotations) &&
		prev.DeletionTimestamp.Equal(tm.DeletionTimestamp) {
		if pj, tj := model.JournaledNames(prev, ""), model.JournaledNames(tm, ""); !slices.Equal(pj, tj) {
			// The claim journal moved: the map's newly granted names may be served now (the
			// xDS sink plans from the cache) and a name it dropped may go to a contender.
			p.enqueue(pr, tm.Namespace, tm.Name)
			p.enqueueContenders(pr, append(pj, tj...)...)
		}
		return
	}
	p.enqueue(pr, tm.Namespace, tm.Name)
	prev, _ := old.(*v1beta1.TrafficMap)
	if prev == nil || prev.Spec.Service != tm.Spec.Service || !prev.DeletionTimestamp.Equal(tm.DeletionTimestamp) {
		var names []string
		for _, m := range []*v1beta1.TrafficMap{prev, tm} {
			if m != nil {
				isvc, _ := p.caches.inferenceService(m.Namespace, m.Spec.Service)
				cl := p.caches.mapClaim(m, isvc)
				names = append(append(names, cl.Names...), cl.Journaled...)
			}
		}
		p.enqueueContenders(pr, names...)
	}
}

// onInferenceService enqueues every TrafficMap whose spec.service names the object and,
// when its ome.io/global-host appears, goes or changes, the maps contending for the old and
// the new hostname (hand-over).
func (p *Publisher) onInferenceService(pr priority, old, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	p.enqueueIndexed(pr, indexByService, m.GetNamespace(), m.GetNamespace()+"/"+m.GetName())
	host := strings.TrimSpace(m.GetAnnotations()[v1beta1.AnnotationGlobalHost])
	prevHost := ""
	if o, err := meta.Accessor(old); old != nil && err == nil {
		prevHost = strings.TrimSpace(o.GetAnnotations()[v1beta1.AnnotationGlobalHost])
		if prevHost == host {
			return
		}
	}
	var names []string
	for _, h := range []string{prevHost, host} {
		if h != "" {
			names = append(names, h)
		}
	}
	// The maps of this service fall back to the template's name without the annotation.
	for _, tm := range p.caches.mapsIndexed(indexByService, m.GetNamespace(), m.GetNamespace()+"/"+m.GetName()) {
		names = append(names, p.caches.mapClaim(tm, nil).Names...)
	}
	p.enqueueContenders(pr, names...)
}

// enqueueContenders enqueues every map that may claim a name overlapping one of names.
func (p *Publisher) enqueueContenders(pr priority, names ...string) {
	for _, key := range p.caches.owners.contenders(names...) {
		p.enqueue(pr, key.Namespace, key.Name)
	}
}

// onRoute maps an owned route to its TrafficMap, and a foreign route to the TrafficMaps
// whose route name it occupies. The xDS snapshot reads an owned route's recorded drains,
// taints and tolerations (annotations) only, so a change to its spec or status (the
// gateway's verdict) reconciles the map without rebuilding the snapshot.
func (p *Publisher) onRoute(pr priority, old, obj any) {
	route, ok := obj.(*gwapiv1.HTTPRoute)
	if !ok {
		return
	}
	if !httproute.Managed(route) { // a foreign route's hostnames may hold a map's name
		var names []string
		prev, _ := old.(*gwapiv1.HTTPRoute)
		if prev == nil || !slices.Equal(prev.Spec.Hostnames, route.Spec.Hostnames) ||
			!equality.Semantic.DeepEqual(prev.Spec.ParentRefs, route.Spec.ParentRefs) || !equality.Semantic.DeepEqual(prev.Spec.Rules, route.Spec.Rules) {
			for _, r := range []*gwapiv1.HTTPRoute{prev, route} {
				if r != nil {
					for _, h := range r.Spec.Hostnames {
						names = append(names, string(h))
					}
				}
			}
			p.enqueueContenders(pr, names...)
		}
	}
	if src, ok := httproute.SourceOf(route.Labels); ok {
		if prev, ok := old.(*gwapiv1.HTTPRoute); ok && maps.Equal(prev.Annotations, route.Annotations) && maps.Equal(prev.Labels, route.Labels) {
			p.enqueueReconcile(pr, src.Namespace, src.Name)
		} else {
			p.enqueue(pr, src.Namespace, src.Name)
		}
	}
	p.enqueueIndexed(pr, indexByRouteName, route.Namespace, route.Namespace+"/"+route.Name)
}

// onOwnedObject maps an owned backend Service to its TrafficMap. The xDS sink does not
// read Services, so its snapshot is not rebuilt.
func (p *Publisher) onOwnedObject(pr priority, _, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if src, ok := httproute.SourceOf(m.GetLabels()); ok {
		p.enqueueReconcile(pr, src.Namespace, src.Name)
	}
}

func (p *Publisher) enqueueIndexed(pr priority, index, namespace, value string) {
	for _, tm := range p.caches.mapsIndexed(index, namespace, value) {
		p.enqueue(pr, tm.Namespace, tm.Name)
	}
}
