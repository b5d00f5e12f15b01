package standin

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/trafficmap/publisher/api/tmclient"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// Routing is the stand-in routing controller for TrafficMaps reached through Client.
type Routing struct {
	Client *tmclient.Clientset
}

// ApplyDrain sets the entry for cluster to weight 0 and lists id in its drainRefs, as OME
// does when a drain names that cluster. It returns the stored map.
func (r Routing) ApplyDrain(ctx context.Context, ns, name, cluster, id string) (*v1beta1.TrafficMap, error) {
	return r.UpdateSpec(ctx, ns, name, func(spec *v1beta1.TrafficMapSpec) {
		for i := range spec.Entries {
			if spec.Entries[i].Cluster == cluster {
				spec.Entries[i].Weight = 0
				spec.Entries[i].DrainRefs = append(spec.Entries[i].DrainRefs, id)
			}
		}
	})
}

// Recompute gives the entry for cluster its automatic weight back and clears its
// drainRefs, as OME does once the last drain holding it is gone.
func (r Routing) Recompute(ctx context.Context, ns, name, cluster string, weight int32) (*v1beta1.TrafficMap, error) {
	return r.UpdateSpec(ctx, ns, name, func(spec *v1beta1.TrafficMapSpec) {
		for i := range spec.Entries {
			if spec.Entries[i].Cluster == cluster {
				spec.Entries[i].Weight = weight
				spec.Entries[i].DrainRefs = nil
			}
		}
	})
}

// UpdateSpec changes the map's spec with conflict retries, as the routing controller's
// CreateOrUpdate does.
func (r Routing) UpdateSpec(ctx context.Context, ns, name string, change func(*v1beta1.TrafficMapSpec)) (*v1beta1.TrafficMap, error) {
	var out *v1beta1.TrafficMap
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tm, err := r.Client.TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&tm.Spec)
		out, err = r.Client.TrafficMaps(ns).Update(ctx, tm, metav1.UpdateOptions{FieldManager: v1beta1.RoutingFieldManager})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update trafficmap %s/%s spec: %w", ns, name, err)
	}
	return out, nil
}

// ApplyStatus applies sourceUID and the Routable and OverrideActive conditions at the map's
// current generation, by server-side apply with forced ownership under
// ome-trafficmap-routing. The conditions' Type and ObservedGeneration are set here.
func (r Routing) ApplyStatus(ctx context.Context, ns, name string, sourceUID types.UID, routable, override metav1.Condition) (*v1beta1.TrafficMap, error) {
	tm, err := r.Client.TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read trafficmap %s/%s: %w", ns, name, err)
	}
	routable.Type, override.Type = v1beta1.ConditionRoutable, v1beta1.ConditionOverrideActive
	for _, c := range []*metav1.Condition{&routable, &override} {
		c.ObservedGeneration = tm.Generation
		c.LastTransitionTime = metav1.Now()
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": v1beta1.SchemeGroupVersion.String(), "kind": "TrafficMap",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"status":   map[string]any{"sourceUID": sourceUID, "conditions": []metav1.Condition{routable, override}},
	})
	if err != nil {
		return nil, fmt.Errorf("encode routing status: %w", err)
	}
	force := true
	out, err := r.Client.TrafficMaps(ns).Patch(ctx, name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: v1beta1.RoutingFieldManager, Force: &force}, "status")
	if err != nil {
		return nil, fmt.Errorf("apply trafficmap %s/%s routing status: %w", ns, name, err)
	}
	return out, nil
}
