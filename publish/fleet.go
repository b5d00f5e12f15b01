package publish

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	"github.com/trafficmap/publisher/weights"
)

// The optional taint sources: cluster-scoped objects named after workload clusters.
var (
	// InferenceClustersResource is Modelplane's InferenceCluster; its spec.taints holds the
	// cluster's taints.
	InferenceClustersResource = schema.GroupVersionResource{Group: "modelplane.ai", Version: "v1alpha1", Resource: "inferenceclusters"}
	// WorkloadClustersResource is OME's WorkloadCluster; its schema has no taints, so they
	// are read from the weights.TaintsAnnotation annotation.
	WorkloadClustersResource = schema.GroupVersionResource{Group: "ome.io", Version: "v1beta1", Resource: "workloadclusters"}
)

// Kinds of the taint sources, as named in messages and Events.
const (
	KindInferenceCluster = "InferenceCluster"
	KindWorkloadCluster  = "WorkloadCluster"
)

var (
	// ErrNoTaintFallback means a cluster's taints are malformed and the route records no last
	// valid taints for it, so nothing is published: malformed taints are never "no taints".
	ErrNoTaintFallback = errors.New("no route records the last valid taints of this cluster, so nothing is published")
	// ErrNoTolerationFallback means the tolerations annotation is malformed and no route
	// records a last valid toleration list, so nothing is published.
	ErrNoTolerationFallback = errors.New("no route was published before, so there are no last valid tolerations to keep and nothing is published")
)

// ClusterTaints is what one taint source says about one workload cluster.
type ClusterTaints struct {
	// Kind is KindInferenceCluster or KindWorkloadCluster.
	Kind string
	// Cluster is the object's name, matched to TrafficMap entry clusters.
	Cluster string
	// Taints are the parsed taints; nil when Err is set.
	Taints []weights.Taint
	// Err is the parse error of a malformed taint list, naming the object and the field.
	Err error
}

// InferenceClusterTaints reads the taints of a Modelplane InferenceCluster from spec.taints,
// parsed strictly with weights.ParseTaints. An absent or null list means no taints.
func InferenceClusterTaints(u *unstructured.Unstructured) ClusterTaints {
	ct := ClusterTaints{Kind: KindInferenceCluster, Cluster: u.GetName()}
	raw, err := rawInferenceClusterTaints(u)
	if err == nil && raw != "" {
		ct.Taints, err = weights.ParseTaints(raw)
	}
	if err != nil {
		ct.Err = fmt.Errorf("inferencecluster %s spec.taints: %w", u.GetName(), err)
		ct.Taints = nil
	}
	return ct
}

func rawInferenceClusterTaints(u *unstructured.Unstructured) (string, error) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "taints")
	if err != nil {
		return "", err
	}
	if !found {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	return string(b), nil
}

// WorkloadClusterTaints reads the taints of an OME WorkloadCluster from its
// weights.TaintsAnnotation annotation. An absent annotation means no taints.
func WorkloadClusterTaints(name string, annotations map[string]string) ClusterTaints {
	ct := ClusterTaints{Kind: KindWorkloadCluster, Cluster: name}
	v, ok := annotations[weights.TaintsAnnotation]
	if !ok {
		return ct
	}
	taints, err := weights.ParseTaints(v)
	if err != nil {
		ct.Err = fmt.Errorf("workloadcluster %s annotation %s: %w", name, weights.TaintsAnnotation, err)
		return ct
	}
	ct.Taints = taints
	return ct
}

// fleetInputs resolves the taints and tolerations for Compute: the valid ones as given, the
// malformed ones replaced by the last valid state recorded (Inputs.fallback).
func fleetInputs(in Inputs, c *Computed) error {
	tols, err := parseTolerationAnnotation(in.SourceAnnotations)
	if err != nil {
		fb := in.fallback()
		recorded, ok := fb.Tolerations, fb.HasTolerations
		if !ok {
			return fmt.Errorf("annotation %s: %w; %w", weights.TolerationsAnnotation, err, ErrNoTolerationFallback)
		}
		tols, c.TolerationErr = recorded, fmt.Errorf("annotation %s: %w", weights.TolerationsAnnotation, err)
	}
	if tols == nil {
		tols = []weights.Toleration{}
	}
	c.Tolerations = tols

	c.Taints = map[string][]weights.Taint{}
	if in.TrafficMap != nil {
		for _, e := range in.TrafficMap.Spec.Entries {
			c.Taints[e.Cluster] = nil
		}
	}
	bad := map[string][]error{}
	for _, ct := range in.Clusters {
		if _, ok := c.Taints[ct.Cluster]; !ok {
			continue // no entry for this cluster
		}
		if ct.Err != nil {
			bad[ct.Cluster] = append(bad[ct.Cluster], ct.Err)
			continue
		}
		c.Taints[ct.Cluster] = append(c.Taints[ct.Cluster], ct.Taints...)
	}
	var recorded map[string][]weights.Taint
	if len(bad) > 0 {
		recorded = in.fallback().Taints
	}
	var errs []error
	for _, cluster := range slices.Sorted(maps.Keys(bad)) {
		kept, ok := recorded[cluster]
		cause := errors.Join(bad[cluster]...)
		if !ok {
			return fmt.Errorf("%s; cluster %s: %w", joinLines(cause), cluster, ErrNoTaintFallback)
		}
		c.Taints[cluster] = kept
		errs = append(errs, fmt.Errorf("%s; keeping the last valid taints of cluster %s (%s)", joinLines(cause), cluster, describeTaints(kept)))
	}
	for cluster, taints := range c.Taints {
		slices.SortFunc(taints, func(a, b weights.Taint) int {
			return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Effect, b.Effect), cmp.Compare(a.Value, b.Value))
		})
		c.Taints[cluster] = slices.Compact(taints)
	}
	c.TaintErr = errors.Join(errs...)
	return nil
}

func parseTolerationAnnotation(annotations map[string]string) ([]weights.Toleration, error) {
	v, ok := annotations[weights.TolerationsAnnotation]
	if !ok {
		return nil, nil
	}
	return weights.ParseTolerations(v)
}

// noExecute keeps the NoExecute taints of each cluster: the only ones that move traffic, and
// so the only ones recorded on the route (a NoSchedule change rewrites nothing).
func noExecute(taints map[string][]weights.Taint) map[string][]weights.Taint {
	out := make(map[string][]weights.Taint, len(taints))
	for c, list := range taints {
		kept := []weights.Taint{}
		for _, t := range list {
			if t.Effect == weights.EffectNoExecute {
				kept = append(kept, t)
			}
		}
		out[c] = kept
	}
	return out
}

func describeTaints(taints []weights.Taint) string {
	if len(taints) == 0 {
		return "none"
	}
	parts := make([]string, len(taints))
	for i, t := range taints {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

func describeTolerations(tols []weights.Toleration) string {
	if len(tols) == 0 {
		return "none"
	}
	parts := make([]string, len(tols))
	for i, t := range tols {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

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
			p.caches.setTaintInformer(src.kind, inf) // no worker runs before it synced
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
	if src.kind == KindInferenceCluster {
		inf = dynamicinformer.NewFilteredDynamicInformer(p.clients.dyn, src.gvr, corev1.NamespaceAll,
			p.cfg.ResyncPeriod, cache.Indexers{}, nil).Informer()
		p.handleCluster(inf, func(obj any) (ClusterTaints, string, bool) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return ClusterTaints{}, "", false
			}
			raw, _ := rawInferenceClusterTaints(u)
			return InferenceClusterTaints(u), raw, true
		})
	} else {
		inf = metadatainformer.NewFilteredMetadataInformer(p.clients.meta, src.gvr, corev1.NamespaceAll,
			p.cfg.ResyncPeriod, cache.Indexers{}, nil).Informer()
		p.handleCluster(inf, func(obj any) (ClusterTaints, string, bool) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return ClusterTaints{}, "", false
			}
			raw, ok := m.GetAnnotations()[weights.TaintsAnnotation]
			if !ok {
				raw = "\x00absent"
			}
			return WorkloadClusterTaints(m.GetName(), m.GetAnnotations()), raw, true
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
func (p *Publisher) handleCluster(inf cache.SharedIndexInformer, read func(obj any) (ClusterTaints, string, bool)) {
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
				p.recorder.Event(ref, corev1.EventTypeWarning, ReasonInvalidTaints, ct.Err.Error()+"; the publisher keeps the last valid taints")
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
	gv := InferenceClustersResource.GroupVersion()
	if kind == KindWorkloadCluster {
		gv = WorkloadClustersResource.GroupVersion()
	}
	return &corev1.ObjectReference{APIVersion: gv.String(), Kind: kind, Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
}

// enqueueCluster enqueues every TrafficMap, in every watched namespace, with an entry for
// cluster.
func (p *Publisher) enqueueCluster(pr priority, cluster string) {
	for _, tm := range p.caches.mapsIndexed(indexByCluster, "", cluster) {
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
			p.recorder.Event(ref, corev1.EventTypeWarning, ReasonInvalidTolerations,
				fmt.Sprintf("annotation %s: %s; the publisher keeps the last valid tolerations", weights.TolerationsAnnotation, err))
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { check(nil, obj) },
		UpdateFunc: check,
	})
}
