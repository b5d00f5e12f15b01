package publish

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
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

// router turns the informers' events into TrafficMap keys and enqueues them; it reads the
// caches and writes nothing.
type router struct {
	caches  *caches
	enqueue func(pr priority, namespace, name string)
}

// handle registers fn for every add, update and delete on inf. Handlers only turn objects
// into TrafficMap keys and enqueue them, at bulkPriority for what the informer lists when it
// starts and for resyncs (an update with an unchanged resourceVersion), so a change made
// while the publisher works through a fleet is not queued behind the fleet.
func (p *router) handle(inf cache.SharedIndexInformer, fn func(pr priority, old, obj any)) {
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

// register registers the event handlers on every informer New built; tolerations registers
// those of the InferenceServices' tolerations.
func (p *router) register(tolerations func(cache.SharedIndexInformer)) {
	for _, inf := range p.caches.maps {
		p.handle(inf, p.onTrafficMap)
	}
	for _, inf := range p.caches.isvcs {
		p.handle(inf, p.onInferenceService)
		tolerations(inf)
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
	if p.caches.claimRecords != nil {
		p.handle(p.caches.claimRecords.inf, p.onClaimRecord)
	}
}

// enqueue queues the map. The worker that takes it runs the pipeline (the leader) or its
// first floors, which hand the plan to the sinks that serve on every replica (see serve).
func (p *Publisher) enqueue(pr priority, namespace, name string) {
	p.work.add(pr, cache.NewObjectName(namespace, name))
}

// enqueueAll queues every cached TrafficMap at bulkPriority.
func (p *router) enqueueAll() {
	for _, key := range p.caches.keys() {
		ns, name, _ := strings.Cut(key, "/")
		p.enqueue(bulkPriority, ns, name)
	}
}

// onTrafficMap enqueues the map unless the change is only to conditions or publisher-owned
// status, which cannot change what is published (the periodic resync repairs a Published
// condition someone else edited). Resyncs, with an unchanged resourceVersion, always pass.
// The cache holds no labels or annotations of a map (slimTrafficMap: nothing reads them),
// so a change to them alone is not seen either.
//
// A map that appears, goes, starts terminating or names another service also requeues the
// maps contending for its names (hand-over).
func (p *router) onTrafficMap(pr priority, old, obj any) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return
	}
	if prev, ok := old.(*v1beta1.TrafficMap); ok && prev.ResourceVersion != tm.ResourceVersion &&
		prev.Generation == tm.Generation &&
		prev.Status.SourceUID == tm.Status.SourceUID &&
		prev.DeletionTimestamp.Equal(tm.DeletionTimestamp) {
		if pj, tj := model.JournaledNames(prev, ""), model.JournaledNames(tm, ""); !slices.Equal(pj, tj) || journalName(prev) != journalName(tm) {
			// The claim journal moved: the map's newly granted names may be served now (every
			// replica plans from the cache) and a name it dropped may go to a contender; or
			// another publisher holds the map now (model.HolderOf).
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
func (p *router) onInferenceService(pr priority, old, obj any) {
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
func (p *router) enqueueContenders(pr priority, names ...string) {
	for _, key := range p.caches.owners.contenders(names...) {
		p.enqueue(pr, key.Namespace, key.Name)
	}
}

// onRoute maps an owned route to its TrafficMap, and a foreign route to the TrafficMaps
// whose route name it occupies.
func (p *router) onRoute(pr priority, old, obj any) {
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
		p.enqueue(pr, src.Namespace, src.Name)
	}
	p.enqueueIndexed(pr, indexByRouteName, route.Namespace, route.Namespace+"/"+route.Name)
}

// onOwnedObject maps an owned backend Service (or record ConfigMap) to its TrafficMap.
func (p *router) onOwnedObject(pr priority, _, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if src, ok := httproute.SourceOf(m.GetLabels()); ok {
		p.enqueue(pr, src.Namespace, src.Name)
	}
}

func (p *router) enqueueIndexed(pr priority, index, namespace, value string) {
	for _, tm := range p.caches.mapsIndexed(index, namespace, value) {
		p.enqueue(pr, tm.Namespace, tm.Name)
	}
}

// journalName is the publisherName of tm's claim journal, "" for none.
func journalName(tm *v1beta1.TrafficMap) string {
	if tm.Status.Publisher == nil {
		return ""
	}
	return tm.Status.Publisher.PublisherName
}
