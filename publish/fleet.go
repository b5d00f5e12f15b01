package publish

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// startTaintSources enables each taint source whose API is served, starts its informer and
// returns the informers' sync functions; then it starts the discovery (taintsources.go)
// that enables a source served later and disables one no longer served. The publisher
// works without either source.
func (p *Publisher) startTaintSources(ctx context.Context) ([]cache.InformerSynced, error) {
	d := &taintDiscovery{p: p, stops: map[string]context.CancelFunc{}}
	var synced []cache.InformerSynced
	on := make([]zap.Field, 0, len(taintSources))
	for _, src := range taintSources {
		served, err := p.served(src.gvr)
		if err != nil {
			return nil, err
		}
		if served {
			inf := d.start(ctx, src)
			p.caches.sources.set(src.kind, inf) // no worker runs before it synced
			synced = append(synced, inf.HasSynced)
		}
		on = append(on, zap.Bool(src.kind, served))
	}
	p.log.Info("taint sources", on...)
	go d.run(ctx, p.cfg.TaintSourcePeriod)
	return synced, nil
}

// newTaintInformer builds the informer of src, with its handlers (handleCluster): the
// InferenceClusters' with their spec, the WorkloadClusters' with their metadata only.
func (p *Publisher) newTaintInformer(src taintSource) cache.SharedIndexInformer {
	var inf cache.SharedIndexInformer
	if src.kind == model.KindInferenceCluster {
		inf = dynamicinformer.NewFilteredDynamicInformer(p.clients.dyn, src.gvr, corev1.NamespaceAll,
			p.cfg.ResyncPeriod, cache.Indexers{}, nil).Informer()
		p.handleCluster(inf, func(obj any) (model.ClusterTaints, string, bool) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return model.ClusterTaints{}, "", false
			}
			raw, _ := model.RawInferenceClusterTaints(u)
			return model.InferenceClusterTaints(u), raw, true
		})
	} else {
		inf = metadatainformer.NewFilteredMetadataInformer(p.clients.meta, src.gvr, corev1.NamespaceAll,
			p.cfg.ResyncPeriod, cache.Indexers{}, nil).Informer()
		p.handleCluster(inf, func(obj any) (model.ClusterTaints, string, bool) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return model.ClusterTaints{}, "", false
			}
			raw, ok := m.GetAnnotations()[weights.TaintsAnnotation]
			if !ok {
				raw = "\x00absent"
			}
			return model.WorkloadClusterTaints(m.GetName(), m.GetAnnotations()), raw, true
		})
	}
	_ = inf.SetTransform(dropManagedFields)                                 // cannot fail before the informer runs
	_ = inf.SetWatchErrorHandlerWithContext(p.health.handler(src.resource)) // cannot fail before the informer runs
	return inf
}

// served reports whether the API server serves gvr.
func (p *Publisher) served(gvr schema.GroupVersionResource) (bool, error) {
	list, err := p.clients.kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// handleCluster registers the handlers of a taint source. They enqueue every TrafficMap with
// an entry for the cluster when its taints changed (read reports the parsed taints and the
// raw value they came from), and record a Warning Event on an object whose taints turned
// malformed: the recorder is asynchronous, so the handler still only enqueues and returns.
func (p *Publisher) handleCluster(inf cache.SharedIndexInformer, read func(obj any) (model.ClusterTaints, string, bool)) {
	changed := func(pr priority, old, obj any) {
		ct, raw, ok := read(obj)
		if !ok {
			return
		}
		rawChanged := true
		if old != nil {
			if _, oldRaw, ok := read(old); ok && oldRaw == raw {
				rawChanged = false
				om, err1 := meta.Accessor(old)
				nm, err2 := meta.Accessor(obj)
				if err1 == nil && err2 == nil && om.GetResourceVersion() != nm.GetResourceVersion() {
					return // another field changed; resyncs (same resourceVersion) pass
				}
			}
		}
		if ct.Err != nil && rawChanged {
			if ref := clusterRef(obj, ct.Kind); ref != nil {
				p.recorder.Event(ref, corev1.EventTypeWarning, string(model.ReasonInvalidTaints), ct.Err.Error()+"; the publisher keeps the last valid taints")
			}
		}
		p.enqueueCluster(pr, ct.Cluster)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { changed(addPriority(initial), nil, obj) },
		UpdateFunc: func(old, obj any) { changed(updatePriority(old, obj), old, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				p.enqueueCluster(normalPriority, m.GetName())
			}
		},
	})
}

func clusterRef(obj any, kind string) *corev1.ObjectReference {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	gv := model.InferenceClustersResource.GroupVersion()
	if kind == model.KindWorkloadCluster {
		gv = model.WorkloadClustersResource.GroupVersion()
	}
	return &corev1.ObjectReference{APIVersion: gv.String(), Kind: kind, Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
}

// enqueueCluster enqueues every TrafficMap, in every watched namespace, with an entry for
// cluster.
func (p *Publisher) enqueueCluster(pr priority, cluster string) {
	for _, tm := range mapsWithCluster(p.caches.maps, cluster) {
		p.enqueue(pr, tm.Namespace, tm.Name)
	}
}

// handleTolerationEvents records a Warning Event on an InferenceService whose tolerations
// annotation turned malformed.
func (p *Publisher) handleTolerationEvents(inf cache.SharedIndexInformer) {
	check := func(old, obj any) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		v, ok := m.GetAnnotations()[weights.TolerationsAnnotation]
		if !ok {
			return
		}
		if old != nil {
			if om, err := meta.Accessor(old); err == nil && om.GetAnnotations()[weights.TolerationsAnnotation] == v {
				return
			}
		}
		if _, err := weights.ParseTolerations(v); err != nil {
			ref := &corev1.ObjectReference{APIVersion: v1beta1.InferenceServicesResource.GroupVersion().String(), Kind: "InferenceService",
				Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
			p.recorder.Event(ref, corev1.EventTypeWarning, string(model.ReasonInvalidTolerations),
				fmt.Sprintf("annotation %s: %s; the publisher keeps the last valid tolerations", weights.TolerationsAnnotation, err))
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { check(nil, obj) },
		UpdateFunc: check,
	})
}
