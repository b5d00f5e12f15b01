package model

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
	raw, err := RawInferenceClusterTaints(u)
	if err == nil && raw != "" {
		ct.Taints, err = weights.ParseTaints(raw)
	}
	if err != nil {
		ct.Err = fmt.Errorf("inferencecluster %s spec.taints: %w", u.GetName(), err)
		ct.Taints = nil
	}
	return ct
}

// RawInferenceClusterTaints is spec.taints of a Modelplane InferenceCluster as JSON, "" when
// absent, for comparing what a source says before it is parsed.
func RawInferenceClusterTaints(u *unstructured.Unstructured) (string, error) {
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
		fb := in.Recorded
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
		recorded = in.Recorded.Taints
	}
	var errs []error
	for _, cluster := range slices.Sorted(maps.Keys(bad)) {
		kept, ok := recorded[cluster]
		cause := errors.Join(bad[cluster]...)
		if !ok {
			return fmt.Errorf("%s; cluster %s: %w", joinLines(cause), cluster, ErrNoTaintFallback)
		}
		c.Taints[cluster] = kept
		errs = append(errs, fmt.Errorf("%s; keeping the last valid taints of cluster %s (%s)", joinLines(cause), cluster, DescribeTaints(kept)))
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

// NoExecute keeps the NoExecute taints of each cluster: the only ones that move traffic, and
// so the only ones recorded on the route (a NoSchedule change rewrites nothing).
func NoExecute(taints map[string][]weights.Taint) map[string][]weights.Taint {
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

// DescribeTaints renders taints as "key=value:Effect,...", "none" for none.
func DescribeTaints(taints []weights.Taint) string {
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
