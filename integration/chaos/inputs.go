package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// ruleAnnotations are the InferenceService annotations the weight rules read (oracle.go):
// a change of any of them is a change of the maps' inputs.
var ruleAnnotations = []string{annDrain, annTolerations, annRamp, v1beta1.AnnotationGlobalHost}

// inputLog records when the checker saw the inputs of maps change, so that a
// Published=False window can be measured from the moment the inputs stopped moving
// (lastChange) rather than from its start: a map whose inputs change faster than they can
// be published stays False by design, which says nothing about what a fault costs. It keeps
// the changes of a map's own spec (its generation), of an InferenceService's
// ruleAnnotations (and its creation or deletion), and of a WorkloadCluster's taints. One
// lock guards it; it never calls out while holding it.
type inputLog struct {
	mu     sync.Mutex
	spec   map[string][]time.Time // map key -> when its generation changed
	isvc   map[string][]time.Time // "namespace/name" -> when its ruleAnnotations changed
	taints map[string][]time.Time // WorkloadCluster name -> when its taints annotation changed
}

func newInputLog() *inputLog {
	return &inputLog{spec: map[string][]time.Time{}, isvc: map[string][]time.Time{}, taints: map[string][]time.Time{}}
}

// source names the inputs of one map besides its own spec: its InferenceService
// ("namespace/name") and the clusters of its entries (whose taints apply to it).
type source struct {
	ISVC     string
	Clusters []string
}

func sourceOf(tm *v1beta1.TrafficMap) source {
	s := source{ISVC: tm.Namespace + "/" + tm.Spec.Service}
	for _, e := range tm.Spec.Entries {
		s.Clusters = append(s.Clusters, e.Cluster)
	}
	return s
}

func (l *inputLog) add(m map[string][]time.Time, key string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m[key] = append(m[key], at)
}

// SpecChanged records a change of the map key's spec at at.
func (l *inputLog) SpecChanged(key string, at time.Time) { l.add(l.spec, key, at) }

// ISVCChanged records a change of the InferenceService key ("namespace/name") at at.
func (l *inputLog) ISVCChanged(key string, at time.Time) { l.add(l.isvc, key, at) }

// TaintsChanged records a change of the WorkloadCluster's taints at at.
func (l *inputLog) TaintsChanged(cluster string, at time.Time) { l.add(l.taints, cluster, at) }

// LastChange is the latest change of the map key's inputs (its spec, src's
// InferenceService, the taints of src's clusters) after from and not after to; from when
// none changed meanwhile.
func (l *inputLog) LastChange(key string, src source, from, to time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := from
	latest := func(times []time.Time) {
		for _, t := range times {
			if t.After(last) && !t.After(to) {
				last = t
			}
		}
	}
	latest(l.spec[key])
	latest(l.isvc[src.ISVC])
	for _, c := range src.Clusters {
		latest(l.taints[c])
	}
	return last
}

// Watch records, until ctx ends, the changes of the InferenceServices of namespaces and of
// every WorkloadCluster's taints, as the API server's watch shows them.
func (l *inputLog) Watch(ctx context.Context, dyn dynamic.Interface, namespaces []string) error {
	informers := []cache.SharedIndexInformer{}
	for _, ns := range namespaces {
		inf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil).ForResource(isvcResource).Informer()
		if _, err := inf.AddEventHandler(changeHandler(ruleAnnotations, l.ISVCChanged)); err != nil {
			return fmt.Errorf("watch inferenceservices in %s: %w", ns, err)
		}
		informers = append(informers, inf)
	}
	inf := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(wcResource).Informer()
	if _, err := inf.AddEventHandler(changeHandler([]string{annTaints}, l.TaintsChanged)); err != nil {
		return fmt.Errorf("watch workloadclusters: %w", err)
	}
	informers = append(informers, inf)
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("checker input caches: %w", ctx.Err())
		}
	}
	return nil
}

// changeHandler calls changed with the object's key ("namespace/name", or the name of a
// cluster-scoped object) and the time whenever an object is created or deleted after the
// initial list, or one of the annotations keys changes.
func changeHandler(keys []string, changed func(key string, at time.Time)) cache.ResourceEventHandler {
	record := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			changed(key, time.Now())
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				record(obj)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(*unstructured.Unstructured)
			n, okNew := newObj.(*unstructured.Unstructured)
			if !okOld || !okNew || !sameAnnotations(o.GetAnnotations(), n.GetAnnotations(), keys) {
				record(newObj)
			}
		},
		DeleteFunc: record,
	}
}

// sameAnnotations: a and b hold the same value, or both none, for every key.
func sameAnnotations(a, b map[string]string, keys []string) bool {
	for _, k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			return false
		}
	}
	return true
}
