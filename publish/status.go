package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/statusapply"
)

// Step 5 of the pipeline: write the decided status.

// progressInterval is how often at most a map's Published False message is rewritten while
// it stays False for the same reason: with C xDS clients a rollout would otherwise cost up
// to C status writes per map, and a drain one write for "publishing weights" and another,
// moments later, for "waiting for gateway ... to accept route".
const progressInterval = time.Second

// freshQuiet is how long a new map's first status waits while it only says Publishing,
// when it is the only new map waiting. Each other new map waiting at the same time adds
// freshPerWaiting, up to freshQuietMax: while many maps are new at once (a cold start, a
// mass creation) their sinks serve them together and each takes longer to confirm (at
// N = 10,000 a new map took 2.5 s from its claim to True at p50 and 9.2 s at most), and an
// early Publishing status is one more write per map to an API server that is then the
// bottleneck (2,301 of 5,701 maps were written twice with a fixed 2 s).
const (
	freshQuiet      = 2 * time.Second
	freshPerWaiting = 100 * time.Millisecond
	freshQuietMax   = 10 * time.Second
)

// statusAPI is the part of the API the status writer and the finalizer use.
type statusAPI interface {
	// Get reads the live map.
	Get(ctx context.Context, namespace, name string) (*v1beta1.TrafficMap, error)
	// ApplyStatus server-side applies the map's status subresource (forcing ownership).
	ApplyStatus(ctx context.Context, tm *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error)
	// ApplyHeldStatus is ApplyStatus under the held field manager (heldManager): the status
	// of a map another publisher holds (model.Status.Held), whose fields the publisher's
	// own manager must neither take nor, by leaving them out, remove (the holder may run
	// under the same field manager).
	ApplyHeldStatus(ctx context.Context, tm *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error)
	// ReplaceJournal replaces tm's claim journal (status.publisher) with journal as a whole,
	// at tm's resourceVersion (a stale tm conflicts), whoever wrote the journal before.
	ReplaceJournal(ctx context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error)
	// AddFinalizer adds model.Finalizer to tm (finalizer.go), guarded by its
	// resourceVersion, and returns the map as stored.
	AddFinalizer(ctx context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error)
	// RemoveFinalizer removes model.Finalizer (only it) from tm, guarded by its
	// resourceVersion, and returns the map as stored.
	RemoveFinalizer(ctx context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error)
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

// ApplyHeldStatus implements statusAPI.
func (c clientStatusAPI) ApplyHeldStatus(ctx context.Context, tm *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error) {
	return c.maps.OmeV1beta1().TrafficMaps(*tm.Namespace).ApplyStatus(ctx, tm, metav1.ApplyOptions{FieldManager: heldManager(c.manager), Force: true})
}

// heldManager is the field manager of the status writes about maps another publisher holds:
// the publisher's own with "-held" appended, so it owns only the Published condition and
// status.published it wrote, and the holder's fields stay the holder's.
func heldManager(manager string) string { return manager + "-held" }

// ReplaceJournal implements statusAPI with a JSON merge patch of the status subresource:
// server-side apply cannot remove what another field manager wrote (another publisher's
// claimed targets and last positive plan), a merge patch replaces them. Every key of the
// journal is named, null when journal leaves it out.
func (c clientStatusAPI) ReplaceJournal(ctx context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error) {
	j := map[string]any{"publisherName": journal.PublisherName, "claimedTargets": nil, "observedOptionsDigest": nil, "lastPositive": nil}
	if len(journal.ClaimedTargets) > 0 {
		j["claimedTargets"] = journal.ClaimedTargets
	}
	if journal.ObservedOptionsDigest != "" {
		j["observedOptionsDigest"] = journal.ObservedOptionsDigest
	}
	if journal.LastPositive != nil {
		j["lastPositive"] = journal.LastPositive
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": tm.ResourceVersion}, "status": map[string]any{"publisher": j}})
	if err != nil {
		return nil, fmt.Errorf("encode claim journal: %w", err)
	}
	return c.maps.OmeV1beta1().TrafficMaps(tm.Namespace).Patch(ctx, tm.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: c.manager}, "status")
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
	fresh    map[types.NamespacedName]time.Time // when a map with no condition was first found Publishing
	progress map[types.NamespacedName]time.Time // when a map's last progress message was written
	written  map[types.NamespacedName]string    // the resourceVersion of a map's last status write, until the cache holds it
	content  map[types.NamespacedName]string    // the model.Status.Content of the True condition last written or kept
}

func newStatusWriter(api statusAPI, recorder record.EventRecorder, m *metrics) *statusWriter {
	return &statusWriter{api: api, recorder: recorder, metrics: m, now: time.Now, progress: map[types.NamespacedName]time.Time{},
		fresh:   map[types.NamespacedName]time.Time{},
		written: map[types.NamespacedName]string{}, content: map[types.NamespacedName]string{}}
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
func (w *statusWriter) write(ctx context.Context, tm *v1beta1.TrafficMap, want model.Status, log *zap.Logger) (*v1beta1.TrafficMap, time.Duration, error) {
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
		!equality.Semantic.DeepEqual(model.FindPublished(live), model.FindPublished(tm)) {
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
// has an empty column, which is not stale, so its first status waits freshQuiet (longer
// while many new maps wait at once) for the sinks (most maps are then written once, True, which halves a cold start's writes and
// keeps such maps out of the reconnect grace, which holds maps that have a condition).
func (w *statusWriter) hold(tm *v1beta1.TrafficMap, want model.Status) time.Duration {
	key := model.KeyOf(tm)
	w.mu.Lock()
	defer w.mu.Unlock()
	if model.FindPublished(tm) == nil && !want.Published && want.Condition.Reason == string(model.ReasonPublishing) {
		now := w.now()
		first, ok := w.fresh[key]
		if !ok {
			w.fresh[key], first = now, now
		}
		quiet := min(freshQuietMax, freshQuiet+time.Duration(len(w.fresh)-1)*freshPerWaiting)
		if wait := quiet - now.Sub(first); wait > 0 {
			return wait
		}
	} else {
		delete(w.fresh, key)
	}
	now := w.now()
	if !want.Progress {
		if want.Published {
			delete(w.progress, key)
		} else {
			w.progress[key] = now // a False message a progress message may follow
		}
		return 0
	}
	prev := model.FindPublished(tm)
	if prev != nil && prev.Message == want.Condition.Message {
		return 0 // nothing to rewrite
	}
	last, ok := w.progress[key]
	if ok && prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == want.Condition.Reason &&
		prev.ObservedGeneration == want.Condition.ObservedGeneration && now.Sub(last) < progressInterval {
		return progressInterval - now.Sub(last)
	}
	w.progress[key] = now // written now
	return 0
}

// forget drops what the writer remembers about a deleted map.
func (w *statusWriter) forget(key types.NamespacedName) {
	w.mu.Lock()
	delete(w.progress, key)
	delete(w.fresh, key)
	delete(w.written, key)
	delete(w.content, key)
	w.mu.Unlock()
}

// behind reports whether tm is older than the writer's last status write of it, or cannot
// be compared with it. A tm at least as new meets the expectation, which is dropped.
func (w *statusWriter) behind(tm *v1beta1.TrafficMap) bool {
	key := model.KeyOf(tm)
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
	w.written[model.KeyOf(updated)] = updated.ResourceVersion
	w.mu.Unlock()
}

// same reports whether tm's status already is want, comparing typed fields: the condition's
// status, reason and observedGeneration, status.published, observedTrafficMapGeneration,
// gatewayRef, the claim journal (with status.publisher.lastPositive, the weights of a
// positive True plan) and, when want sets one, the PublicationFallback condition's status,
// reason and observedGeneration (model.SameCondition; its message is written along with any
// other change) must be equal. Then a condition with the same message is the same;
// a True condition with another message is kept when it is about the same content: known
// (the Content of the True condition this writer last wrote or kept for the map) or, after
// a start or a change of leader, want.Confirmed (the pipeline proved the map's True
// condition was confirmed for this very content) says its content is want.Content. Such a
// message differs only in the consumer counts of the moment it turned True, which are
// not worth a write per map. Nothing here reads a message: a False condition whose text
// differs (a Pending answer's new counts, another error) is written.
func same(tm *v1beta1.TrafficMap, want model.Status, known string) bool {
	prev := model.FindPublished(tm)
	if prev == nil || prev.Status != want.Condition.Status || prev.Reason != want.Condition.Reason ||
		prev.ObservedGeneration != want.Condition.ObservedGeneration ||
		tm.Status.Published != want.Published || tm.Status.ObservedTrafficMapGeneration != want.Observed ||
		!equality.Semantic.DeepEqual(tm.Status.GatewayRef, want.GatewayRef) ||
		want.Journal != nil && !equality.Semantic.DeepEqual(tm.Status.Publisher, want.Journal) ||
		want.Fallback != nil && !model.SameCondition(model.FindFallback(tm), *want.Fallback) {
		return false
	}
	if prev.Message == want.Condition.Message {
		return true
	}
	return want.Published && want.Content != "" && (want.Content == known || want.Confirmed)
}

// known is the Content of the True condition the writer last wrote or kept for the map.
func (w *statusWriter) known(key types.NamespacedName) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.content[key]
}

// shown records what the map's Published condition is about now: want's Content when it
// is True, nothing otherwise.
func (w *statusWriter) shown(key types.NamespacedName, want model.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if want.Published && want.Content != "" {
		w.content[key] = want.Content
		return
	}
	delete(w.content, key)
}

func (w *statusWriter) apply(ctx context.Context, tm *v1beta1.TrafficMap, want model.Status, log *zap.Logger) (*v1beta1.TrafficMap, error) {
	key := model.KeyOf(tm)
	if same(tm, want, w.known(key)) && !w.behind(tm) {
		w.shown(key, want)
		return tm, nil
	}
	prev := model.FindPublished(tm)
	// meta.SetStatusCondition's transition rule: the time moves only when the status does.
	conds := slices.Clone(tm.Status.Conditions)
	want.Condition.LastTransitionTime = metav1.NewTime(w.now())
	meta.SetStatusCondition(&conds, want.Condition)
	if want.Fallback != nil {
		fb := *want.Fallback
		fb.LastTransitionTime = want.Condition.LastTransitionTime
		meta.SetStatusCondition(&conds, fb)
	}
	cond := *meta.FindStatusCondition(conds, v1beta1.ConditionPublished)
	fallback := meta.FindStatusCondition(conds, v1beta1.ConditionPublicationFallback)
	applyStatus := w.api.ApplyStatus
	if want.Held {
		applyStatus = w.api.ApplyHeldStatus
	}
	updated, err := applyStatus(ctx, applyConfiguration(tm, want, cond, fallback))
	if err != nil {
		return tm, fmt.Errorf("apply trafficmap %s/%s status: %w", tm.Namespace, tm.Name, err)
	}
	w.wrote(updated)
	w.shown(key, want)
	w.metrics.condition(cache.ObjectName(key), string(cond.Status), cond.Reason)
	fields := []zap.Field{zap.String("status", string(cond.Status)), zap.String("reason", cond.Reason),
		zap.Int64("generation", tm.Generation), zap.String("message", cond.Message)}
	if fallback != nil {
		fields = append(fields, zap.String("fallbackStatus", string(fallback.Status)), zap.String("fallbackReason", fallback.Reason))
	}
	log.Info("published condition", fields...)
	if newsworthy(prev, cond) {
		eventType := corev1.EventTypeWarning
		if model.Reason(cond.Reason).Normal() {
			eventType = corev1.EventTypeNormal
		}
		w.recorder.Event(tm, eventType, cond.Reason, cond.Message)
	}
	return updated, nil
}

// newsworthy reports whether the Published condition's change from prev (nil: the map had
// none) to cond is recorded as an Event: only what an operator may act on. A change of
// reason to a Warning one (a conflict, a refusal, a fallback, an error) is; so is the
// first Normal condition after a Warning one (the problem is over), and the start of a
// ramp, a teardown or a retirement. The routine steps of every publication are not, at a
// cold start of thousands of maps least of all: a first Publishing or Published, and
// Publishing, Published and the end of a ramp following one another (the condition and
// its metrics say those; RampFinished marks a ramp's end).
func newsworthy(prev *metav1.Condition, cond metav1.Condition) bool {
	if prev != nil && prev.Reason == cond.Reason && prev.Status == cond.Status {
		return false
	}
	r := model.Reason(cond.Reason)
	switch {
	case !r.Normal():
		return true
	case prev != nil && prev.Reason != "" && !model.Reason(prev.Reason).Normal():
		return true
	default:
		return r != model.ReasonPublished && r != model.ReasonPublishing
	}
}

// applyConfiguration is the server-side apply request for want: only the publisher-owned
// status fields (the Published condition cond and the PublicationFallback condition
// fallback, nil when the map has none), at the resourceVersion the decision was made for
// (so a decision based on a stale read conflicts).
func applyConfiguration(tm *v1beta1.TrafficMap, want model.Status, cond metav1.Condition, fallback *metav1.Condition) *omeac.TrafficMapApplyConfiguration {
	if want.Held {
		// Nothing of the holder's (journal, gatewayRef, generation, PublicationFallback):
		// only the condition and status.published, which move together. It is applied
		// under the held field manager (heldManager), so it never removes a field the
		// publisher's own manager, which the holder may share, owns.
		return statusapply.ApplyFallback(tm, false, 0, nil, &cond, nil, nil)
	}
	journal := want.Journal
	if journal == nil {
		journal = tm.Status.Publisher
	}
	return statusapply.ApplyFallback(tm, want.Published, want.Observed, want.GatewayRef, &cond, fallback, journal)
}

// writeJournal writes journal as tm's claim journal (status.publisher), restating the
// other publisher-owned status fields as tm has them, and returns the map as stored. A
// stale tm conflicts (the caller reconciles again).
func (w *statusWriter) writeJournal(ctx context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error) {
	updated, err := w.api.ApplyStatus(ctx, statusapply.Apply(tm, tm.Status.Published, tm.Status.ObservedTrafficMapGeneration,
		tm.Status.GatewayRef, model.FindPublished(tm), journal))
	if err != nil {
		return tm, fmt.Errorf("apply trafficmap %s/%s claim journal: %w", tm.Namespace, tm.Name, err)
	}
	w.wrote(updated)
	return updated, nil
}

// replaceJournal writes journal as tm's claim journal in place of another publisher's (a
// map handed over by --take-over-from, or adopted: model.HolderOf), dropping everything of
// the other's (its claims and last positive plan), and returns the map as stored. A stale
// tm conflicts (the caller reconciles again).
func (w *statusWriter) replaceJournal(ctx context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error) {
	updated, err := w.api.ReplaceJournal(ctx, tm, journal)
	if err != nil {
		return tm, fmt.Errorf("replace trafficmap %s/%s claim journal of publisher %q: %w", tm.Namespace, tm.Name, tm.Status.Publisher.PublisherName, err)
	}
	w.wrote(updated)
	return updated, nil
}

// fail records a user error: Published False and an Event, PublicationFallback Unknown, no
// hot retry.
func (w *statusWriter) fail(ctx context.Context, tm *v1beta1.TrafficMap, ue *model.UserError, log *zap.Logger) (time.Duration, error) {
	_, _, err := w.write(ctx, tm, model.Failed(tm, ue), log)
	return 0, err
}

// event records a Normal Event on tm (only while leading, like every Event).
func (w *statusWriter) event(tm *v1beta1.TrafficMap, reason model.Reason, message string) {
	if w.recorder != nil {
		w.recorder.Event(tm, corev1.EventTypeNormal, string(reason), message)
	}
}
