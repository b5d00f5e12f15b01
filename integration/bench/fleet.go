package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// The fleet's shape: every map has clustersPerMap entries of entryWeight each.
const (
	namespace       = "bench"
	gatewayName     = "global"
	clustersPerMap  = 8
	entryWeight     = 10
	drainAnnotation = "ome.io/traffic-drain"
)

// clients are the benchmark's own API clients (not the publisher's).
type clients struct {
	kube kubernetes.Interface
	gw   gwclient.Interface
	tm   omeclient.Interface
	dyn  dynamic.Interface
}

func mapName(i int) string      { return fmt.Sprintf("svc-%05d", i) }
func clusterName(j int) string  { return fmt.Sprintf("worker-%d", j) }
func xdsRouteName(i int) string { return namespace + "/" + mapName(i) }

// createFleet creates n InferenceServices and their TrafficMaps, with parallel writers.
func createFleet(ctx context.Context, c clients, n, parallel int) error {
	return parallelDo(n, parallel, func(i int) error {
		name := mapName(i)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ome.io/v1beta1",
			"kind":       "InferenceService",
			"metadata":   map[string]any{"name": name, "namespace": namespace},
			"spec":       map[string]any{"placement": map[string]any{"mode": "All", "clusterSelector": map[string]any{}}},
		}}
		if _, err := c.dyn.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create inferenceservice %s: %w", name, err)
		}
		_, err := c.tm.OmeV1beta1().TrafficMaps(namespace).Create(ctx, fleetMap(namespace, name), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create trafficmap %s: %w", name, err)
		}
		return nil
	})
}

// fleetMap is the fleet's TrafficMap name in ns: clustersPerMap healthy entries of
// entryWeight, each with its own HTTPS endpoint.
func fleetMap(ns, name string) *v1beta1.TrafficMap {
	entries := make([]v1beta1.TrafficMapEntry, clustersPerMap)
	for j := range entries {
		entries[j] = v1beta1.TrafficMapEntry{Cluster: clusterName(j), Weight: entryWeight, Healthy: true,
			Endpoint: fmt.Sprintf("https://%s.%s.example.com", name, clusterName(j))}
	}
	return &v1beta1.TrafficMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1beta1.TrafficMapSpec{Service: name, Mode: "All", Entries: entries, ObservedISVCGeneration: 1},
	}
}

// parallelDo runs fn(0..n-1) on parallel goroutines and returns the first error.
func parallelDo(n, parallel int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// drainValue is the annotation for one drain, or "" for none.
func drainValue(id string, cluster int) string {
	if id == "" {
		return ""
	}
	b, _ := json.Marshal(map[string]map[string]string{id: {"cluster": clusterName(cluster), "reason": "benchmark"}})
	return string(b)
}

// setDrain writes (or, with value "", removes) the drain annotation of map i's service.
func setDrain(ctx context.Context, c clients, i int, value string) error {
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{drainAnnotation: v}}})
	_, err := c.dyn.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Patch(ctx, mapName(i), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch inferenceservice %s: %w", mapName(i), err)
	}
	return nil
}

// intent is what one map's drain annotation says: the drain id and cluster, or none.
type intent struct {
	id      string
	cluster int
}

// weightsFor renders the positive weights a map with this intent must publish, in the
// canonical "cluster=weight,..." form of canonicalVirtualHost.
func (in intent) weightsFor() string {
	var parts []string
	for j := range clustersPerMap {
		if in.id != "" && j == in.cluster {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%d", clusterName(j), entryWeight))
	}
	return strings.Join(parts, ",") // clusterName sorts as its index for fewer than 10 clusters
}

// routeWeights renders an HTTPRoute's positive backend weights in the canonical form.
func routeWeights(route *gwapiv1.HTTPRoute, mapIndex int) string {
	byService := map[string]string{}
	for j := range clustersPerMap {
		byService[httproute.ServiceName(namespace, mapName(mapIndex), clusterName(j))] = clusterName(j)
	}
	var parts []string
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			if ref.Weight != nil && *ref.Weight > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", byService[string(ref.Name)], *ref.Weight))
			}
		}
	}
	sortStrings(parts)
	return strings.Join(parts, ",")
}

// publishedFor reports whether the map's Published condition is True at its generation
// with the intent's weights, read from typed status: status.publisher.lastPositive, which
// the publisher writes in the same status write as the True condition, holds each entry
// cluster's effective weight (every map keeps a positive weight, so it is always written).
// Nothing here reads the condition's message.
func publishedFor(tm *v1beta1.TrafficMap, in intent) bool {
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(model.ReasonPublished) || c.ObservedGeneration != tm.Generation {
		return false
	}
	j := tm.Status.Publisher
	if j == nil || j.LastPositive == nil || j.LastPositive.TrafficMapGeneration != tm.Generation {
		return false
	}
	var parts []string
	for _, t := range j.LastPositive.Targets {
		if t.Weight > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", t.Target, t.Weight))
		}
	}
	sortStrings(parts)
	return strings.Join(parts, ",") == in.weightsFor()
}

// isPublished reports whether the map's Published condition is True at its generation.
func isPublished(tm *v1beta1.TrafficMap) bool {
	c := meta.FindStatusCondition(tm.Status.Conditions, v1beta1.ConditionPublished)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == tm.Generation
}

// floorProbe is the ConfigMap whose bare writes measure the API server's floor.
const floorProbe = "floor-probe"

func createFloorProbe(ctx context.Context, c clients) error {
	_, err := c.kube.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: floorProbe, Namespace: namespace},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create configmap %s: %w", floorProbe, err)
	}
	return nil
}

// writeProbe writes value into the probe's data.
func writeProbe(ctx context.Context, c clients, value string) error {
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"v": value}})
	_, err := c.kube.CoreV1().ConfigMaps(namespace).Patch(ctx, floorProbe, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch configmap %s: %w", floorProbe, err)
	}
	return nil
}
