package publish

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The claim records (model/record.go): the publisher's own, authoritative record of the
// hostnames it granted to each map, one ConfigMap with no data per map that holds a
// hostname grant, in the publisher's namespace (Config.ClaimNamespace), where tenants
// cannot write. Every replica reads them through one metadata-only informer (labels and
// annotations: a few hundred bytes a map); only the leader writes them.
//
// Order: a grant is recorded before the name is journaled (status.publisher), and both
// before any sink serves it; a release drops the name from the journal, then from the
// record; a deleted map's record goes after its teardown (reconciler.delete), and the
// leader collects the records of maps that are gone (gc).
//
// Upgrade: a fleet journaled by an earlier version has journals and no records. Until the
// import marker exists, journals are read the old way (model.LegacyEvidence: under the claim
// policy, granted at the map's creationTimestamp), so every replica keeps serving what it
// served; the leader imports them once, before its first reconcile (importJournals), then
// writes the marker, and from then on only records grant names.

var configMapsResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// claimRecords reads the records from its informer and writes them (the leader). Its own
// writes are remembered (written, guarded by mu) until the informer shows them, so a
// reconcile right after a grant sees it. imported is set once the leader wrote the marker.
type claimRecords struct {
	kube               kubernetes.Interface
	namespace, manager string
	publisher          string
	inf                cache.SharedIndexInformer

	imported atomic.Bool
	mu       sync.Mutex
	written  map[string]ownRecord // record name -> what this process last wrote
}

// ownRecord is a record this process wrote (rec nil: deleted), at resourceVersion rv.
type ownRecord struct {
	rec *model.ClaimRecord
	rv  string
}

func newClaimRecords(meta metadata.Interface, kube kubernetes.Interface, namespace, publisher, manager string) *claimRecords {
	selector := labels.SelectorFromSet(labels.Set{model.LabelClaimRecordFor: model.PublisherLabelValue(publisher)}).String()
	inf := metadatainformer.NewFilteredMetadataInformer(meta, configMapsResource, namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
	_ = inf.SetTransform(dropManagedFields) // cannot fail before the informer runs
	return &claimRecords{kube: kube, namespace: namespace, manager: manager, publisher: publisher, inf: inf, written: map[string]ownRecord{}}
}

// importDone reports whether the journals of an earlier version were imported (the marker
// exists): records alone grant names from then on.
func (s *claimRecords) importDone() bool {
	if s.imported.Load() {
		return true
	}
	_, ok, _ := s.inf.GetIndexer().GetByKey(s.namespace + "/" + model.ClaimMarkerName(s.publisher))
	return ok
}

// get is the record of map namespace/name: what this process last wrote when the informer
// has not shown it yet, else the cached one; nil when there is none or it is invalid.
func (s *claimRecords) get(namespace, name string) *model.ClaimRecord {
	cm := model.ClaimRecordName(s.publisher, namespace, name)
	obj, ok, _ := s.inf.GetIndexer().GetByKey(s.namespace + "/" + cm)
	var cached *metav1.PartialObjectMetadata
	if ok {
		cached, _ = obj.(*metav1.PartialObjectMetadata)
	}
	s.mu.Lock()
	own, mine := s.written[cm]
	if mine && (own.rec == nil && cached == nil || cached != nil && cached.ResourceVersion == own.rv) {
		delete(s.written, cm) // the informer caught up
		mine = false
	}
	s.mu.Unlock()
	if mine {
		return own.rec
	}
	if cached == nil {
		return nil
	}
	rec, err := model.DecodeClaimRecord(cached.Annotations)
	if err != nil || rec.Namespace != namespace || rec.Name != name {
		return nil
	}
	return &rec
}

// remember records what this process wrote at name.
func (s *claimRecords) remember(name string, rec *model.ClaimRecord, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written[name] = ownRecord{rec: rec, rv: rv}
}

// forgetWrites drops what this process remembers of its own writes (when it stops leading).
func (s *claimRecords) forgetWrites() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.written)
}

// write stores rec (server-side apply as the publisher's field manager); a record with no
// grants is deleted instead.
func (s *claimRecords) write(ctx context.Context, rec model.ClaimRecord) error {
	name := model.ClaimRecordName(s.publisher, rec.Namespace, rec.Name)
	if len(rec.Grants) == 0 {
		return s.remove(ctx, rec.Namespace, rec.Name)
	}
	ac := corev1ac.ConfigMap(name, s.namespace).
		WithLabels(map[string]string{model.LabelClaimRecordFor: model.PublisherLabelValue(s.publisher)}).
		WithAnnotations(model.EncodeClaimRecord(rec))
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: s.manager, Force: true})
	if err != nil {
		return fmt.Errorf("apply claim record configmap %s/%s of trafficmap %s/%s: %w", s.namespace, name, rec.Namespace, rec.Name, err)
	}
	s.remember(name, &rec, cm.ResourceVersion)
	return nil
}

// remove deletes the record of map namespace/name, if any.
func (s *claimRecords) remove(ctx context.Context, namespace, mapName string) error {
	name := model.ClaimRecordName(s.publisher, namespace, mapName)
	if s.get(namespace, mapName) == nil {
		if _, ok, _ := s.inf.GetIndexer().GetByKey(s.namespace + "/" + name); !ok {
			return nil
		}
	}
	err := s.kube.CoreV1().ConfigMaps(s.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete claim record configmap %s/%s of trafficmap %s/%s: %w", s.namespace, name, namespace, mapName, err)
	}
	s.remember(name, nil, "")
	return nil
}

// records lists the cached records (not the marker), with their objects.
func (s *claimRecords) records() []*metav1.PartialObjectMetadata {
	var out []*metav1.PartialObjectMetadata
	marker := model.ClaimMarkerName(s.publisher)
	for _, o := range s.inf.GetStore().List() {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok && m.Name != marker {
			out = append(out, m)
		}
	}
	return out
}

// importJournals imports the journals of an earlier version once (model.ImportGrants), when
// the marker is missing and no record of this publisher exists, then writes the marker. It
// runs on the leader before its first reconcile; with the marker present it does nothing.
func (s *claimRecords) importJournals(ctx context.Context, fleet []*v1beta1.TrafficMap, policy model.ClaimPolicy, scoped bool, log *zap.Logger) error {
	if s.importDone() {
		s.imported.Store(true)
		return nil
	}
	if len(s.records()) == 0 {
		recs, ignored := model.ImportGrants(fleet, s.publisher, policy, scoped)
		for _, rec := range recs {
			if err := s.write(ctx, rec); err != nil {
				return err
			}
		}
		for _, key := range slices.Sorted(maps.Keys(ignored)) {
			log.Info("claim journal entries not imported", zap.String("trafficmap", key), zap.Any("ignored", ignored[key]))
		}
		log.Info("imported the claim journals of an earlier version into claim records", zap.Int("records", len(recs)), zap.String("namespace", s.namespace))
	}
	ac := corev1ac.ConfigMap(model.ClaimMarkerName(s.publisher), s.namespace).
		WithLabels(map[string]string{model.LabelClaimRecordFor: model.PublisherLabelValue(s.publisher)}).
		WithAnnotations(map[string]string{model.AnnotationClaimsImported: time.Now().UTC().Format(time.RFC3339)})
	if _, err := s.kube.CoreV1().ConfigMaps(s.namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: s.manager, Force: true}); err != nil {
		return fmt.Errorf("apply claim import marker configmap %s/%s: %w", s.namespace, model.ClaimMarkerName(s.publisher), err)
	}
	s.imported.Store(true)
	return nil
}

// gc deletes the records whose map, in a watched namespace (inScope), is gone or is another
// object now (another UID), and records that are invalid. A record that changed since it
// was read is left (the delete is guarded by its resourceVersion).
func (s *claimRecords) gc(ctx context.Context, inScope func(namespace string) bool, current func(namespace, name string) (*v1beta1.TrafficMap, error), log *zap.Logger) error {
	for _, m := range s.records() {
		rec, err := model.DecodeClaimRecord(m.Annotations)
		if err == nil {
			if !inScope(rec.Namespace) {
				continue
			}
			tm, err := current(rec.Namespace, rec.Name)
			if err != nil {
				return err
			}
			if tm != nil && tm.UID == rec.UID {
				continue
			}
		}
		rv := m.ResourceVersion
		err = s.kube.CoreV1().ConfigMaps(s.namespace).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete claim record configmap %s/%s: %w", s.namespace, m.Name, err)
		}
		log.Info("removed the claim record of a trafficmap that is gone", zap.String("configmap", m.Name), zap.String("trafficmap", rec.Namespace+"/"+rec.Name))
	}
	return nil
}

// leadClaims runs when this replica starts leading, before its first reconcile: the upgrade
// import (retried with backoff until it succeeds or the term ends: false), then the
// collection of records whose map is gone, now and every resync period of the term.
func (p *Publisher) leadClaims(lctx context.Context) bool {
	log := p.log.Named("claims")
	s, c := p.caches.claimRecords, p.caches
	for wait := time.Second; ; wait = min(2*wait, maxImportRetry) {
		err := s.importJournals(lctx, allMaps(c.maps), c.policy, c.scoped, log)
		if err == nil {
			break
		}
		log.Error("claim journal import failed; no reconcile runs until it succeeds", zap.Error(err), zap.Duration("retryIn", wait))
		select {
		case <-lctx.Done():
			return false
		case <-time.After(wait):
		}
	}
	inScope := func(ns string) bool { return watches(c, ns) }
	go func() {
		t := time.NewTicker(p.cfg.ResyncPeriod)
		defer t.Stop()
		for {
			if err := s.gc(lctx, inScope, c.trafficMap, log); err != nil && lctx.Err() == nil {
				log.Info("claim record collection failed; retried next period", zap.Error(err))
			}
			select {
			case <-lctx.Done():
				s.forgetWrites() // the next leader writes: only the informer tells what it wrote
				return
			case <-t.C:
			}
		}
	}()
	return true
}

// maxImportRetry caps the wait between two attempts of the upgrade import.
const maxImportRetry = 30 * time.Second

// allMaps lists every TrafficMap the informers maps cache.
func allMaps(maps []cache.SharedIndexInformer) []*v1beta1.TrafficMap {
	var out []*v1beta1.TrafficMap
	for _, inf := range maps {
		for _, o := range inf.GetStore().List() {
			if tm, ok := o.(*v1beta1.TrafficMap); ok {
				out = append(out, tm)
			}
		}
	}
	return out
}

// onClaimRecord enqueues the map a claim record is about and the maps contending for the
// names it grants (before and after): a grant counts once both the journal and the record
// hold it, and the record may arrive after the journal. The import marker appearing
// changes how every journal is read: every map is enqueued.
func (p *router) onClaimRecord(pr priority, old, obj any) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Name == model.ClaimMarkerName(p.caches.publisher) {
		if old == nil {
			p.enqueueAll()
		}
		return
	}
	var names []string
	for _, o := range []any{old, obj} {
		m, ok := o.(*metav1.PartialObjectMetadata)
		if !ok {
			continue
		}
		rec, err := model.DecodeClaimRecord(m.Annotations)
		if err != nil || !watches(p.caches, rec.Namespace) {
			continue // another deployment's record (a shared claim namespace): not ours
		}
		p.enqueue(pr, rec.Namespace, rec.Name)
		names = append(names, rec.Names()...)
	}
	p.enqueueContenders(pr, names...)
}
