package publish

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The publisher's finalizer (model.Finalizer) is written on the TrafficMap itself, never
// through the status subresource, under the publisher's field manager.
//
// Adding it is a server-side apply of metadata.finalizers holding model.Finalizer alone:
// finalizers is a set (listType=set), so the apply adds that one item and owns only it,
// and every other finalizer stays with its owner. The apply names the map's
// resourceVersion: an apply would otherwise create a map that was deleted meanwhile (the
// CRD requires no spec), and one decided from a stale cache conflicts and is retried.
//
// Removing it is a JSON merge patch of metadata.finalizers to the list without it, guarded
// by the map's resourceVersion (a conflict when anything changed since the read, so no
// finalizer someone added meanwhile is dropped). An apply that gives the item up would
// remove it only when no other manager also owns it (an older version, OME's publisher or
// an operator may have written the same item), which would leave the map stuck.

// AddFinalizer implements statusAPI.
func (c clientStatusAPI) AddFinalizer(ctx context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error) {
	ac := omeac.TrafficMap(tm.Name, tm.Namespace).WithResourceVersion(tm.ResourceVersion).WithFinalizers(model.Finalizer)
	return c.maps.OmeV1beta1().TrafficMaps(tm.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: c.manager})
}

// RemoveFinalizer implements statusAPI.
func (c clientStatusAPI) RemoveFinalizer(ctx context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error) {
	return removeFinalizer(ctx, c.maps, tm, c.manager)
}

// removeFinalizer removes model.Finalizer from tm's finalizers, guarded by tm's
// resourceVersion (see above); tm itself when it carries none.
func removeFinalizer(ctx context.Context, maps omeclient.Interface, tm *v1beta1.TrafficMap, manager string) (*v1beta1.TrafficMap, error) {
	if !model.HasFinalizer(tm) {
		return tm, nil
	}
	type meta struct {
		ResourceVersion string   `json:"resourceVersion"`
		Finalizers      []string `json:"finalizers"`
	}
	patch, err := json.Marshal(map[string]meta{"metadata": {ResourceVersion: tm.ResourceVersion, Finalizers: model.WithoutFinalizer(tm)}})
	if err != nil {
		return nil, fmt.Errorf("encode finalizer patch: %w", err)
	}
	return maps.OmeV1beta1().TrafficMaps(tm.Namespace).Patch(ctx, tm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager})
}

// ReleaseFinalizers removes model.Finalizer from every TrafficMap in namespace (every
// namespace when empty), touching nothing the publisher published (routes, Services and
// xDS resources stay until their map goes and the garbage collector takes them through
// their ownerReferences): the escape hatch of an uninstall, so that no map is left held by
// a publisher that no longer runs. Each map is patched as the publisher does (guarded by its
// resourceVersion, read again after a conflict). It returns the maps it released, sorted,
// and stops at the first error that is not a conflict.
func ReleaseFinalizers(ctx context.Context, maps omeclient.Interface, namespace, manager string) ([]types.NamespacedName, error) {
	list, err := maps.OmeV1beta1().TrafficMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list trafficmaps: %w", err)
	}
	var released []types.NamespacedName
	for i := range list.Items {
		tm := &list.Items[i]
		if !model.HasFinalizer(tm) {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			_, err := removeFinalizer(ctx, maps, tm, manager)
			if apierrors.IsConflict(err) {
				live, getErr := maps.OmeV1beta1().TrafficMaps(tm.Namespace).Get(ctx, tm.Name, metav1.GetOptions{})
				if getErr != nil {
					return getErr
				}
				tm = live
			}
			return err
		})
		switch {
		case apierrors.IsNotFound(err): // gone meanwhile
		case err != nil:
			return released, fmt.Errorf("release trafficmap %s/%s: %w", tm.Namespace, tm.Name, err)
		default:
			released = append(released, model.KeyOf(tm))
		}
	}
	slices.SortFunc(released, func(a, b types.NamespacedName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return released, nil
}
