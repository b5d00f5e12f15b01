package publish

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
)

// handle registers fn for every add, update and delete on inf. Handlers only turn objects
// into TrafficMap keys and enqueue them.
func (p *Publisher) handle(inf cache.SharedIndexInformer, fn func(old, obj any)) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fn(nil, obj) },
		UpdateFunc: fn,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			fn(nil, obj)
		},
	})
}

// enqueue queues the map and, with the xDS sink on, a rebuild of the xDS snapshot, which
// carries every map.
func (p *Publisher) enqueue(namespace, name string) {
	p.queue.Add(cache.NewObjectName(namespace, name))
	if p.xds != nil {
		p.xds.markDirty(namespace + "/" + name)
		p.xds.queue.Add(xdsSnapshotKey)
	}
}

// enqueueReconcile queues the map alone, for a change that cannot alter what the xDS sink
// serves.
func (p *Publisher) enqueueReconcile(namespace, name string) {
	p.queue.Add(cache.NewObjectName(namespace, name))
}

// onTrafficMap enqueues the map unless the change is only to conditions or publisher-owned
// status, which cannot change what is published (the periodic resync repairs a Published
// condition someone else edited). Resyncs, with an unchanged resourceVersion, always pass.
func (p *Publisher) onTrafficMap(old, obj any) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return
	}
	if prev, ok := old.(*v1beta1.TrafficMap); ok && prev.ResourceVersion != tm.ResourceVersion &&
		prev.Generation == tm.Generation &&
		prev.Status.SourceUID == tm.Status.SourceUID &&
		equalStrings(prev.Labels, tm.Labels) && equalStrings(prev.Annotations, tm.Annotations) &&
		prev.DeletionTimestamp.Equal(tm.DeletionTimestamp) {
		return
	}
	p.enqueue(tm.Namespace, tm.Name)
}

// onInferenceService enqueues every TrafficMap whose spec.service names the object.
func (p *Publisher) onInferenceService(_, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	p.enqueueIndexed(indexByService, m.GetNamespace(), m.GetNamespace()+"/"+m.GetName())
}

// onRoute maps an owned route to its TrafficMap, and a foreign route to the TrafficMaps
// whose route name it occupies. The xDS snapshot reads an owned route's recorded drains,
// taints and tolerations (annotations) only, so a change to its spec or status (the
// gateway's verdict) reconciles the map without rebuilding the snapshot.
func (p *Publisher) onRoute(old, obj any) {
	route, ok := obj.(*gwapiv1.HTTPRoute)
	if !ok {
		return
	}
	if src, ok := httproute.SourceOf(route.Labels); ok {
		if prev, ok := old.(*gwapiv1.HTTPRoute); ok && equalStrings(prev.Annotations, route.Annotations) && equalStrings(prev.Labels, route.Labels) {
			p.enqueueReconcile(src.Namespace, src.Name)
		} else {
			p.enqueue(src.Namespace, src.Name)
		}
	}
	p.enqueueIndexed(indexByRouteName, route.Namespace, route.Namespace+"/"+route.Name)
}

// onOwnedObject maps an owned backend Service to its TrafficMap. The xDS sink does not
// read Services, so its snapshot is not rebuilt.
func (p *Publisher) onOwnedObject(_, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if src, ok := httproute.SourceOf(m.GetLabels()); ok {
		p.enqueueReconcile(src.Namespace, src.Name)
	}
}

func (p *Publisher) enqueueIndexed(index, namespace, value string) {
	inf := p.informerFor(p.maps, namespace)
	if inf == nil {
		return
	}
	objs, err := inf.GetIndexer().ByIndex(index, value)
	if err != nil {
		return
	}
	for _, o := range objs {
		if tm, ok := o.(*v1beta1.TrafficMap); ok {
			p.enqueue(tm.Namespace, tm.Name)
		}
	}
}

func indexTrafficMapByService(obj any) ([]string, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return nil, nil
	}
	return []string{tm.Namespace + "/" + tm.Spec.Service}, nil
}

func indexTrafficMapByRoute(obj any) ([]string, error) {
	tm, ok := obj.(*v1beta1.TrafficMap)
	if !ok {
		return nil, nil
	}
	return []string{tm.Namespace + "/" + httproute.RouteName(tm.Name)}, nil
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
