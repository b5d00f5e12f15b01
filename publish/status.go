package publish

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
)

// Step 5 of the pipeline: write the decided status.

// progressInterval is how often at most a map's Published False message is rewritten while
// it stays False for the same reason: with C xDS clients a rollout would otherwise cost up
// to C status writes per map, and a drain one write for "publishing weights" and another,
// moments later, for "waiting for gateway ... to accept route".
const progressInterval = time.Second

// freshQuiet is how long a new map's first status waits while it only says Publishing.
const freshQuiet = 2 * time.Second

// statusAPI is the part of the API the status writer uses.
type statusAPI interface {
	// Get reads the live map.
	Get(ctx context.Context, namespace, name string) (*v1beta1.TrafficMap, error)
	// ApplyStatus server-side applies the map's status subresource (forcing ownership).
	ApplyStatus(ctx context.Context, tm *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error)
}

// clientStatusAPI is the statusAPI of a TrafficMap clientset, applying under manager.
type clientStatusAPI struct {
	maps    omeclient.Interface
	manager string
}

// Get implements statusAPI.
func (c clientStatusAPI) Get(ctx context.Context, namespace, name string) (*v1beta1.TrafficMap, error) {
	return c.maps.OmeV1beta1().TrafficMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// ApplyStatus implements statusAPI.
func (c clientStatusAPI) ApplyStatus(ctx context.Context, tm *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error) {
	return c.maps.OmeV1beta1().TrafficMaps(*tm.Namespace).ApplyStatus(ctx, tm, metav1.ApplyOptions{FieldManager: c.manager, Force: true})
}

// statusWriter writes the publisher-owned part of TrafficMap status with server-side apply,
// only when it differs from the cached status, and records an Event when the condition's
// reason or status changes. A cached map older than the writer's own last status write of
// it (by resourceVersion) is never taken as proof that the status already matches: the
// write is made anyway, with that older resourceVersion, so the API server refuses it and
// write judges again on the live map. Its tables are guarded by mu and forget deleted maps.
type statusWriter struct {
	api      statusAPI
	recorder record.EventRecorder
	metrics  *metrics
	now      func() time.Time

	mu       sync.Mutex
	fresh    map[cache.ObjectName]time.Time // when a map with no condition was first found Publishing
	progress map[cache.ObjectName]time.Time // when a map's last progress message was written
	written  map[cache.ObjectName]string    // the resourceVersion of a map's last status write, until the cache holds it
}

func newStatusWriter(api statusAPI, recorder record.EventRecorder, m *metrics) *statusWriter {
	return &statusWriter{api: api, recorder: recorder, metrics: m, now: time.Now, progress: map[cache.ObjectName]time.Time{},
		fresh:   map[cache.ObjectName]time.Time{},
		written: map[cache.ObjectName]string{}}
}

// write applies want to tm's status. It returns a positive hold instead of writing when
// want only updates the consumer count of a progress message written less than
// progressInterval ago (the caller requeues the map after hold). A write based on a stale
// cache conflicts; when the live map still has the generation want was decided for, the
// write is made once more on the live object, otherwise the conflict is returned and the
// newer map is reconciled next. A tm older than the writer's last status write of the map
// is written to even when its status already is want (see statusWriter), so an A→B→A
// flip never stays at B because the cache still shows A.
//
// It returns the map as stored after the write (tm itself when nothing was written), for
// a second write in the same reconcile.
func (w *statusWriter) write(ctx context.Context, tm *v1beta1.TrafficMap, want publisherStatus, log *zap.Logger) (*v1beta1.TrafficMap, time.Duration, error) {
	if hold := w.hold(tm, want); hold > 0 {
		return tm, hold, nil
	}
	updated, err := w.apply(ctx, tm, want, log)
	if !apierrors.IsConflict(err) {
		return updated, 0, err
	}
	live, getErr := w.api.Get(ctx, tm.Namespace, tm.Name)
	if getErr != nil {
		return tm, 0, fmt.Errorf("re-read trafficmap after conflict: %w", getErr)
	}
	if live.UID != tm.UID || live.Generation != tm.Generation ||
		!equality.Semantic.DeepEqual(findPublished(live), findPublished(tm)) {
		// The map changed under us, or someone else (`publisher drain`) wrote the
		// condition since the read: reconcile it afresh, with backoff.
		return tm, 0, err
	}
	updated, err = w.apply(ctx, live, want, log)
	return updated, 0, err
}

// hold is how long to wait before writing want, a Pending answer that only restates why
// the map is not published yet (a False condition with the same reason at the same
// generation was written less than progressInterval ago), or the first condition of a new
// map that only says Publishing: a new map
// has an empty column, which is not stale, so its first status waits freshQuiet for the
// sinks (most maps are then written once, True, which halves a cold start's writes and
// keeps such maps out of the reconnect grace, which holds maps that have a condition).
func (w *statusWriter) hold(tm *v1beta1.TrafficMap, want publisherStatus) time.Duration {
	key := cache.NewObjectName(tm.Namespace, tm.Name)
	w.mu.Lock()
	defer w.mu.Unlock()
	if findPublished(tm) == nil && !want.published && want.condition.Reason == ReasonPublishing {
		now := w.now()
		first, ok := w.fresh[key]
		if !ok {
			w.fresh[key], first = now, now
		}
		if wait := freshQuiet - now.Sub(first); wait > 0 {
			return wait
		}
	} else {
		delete(w.fresh, key)
	}
	now := w.now()
	if !want.progress {
		if want.published {
			delete(w.progress, key)
		} else {
			w.progress[key] = now // a False message a progress message may follow
		}
		return 0
	}
	prev := findPublished(tm)
	if prev != nil && prev.Message == want.condition.Message {
		return 0 // nothing to rewrite
	}
	last, ok := w.progress[key]
	if ok && prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == want.condition.Reason &&
		prev.ObservedGeneration == want.condition.ObservedGeneration && now.Sub(last) < progressInterval {
		return progressInterval - now.Sub(last)
	}
	w.progress[key] = now // written now
	return 0
}

// forget drops what the writer remembers about a deleted map.
func (w *statusWriter) forget(key cache.ObjectName) {
	w.mu.Lock()
	delete(w.progress, key)
	delete(w.fresh, key)
	delete(w.written, key)
	w.mu.Unlock()
}

// behind reports whether tm is older than the writer's last status write of it, or cannot
// be compared with it. A tm at least as new meets the expectation, which is dropped.
func (w *statusWriter) behind(tm *v1beta1.TrafficMap) bool {
	key := cache.NewObjectName(tm.Namespace, tm.Name)
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.written[key]
	if !ok {
		return false
	}
	if cmp, err := resourceversion.CompareResourceVersion(tm.ResourceVersion, last); err != nil || cmp < 0 {
		return true
	}
	delete(w.written, key)
	return false
}

// wrote records updated as the writer's last status write of its map.
func (w *statusWriter) wrote(updated *v1beta1.TrafficMap) {
	if updated == nil || updated.ResourceVersion == "" {
		return
	}
	w.mu.Lock()
	w.written[cache.NewObjectName(updated.Namespace, updated.Name)] = updated.ResourceVersion
	w.mu.Unlock()
}

// same reports whether tm's status already is want, or is a True condition want keeps:
// True at the same generation with a message that ends with want's tail (the same weights;
// only the sinks' consumer counts may differ, see publisherStatus.tail).
func same(tm *v1beta1.TrafficMap, want publisherStatus) bool {
	prev := findPublished(tm)
	if prev == nil || prev.Status != want.condition.Status || prev.Reason != want.condition.Reason ||
		prev.ObservedGeneration != want.condition.ObservedGeneration ||
		tm.Status.Published != want.published || tm.Status.ObservedTrafficMapGeneration != want.observed ||
		!equality.Semantic.DeepEqual(tm.Status.GatewayRef, want.gatewayRef) ||
		want.journal != nil && !equality.Semantic.DeepEqual(tm.Status.Publisher, want.journal) {
		return false
	}
	if prev.Message == want.condition.Message {
		return true
	}
	return want.published && want.tail != "" && strings.HasSuffix(prev.Message, "; "+want.tail)
}

func (w *statusWriter) apply(ctx context.Context, tm *v1beta1.TrafficMap, want publisherStatus, log *zap.Logger) (*v1beta1.TrafficMap, error) {
	if same(tm, want) && !w.behind(tm) {
		return tm, nil
	}
	prev := findPublished(tm)
	// meta.SetStatusCondition's transition rule: the time moves only when the status does.
	conds := slices.Clone(tm.Status.Conditions)
	want.condition.LastTransitionTime = metav1.NewTime(w.now())
	meta.SetStatusCondition(&conds, want.condition)
	cond := *meta.FindStatusCondition(conds, v1beta1.ConditionPublished)
	updated, err := w.api.ApplyStatus(ctx, applyConfiguration(tm, want, cond))
	if err != nil {
		return tm, fmt.Errorf("apply trafficmap %s/%s status: %w", tm.Namespace, tm.Name, err)
	}
	w.wrote(updated)
	w.metrics.condition(cache.NewObjectName(tm.Namespace, tm.Name), string(cond.Status), cond.Reason)
	log.Info("published condition", zap.String("status", string(cond.Status)),
		zap.String("reason", cond.Reason), zap.Int64("generation", tm.Generation), zap.String("message", cond.Message))
	if prev == nil || prev.Reason != cond.Reason || prev.Status != cond.Status {
		eventType := corev1.EventTypeWarning
		if cond.Reason == ReasonPublished || cond.Reason == ReasonPublishing || cond.Reason == ReasonRamping {
			eventType = corev1.EventTypeNormal
		}
		w.recorder.Event(tm, eventType, cond.Reason, cond.Message)
	}
	return updated, nil
}

// applyConfiguration is the server-side apply request for want: only the publisher-owned
// status fields, at the resourceVersion the decision was made for (so a decision based on
// a stale read conflicts).
func applyConfiguration(tm *v1beta1.TrafficMap, want publisherStatus, cond metav1.Condition) *omeac.TrafficMapApplyConfiguration {
	journal := want.journal
	if journal == nil {
		journal = tm.Status.Publisher
	}
	return statusApply(tm, want.published, want.observed, want.gatewayRef, &cond, journal)
}

// writeJournal writes journal as tm's claim journal (status.publisher), restating the
// other publisher-owned status fields as tm has them, and returns the map as stored. A
// stale tm conflicts (the caller reconciles again).
func (w *statusWriter) writeJournal(ctx context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error) {
	updated, err := w.api.ApplyStatus(ctx, statusApply(tm, tm.Status.Published, tm.Status.ObservedTrafficMapGeneration,
		tm.Status.GatewayRef, findPublished(tm), journal))
	if err != nil {
		return tm, fmt.Errorf("apply trafficmap %s/%s claim journal: %w", tm.Namespace, tm.Name, err)
	}
	w.wrote(updated)
	return updated, nil
}

// StatusApplyConfiguration is the server-side apply request for the publisher-owned part
// of tm's status: status.published, the Published condition cond, observedTrafficMapGeneration
// and gatewayRef (omitted when zero) and the claim journal status.publisher (journal,
// omitted when nil: pass tm.Status.Publisher to keep it), at tm's resourceVersion so that a
// request decided from a stale read conflicts. Everything that writes these fields under
// the publisher's field manager (the publisher, `publisher drain`) builds its request here,
// so they never disagree on which fields they own (a field left out of a request is
// removed).
func StatusApplyConfiguration(tm *v1beta1.TrafficMap, published bool, observed int64, gatewayRef *v1beta1.TrafficMapGatewayRef,
	cond metav1.Condition, journal *v1beta1.TrafficMapPublisherStatus) *omeac.TrafficMapApplyConfiguration {
	return statusApply(tm, published, observed, gatewayRef, &cond, journal)
}

func statusApply(tm *v1beta1.TrafficMap, published bool, observed int64, gatewayRef *v1beta1.TrafficMapGatewayRef,
	cond *metav1.Condition, journal *v1beta1.TrafficMapPublisherStatus) *omeac.TrafficMapApplyConfiguration {
	st := omeac.TrafficMapStatus().WithPublished(published)
	if cond != nil {
		st.WithConditions(metav1ac.Condition().
			WithType(cond.Type).WithStatus(cond.Status).WithReason(cond.Reason).WithMessage(cond.Message).
			WithObservedGeneration(cond.ObservedGeneration).WithLastTransitionTime(cond.LastTransitionTime))
	}
	if observed != 0 {
		st.WithObservedTrafficMapGeneration(observed)
	}
	if r := gatewayRef; r != nil {
		ref := omeac.TrafficMapGatewayRef().WithKind(r.Kind).WithName(r.Name)
		if r.Group != "" {
			ref.WithGroup(r.Group)
		}
		if r.Namespace != "" {
			ref.WithNamespace(r.Namespace)
		}
		st.WithGatewayRef(ref)
	}
	if j := journal; j != nil {
		pj := omeac.TrafficMapPublisherStatus().WithPublisherName(j.PublisherName)
		if len(j.ClaimedTargets) > 0 {
			pj.WithClaimedTargets(j.ClaimedTargets...)
		}
		if j.ObservedOptionsDigest != "" {
			pj.WithObservedOptionsDigest(j.ObservedOptionsDigest)
		}
		if lp := j.LastPositive; lp != nil {
			alp := omeac.TrafficMapPublisherLastPositive().WithTrafficMapGeneration(lp.TrafficMapGeneration).
				WithObservedISVCGeneration(lp.ObservedISVCGeneration).WithPlanCompatibilityDigest(lp.PlanCompatibilityDigest)
			for _, t := range lp.Targets {
				alp.WithTargets(omeac.TrafficMapPublisherTarget().WithTarget(t.Target).WithWeight(t.Weight))
			}
			pj.WithLastPositive(alp)
		}
		st.WithPublisher(pj)
	}
	ac := omeac.TrafficMap(tm.Name, tm.Namespace).WithStatus(st)
	if tm.ResourceVersion != "" {
		ac.WithResourceVersion(tm.ResourceVersion)
	}
	return ac
}
