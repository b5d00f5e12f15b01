package publish

import (
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
)

// RecordName is httproute.RecordName.
func RecordName(mapName string) string { return httproute.RecordName(mapName) }

// recordStore writes and deletes the record ConfigMaps, by server-side apply under the
// publisher's field manager, reading the current ones from the caches. Its own writes are
// remembered (content, guarded by mu) until the map is deleted, so a cache that has not yet
// seen a write is never taken for the record.
type recordStore struct {
	kube    kubernetes.Interface
	manager string
	cached  func(namespace, name string) (*corev1.ConfigMap, error)

	mu      sync.Mutex
	content map[types.NamespacedName]string // a map -> the model.RecordKeyContent it last wrote
}

// carries reports whether the map's record was written for plan's content (its
// model.RecordKeyContent is plan.Digest()). A record is written only after every sink took the
// plan and after the pipeline announced the change (Published False) whenever the record
// did not carry it yet, so a Published condition True at the map's generation together
// with a record that carries the plan means that content was confirmed before: the proof
// the reconnect grace needs after a restart when no Durable sink is enabled.
func (s *recordStore) carries(tm *v1beta1.TrafficMap, plan *model.Plan) (bool, error) {
	want := plan.Digest()
	s.mu.Lock()
	got, ok := s.content[plan.Key()]
	s.mu.Unlock()
	if ok {
		return got == want, nil
	}
	cur, err := s.cached(tm.Namespace, RecordName(tm.Name))
	if err != nil || cur == nil {
		return false, err
	}
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}
	return httproute.Owned(cur.Labels, src) && ownedBy(cur.OwnerReferences, tm.UID) && cur.Data[model.RecordKeyContent] == want, nil
}

// remember records that the map's record now holds content.
func (s *recordStore) remember(key types.NamespacedName, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.content == nil {
		s.content = map[types.NamespacedName]string{}
	}
	if content == "" {
		delete(s.content, key)
		return
	}
	s.content[key] = content
}

// write records what plan pl was computed with, when the record differs, and says whether it
// wrote. The ConfigMap is owned by the TrafficMap (garbage collected with it) and labelled as
// the route would be; a ConfigMap at its name without the map's ownership labels is left
// alone.
func (s *recordStore) write(ctx context.Context, tm *v1beta1.TrafficMap, pl *model.Planned) (bool, error) {
	src := httproute.Source{Namespace: tm.Namespace, Name: tm.Name, Service: tm.Spec.Service}
	name := RecordName(tm.Name)
	data := model.EncodeRecorded(pl.Computed.Drains, pl.Plan.Taints, pl.Computed.Tolerations)
	data[model.RecordKeyContent] = pl.Plan.Digest()
	labels := httproute.OwnerLabels(src)
	cur, err := s.cached(tm.Namespace, name)
	if err != nil {
		return false, err
	}
	if cur == nil { // not cached: free, just created by us, or someone else's (unlabelled)
		live, err := s.kube.CoreV1().ConfigMaps(tm.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("read configmap %s/%s: %w", tm.Namespace, name, err)
		default:
			cur = live
		}
	}
	if cur != nil && !httproute.Owned(cur.Labels, src) {
		return false, nil // someone else's object: never overwritten, and no fallback is kept
	}
	if cur != nil && maps.Equal(cur.Data, data) && maps.Equal(cur.Labels, labels) && ownedBy(cur.OwnerReferences, tm.UID) {
		s.remember(pl.Plan.Key(), data[model.RecordKeyContent])
		return false, nil
	}
	ac := corev1ac.ConfigMap(name, tm.Namespace).WithLabels(labels).WithData(data).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(v1beta1.SchemeGroupVersion.String()).
			WithKind("TrafficMap").WithName(tm.Name).WithUID(tm.UID))
	if _, err := s.kube.CoreV1().ConfigMaps(tm.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: s.manager, Force: cur != nil}); err != nil {
		return false, fmt.Errorf("apply configmap %s/%s recording the last valid drains: %w", tm.Namespace, name, err)
	}
	s.remember(pl.Plan.Key(), data[model.RecordKeyContent])
	return true, nil
}

// delete removes the record of the deleted map namespace/name, when it is the publisher's.
func (s *recordStore) delete(ctx context.Context, namespace, mapName string) (int, error) {
	s.remember(model.Key(namespace, mapName), "")
	name := RecordName(mapName)
	cur, err := s.cached(namespace, name)
	if err != nil || cur == nil {
		return 0, err
	}
	if src, ok := httproute.SourceOf(cur.Labels); !ok || src.Namespace != namespace || src.Name != mapName {
		return 0, nil
	}
	err = s.kube.CoreV1().ConfigMaps(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete configmap %s/%s: %w", namespace, name, err)
	}
	return 1, nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}
