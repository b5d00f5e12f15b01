package httproute

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OME's built-in Gateway API publisher (`gatewayapi`) labels every object it writes for an
// InferenceService with these three ownership labels (its Services add the cluster label).
const (
	LabelOMEManagedBy        = "ome.io/managed-by"
	OMEManagedByValue        = "placement-endpoint"
	LabelOMESourceName       = "ome.io/placement-endpoint-isvc"
	LabelOMESourceNS         = "ome.io/placement-endpoint-isvc-namespace"
	LabelOMEPlacementCluster = "ome.io/placement-cluster"
)

// Adoption is what the publisher may do with an object stored at a name it needs for a map.
type Adoption int

const (
	// AdoptNone: the object is someone else's; it is not touched (ErrConflict).
	AdoptNone Adoption = iota
	// AdoptOwned: the object carries the publisher's ownership labels for the map.
	AdoptOwned
	// AdoptOME: the object carries OME's three ownership labels for exactly the map (and
	// no ownership labels of the publisher for another map), and adoption from OME's
	// publisher is on: it is updated in place into the publisher's, OME's labels removed.
	AdoptOME
)

// OMEOwned reports whether labels are OME's ownership labels for exactly src's map: OME
// names an object by its InferenceService, which has the map's name and namespace.
func OMEOwned(labels map[string]string, src Source) bool {
	isvc := src.Service
	if isvc == "" {
		isvc = src.Name
	}
	return labels[LabelOMEManagedBy] == OMEManagedByValue && labels[LabelOMESourceName] == isvc &&
		isvc == src.Name && labels[LabelOMESourceNS] == src.Namespace
}

// AdoptionOf is the adoption decision for an object with labels at a name src needs, with
// adoption from OME's publisher on (fromOME) or off. It is pure: labels and src alone. An
// object carrying both the publisher's labels for src and OME's (an adoption cut short) is
// AdoptOME while adoption is on, so its adoption completes.
func AdoptionOf(labels map[string]string, src Source, fromOME bool) Adoption {
	owned := Owned(labels, src)
	if fromOME && OMEOwned(labels, src) {
		if _, ours := SourceOf(labels); owned || !ours {
			return AdoptOME
		}
		return AdoptNone
	}
	if owned {
		return AdoptOwned
	}
	return AdoptNone
}

// omeSelector selects the objects OME's publisher labelled for src's map.
func omeSelector(src Source) string {
	return LabelOMEManagedBy + "=" + OMEManagedByValue + "," + LabelOMESourceName + "=" + src.Name + "," + LabelOMESourceNS + "=" + src.Namespace
}

// finishAdoption ends the adoption of a route OME's publisher wrote for src's map, after the
// route (res.Route, as stored) was applied with the publisher's content: it deletes OME's
// backend Services for the map that the route no longer refers to, then removes OME's
// ownership labels from the route (a merge patch at the route's UID: server-side apply
// cannot remove labels another manager set). res counts the writes and holds the
// route as stored after.
func (w *Writer) finishAdoption(ctx context.Context, src Source, res *SyncResult) error {
	route := res.Route
	list, err := w.kube.CoreV1().Services(route.Namespace).List(ctx, metav1.ListOptions{LabelSelector: omeSelector(src)})
	if err != nil {
		return fmt.Errorf("list services of ome's publisher for %s/%s: %w", src.Namespace, src.Name, err)
	}
	referenced := map[string]bool{}
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			referenced[string(ref.Name)] = true
		}
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if referenced[svc.Name] || !OMEOwned(svc.Labels, src) {
			continue
		}
		if err := w.deleteService(ctx, svc); err != nil {
			return err
		}
		res.Writes++
	}
	// The route's UID is the precondition, not its resourceVersion: removing the labels is
	// right whatever else changed since (the gateway writing its status, for one).
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": route.UID,
		"labels": map[string]any{LabelOMEManagedBy: nil, LabelOMESourceName: nil, LabelOMESourceNS: nil}}})
	if err != nil {
		return fmt.Errorf("encode label removal: %w", err)
	}
	patched, err := w.gateway.GatewayV1().HTTPRoutes(route.Namespace).Patch(ctx, route.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: w.fieldManager})
	if err != nil {
		return fmt.Errorf("remove ome's labels from httproute %s/%s: %w", route.Namespace, route.Name, err)
	}
	res.Route, res.RouteWritten = patched, true
	res.Writes++
	return nil
}

// deleteOMEServices deletes every backend Service OME's publisher wrote for src's map
// (OMEOwned, read from the API server: the Service cache holds only the publisher's), each
// at its UID, and returns how many it deleted.
func (w *Writer) deleteOMEServices(ctx context.Context, src Source) (int, error) {
	list, err := w.kube.CoreV1().Services(src.Namespace).List(ctx, metav1.ListOptions{LabelSelector: omeSelector(src)})
	if err != nil {
		return 0, fmt.Errorf("list services of ome's publisher for %s/%s: %w", src.Namespace, src.Name, err)
	}
	deleted := 0
	for i := range list.Items {
		svc := &list.Items[i]
		if !OMEOwned(svc.Labels, src) {
			continue
		}
		if err := w.deleteService(ctx, svc); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}
