package standin

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// Routing is the stand-in routing controller for TrafficMaps reached through Client.
type Routing struct {
	Client omeclient.Interface
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
		tm, err := r.Client.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&tm.Spec)
		out, err = r.Client.OmeV1beta1().TrafficMaps(ns).Update(ctx, tm, metav1.UpdateOptions{FieldManager: v1beta1.RoutingFieldManager})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update trafficmap %s/%s spec: %w", ns, name, err)
	}
	return out, nil
}

// ApplyStatus applies sourceUID and the Routable and OverrideActive conditions at the map's
// current generation, by server-side apply of the status subresource with forced ownership
// under ome-trafficmap-routing. The conditions' Type, ObservedGeneration and
// LastTransitionTime are set here; of routable and override only Status, Reason and
// Message are used.
func (r Routing) ApplyStatus(ctx context.Context, ns, name string, sourceUID types.UID, routable, override metav1.Condition) (*v1beta1.TrafficMap, error) {
	tm, err := r.Client.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read trafficmap %s/%s: %w", ns, name, err)
	}
	now := metav1.Now()
	status := omeac.TrafficMapStatus().WithSourceUID(sourceUID)
	for _, c := range []struct {
		typ  string
		cond metav1.Condition
	}{{v1beta1.ConditionRoutable, routable}, {v1beta1.ConditionOverrideActive, override}} {
		status.WithConditions(metav1ac.Condition().
			WithType(c.typ).
			WithStatus(c.cond.Status).
			WithObservedGeneration(tm.Generation).
			WithLastTransitionTime(now).
			WithReason(c.cond.Reason).
			WithMessage(c.cond.Message))
	}
	out, err := r.Client.OmeV1beta1().TrafficMaps(ns).ApplyStatus(ctx,
		omeac.TrafficMap(name, ns).WithStatus(status),
		metav1.ApplyOptions{FieldManager: v1beta1.RoutingFieldManager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("apply trafficmap %s/%s routing status: %w", ns, name, err)
	}
	return out, nil
}
