package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The ordered teardown of a map the publisher's finalizer (model.Finalizer) holds, on the
// leader. Each step is decided from what is observed (the map, the sinks' confirmations),
// so a reconcile after a restart resumes where the last one stopped:
//
//	announce  Published False, reason Finalizing, before any sink moves
//	zeros     the map's plan at weight 0 (model.Zeroed) to every sink, which sets to 0 only
//	          what it still publishes for the map (model.Standing.Finalizing); wait until
//	          every sink confirmed it (the gateway accepted the route's zero generation, the
//	          relevant xDS clients ACKed), at most --teardown-timeout
//	removal   every sink removes what it published (model.Retiring: the route and Services,
//	          the xDS resources); wait until the xDS clients that held them ACKed their
//	          removal, at most --teardown-timeout
//	release   remove the finalizer (only it); the map goes, and the informer's delete
//	          event forgets it (reconciler.delete)
//
// Waiting never sleeps in a worker: a waiting map is queued again by the sinks' news
// (model.Updater), a route event, or after what is left of the timeout. A map that is
// deleted without the finalizer (the publisher never wrote for it) or whose claim journal
// names another publisher is removed at once, as a map that is gone (model.Finalizing).

// DefaultTeardownTimeout is the CLI's --teardown-timeout.
const DefaultTeardownTimeout = 30 * time.Second

// teardownStep is a step of the teardown that waits.
type teardownStep int

const (
	stepZeros teardownStep = iota
	stepRemoval
)

// String names the step in logs and Events.
func (s teardownStep) String() string {
	if s == stepZeros {
		return "weights 0"
	}
	return "removal"
}

// label is the step's metric label value.
func (s teardownStep) label() string {
	if s == stepZeros {
		return "zeros"
	}
	return "removal"
}

// The causes of a teardown step that ran out of --teardown-timeout (metric label values).
const (
	causeUnconfirmed = "unconfirmed" // the sinks did not confirm the step in time
	causeFailed      = "failed"      // the step's tries failed for the whole timeout
)

// teardownClock times the steps of the maps being torn down: each step waits at most
// timeout from when this process first saw the map at that step, and fails (a sink's
// Apply, Retire or Delete returns an error, retried with backoff) at most timeout from its
// first failed try, so neither a sink that never confirms nor one that fails on every try
// holds the finalizer forever. It is the pipeline's only memory of a teardown, kept per map
// in this process's memory (never on the cached map): it survives the map's requeues and
// retries, and is dropped when the teardown ends or the map is gone. After a restart (or a
// new leader) each step may wait, or fail, its whole timeout again. Safe for concurrent
// use.
type teardownClock struct {
	timeout time.Duration
	now     func() time.Time

	mu    sync.Mutex
	times map[types.NamespacedName]*teardownTimes
}

// teardownTimes is when this process first saw a map at each step, and first saw a try of
// each step fail (zero: not yet), and whether each step was passed after its timeout (it
// is then neither tried nor reported again).
type teardownTimes struct {
	seen, failed [2]time.Time
	passed       [2]bool
}

func newTeardownClock(timeout time.Duration) *teardownClock {
	return &teardownClock{timeout: timeout, now: time.Now, times: map[types.NamespacedName]*teardownTimes{}}
}

// left is how long the map's step may still wait (0 or less: the wait is over).
func (c *teardownClock) left(key types.NamespacedName, step teardownStep) time.Duration {
	return c.mark(key, func(t *teardownTimes) *time.Time { return &t.seen[step] })
}

// failing records a failed try of the map's step and returns how long its tries may still
// fail (0 or less: over), counted from the first failed try.
func (c *teardownClock) failing(key types.NamespacedName, step teardownStep) time.Duration {
	return c.mark(key, func(t *teardownTimes) *time.Time { return &t.failed[step] })
}

// pass records that the map's step was passed after its timeout; it reports whether the
// step was already passed.
func (c *teardownClock) pass(key types.NamespacedName, step teardownStep) (already bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.times[key]
	if t == nil {
		t = &teardownTimes{}
		c.times[key] = t
	}
	already, t.passed[step] = t.passed[step], true
	return already
}

// passed reports whether the map's step was passed after its timeout.
func (c *teardownClock) passed(key types.NamespacedName, step teardownStep) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.times[key]
	return t != nil && t.passed[step]
}

// mark sets the time field picks out of key's times to now when it is not set yet, and
// returns what is left of the timeout from it.
func (c *teardownClock) mark(key types.NamespacedName, field func(*teardownTimes) *time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	t := c.times[key]
	if t == nil {
		t = &teardownTimes{}
		c.times[key] = t
	}
	at := field(t)
	if at.IsZero() {
		*at = now
	}
	return c.timeout - now.Sub(*at)
}

// forget drops what the clock remembers of the map.
func (c *teardownClock) forget(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.times, key)
	c.mu.Unlock()
}

// teardown runs the ordered teardown of tm, being deleted and held by the finalizer for
// this publisher (model.Finalizing). It returns how long to wait before looking again while
// a step waits, and an error only for transient failures.
func (r *reconciler) teardown(ctx context.Context, key cache.ObjectName, tm *v1beta1.TrafficMap, log *zap.Logger) (time.Duration, error) {
	tm, _, err := r.status.write(ctx, tm, model.NotPublished(tm, model.ReasonFinalizing, model.FinalizingMessage, nil), log)
	if err != nil {
		return 0, err
	}
	t := tearing{r: r, tm: tm, key: key, log: log}
	done, hold, err := t.zeros(ctx)
	if err != nil || !done {
		return hold, err
	}
	if done, hold, err = t.removal(ctx); err != nil || !done {
		return hold, err
	}
	if _, err := r.status.api.RemoveFinalizer(ctx, tm); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("remove finalizer %s from trafficmap %s: %w", model.Finalizer, key, err)
	}
	r.teardowns.forget(types.NamespacedName(key))
	r.status.event(tm, model.ReasonFinalized, fmt.Sprintf("published state removed; finalizer %s removed", model.Finalizer))
	log.Info("teardown finished; finalizer removed", zap.String("finalizer", model.Finalizer))
	return 0, nil
}

// tearing is one reconcile's walk of a map's teardown: the reconciler, the map and its
// key, and the reconcile's logger.
type tearing struct {
	r   *reconciler
	tm  *v1beta1.TrafficMap
	key cache.ObjectName
	log *zap.Logger
}

// zeros hands every sink the map's zero plan and reports whether the step is over: every
// sink confirmed it, or the timeout passed, or no zero plan can be made or one sink
// refuses it (then nothing is set to 0 and the removal follows).
func (t tearing) zeros(ctx context.Context) (bool, time.Duration, error) {
	r, tm, log := t.r, t.tm, t.log
	if r.teardowns.passed(types.NamespacedName(t.key), stepZeros) {
		return true, 0, nil
	}
	left := r.teardowns.left(types.NamespacedName(t.key), stepZeros)
	zero, err := r.zeroPlan(tm)
	var ue *model.UserError
	switch {
	case errors.As(err, &ue):
		log.Info("no plan at weight 0 can be made; removing the published state at once", zap.String("reason", string(ue.Reason)), zap.String("message", ue.Message))
		return true, 0, nil
	case err != nil:
		return false, 0, err
	}
	if refused := refusal(r.sinks, zero); refused != nil {
		log.Info("a sink refuses the plan at weight 0; removing the published state at once", zap.String("sink", refused.Sink), zap.String("message", refused.Message))
		return true, 0, nil
	}
	st := model.Standing{PublishedBefore: true, Finalizing: true}
	confs := make([]model.Confirmation, 0, len(r.sinks))
	var errs []error
	for _, s := range r.sinks {
		c, err := s.Apply(ctx, zero, st)
		r.metrics.routeWritten(c.Writes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s sink: %w", s.Name(), err))
			continue
		}
		if c.Writes > 0 {
			log.Info("sink wrote weights 0", zap.String("sink", s.Name()), zap.Int("writes", c.Writes))
		}
		c.Sink = s.Name()
		confs = append(confs, c)
	}
	if len(errs) > 0 {
		return t.failed(stepZeros, errors.Join(errs...))
	}
	return t.waited(stepZeros, confs, left)
}

// removal has every sink remove what it published for the map (model.Retiring, else
// Delete) and the record, and reports whether the step is over: every removal confirmed,
// or the timeout passed.
func (t tearing) removal(ctx context.Context) (bool, time.Duration, error) {
	r, key, log := t.r, t.key, t.log
	if r.teardowns.passed(types.NamespacedName(key), stepRemoval) {
		return true, 0, nil
	}
	left := r.teardowns.left(types.NamespacedName(key), stepRemoval)
	confs := make([]model.Confirmation, 0, len(r.sinks))
	var errs []error
	for _, s := range r.sinks {
		var c model.Confirmation
		var err error
		if rs, ok := s.(model.Retiring); ok {
			c, err = rs.Retire(ctx, types.NamespacedName(key))
		} else {
			c.Writes, err = s.Delete(ctx, key.Namespace, key.Name)
			c.State = model.InPlace
		}
		if c.Writes > 0 {
			log.Info("removed published objects of a deleted trafficmap", zap.String("sink", s.Name()), zap.Int("objects", c.Writes))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s sink: %w", s.Name(), err))
			continue
		}
		c.Sink = s.Name()
		confs = append(confs, c)
	}
	if r.record != nil {
		if _, err := r.record.delete(ctx, key.Namespace, key.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return t.failed(stepRemoval, errors.Join(errs...))
	}
	return t.waited(stepRemoval, confs, left)
}

// failed judges a step whose try failed with err: the error, retried with backoff, until
// --teardown-timeout passed since the step's first failed try; then the failure is logged,
// recorded as a Warning Event and counted (teardownTimedOut, cause "failed"), and the
// teardown goes on as after a wait that ran out: past the zeros to the removal, past the
// removal to the finalizer's release. What a failing sink still holds then stays (a route
// and its Services go with the map through their ownerReferences).
func (t tearing) failed(step teardownStep, err error) (bool, time.Duration, error) {
	r, tm, log := t.r, t.tm, t.log
	key := types.NamespacedName(t.key)
	if r.teardowns.failing(key, step) > 0 {
		return false, 0, err
	}
	if r.teardowns.pass(key, step) {
		return true, 0, nil
	}
	msg := fmt.Sprintf("%s failed on every try for --teardown-timeout %s (%v); going on", step, r.teardowns.timeout, err)
	log.Warn("teardown step failed until the timeout; going on", zap.String("step", step.String()), zap.Error(err))
	r.metrics.teardownTimedOut(step.label(), causeFailed)
	if r.status.recorder != nil {
		r.status.recorder.Event(tm, corev1.EventTypeWarning, string(model.ReasonTeardownTimedOut), msg)
	}
	return true, 0, nil
}

// waited judges a step from the sinks' confirmations (model.TeardownWait): over, or how
// long it may still wait (the sinks' news or a route event usually come first). A wait
// that ran out is logged and recorded as a Warning Event, and the teardown goes on.
func (t tearing) waited(step teardownStep, confs []model.Confirmation, left time.Duration) (bool, time.Duration, error) {
	r, tm, log := t.r, t.tm, t.log
	done, timedOut, waiting := model.TeardownWait(confs, left <= 0)
	if timedOut && !r.teardowns.pass(types.NamespacedName(t.key), step) {
		msg := fmt.Sprintf("%s not confirmed within --teardown-timeout %s (%s sink: %s); going on", step, r.teardowns.timeout, waiting.Sink, waiting.Message)
		log.Warn("teardown wait timed out", zap.String("step", step.String()), zap.String("sink", waiting.Sink), zap.String("message", waiting.Message))
		r.metrics.teardownTimedOut(step.label(), causeUnconfirmed)
		if r.status.recorder != nil {
			r.status.recorder.Event(tm, corev1.EventTypeWarning, string(model.ReasonTeardownTimedOut), msg)
		}
	}
	if !done {
		log.Debug("teardown waits", zap.String("step", step.String()), zap.String("sink", waiting.Sink), zap.String("message", waiting.Message))
		return false, left, nil
	}
	return true, 0, nil
}

// zeroPlan is the plan of tm, a map being torn down, at weight 0 (model.TeardownPlan), made
// as every plan is (gather, plan): the same names as it publishes, but for those another map
// now claims (a deleted map yields them at once). When that plan cannot be made (its
// InferenceService is gone, an input fails) it is made from the map alone
// (model.FallbackTeardownPlan); a *model.UserError says why not even that can be made.
func (r *reconciler) zeroPlan(tm *v1beta1.TrafficMap) (*model.Plan, error) {
	g, err := r.inputs.gather(tm)
	var pl *model.Planned
	if err == nil {
		g.Evidence = keeper(r).heldEvidence(tm, g.Evidence, g.Policy) // the map as its holder plans it (holders.go)
		pl, err = r.plan(g)
	}
	var ue *model.UserError
	switch {
	case errors.As(err, &ue): // made from the map alone, when its entries allow
		zero, ferr := model.FallbackTeardownPlan(tm, keeper(r).heldEvidence(tm, r.inputs.evidence(tm), r.claimPolicy).Journaled)
		if ferr != nil {
			return nil, &model.UserError{Reason: ue.Reason, Message: ue.Message + "; " + ferr.Error()}
		}
		return &zero, nil
	case err != nil:
		return nil, err
	}
	p := pl.Plan
	if model.HolderOf(tm, keeper(r).publishers()).Replaces() {
		p = model.ReplacedNames(p) // a map handed over before it was claimed: its route's names
	}
	zero := model.TeardownPlan(p, g.Claims)
	return &zero, nil
}

// addFinalizer adds model.Finalizer to tm with status's API before the pipeline's first
// external write for it, and returns the map as stored (the cache is behind it: the status
// writer remembers the write, so the next reconcile reads the live map).
func addFinalizer(ctx context.Context, status *statusWriter, tm *v1beta1.TrafficMap, log *zap.Logger) (*v1beta1.TrafficMap, error) {
	updated, err := status.api.AddFinalizer(ctx, tm)
	if err != nil {
		return tm, fmt.Errorf("add finalizer %s to trafficmap %s/%s: %w", model.Finalizer, tm.Namespace, tm.Name, err)
	}
	status.wrote(updated)
	log.Info("finalizer added", zap.String("finalizer", model.Finalizer))
	return updated, nil
}
