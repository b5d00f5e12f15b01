package publish

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// workers take the work queue's keys and run the pipeline on them, on every replica. While
// this replica leads they run all of it (reconciler.reconcile); otherwise only its first
// floors (reconciler.serve), which keep the sinks that serve on every replica (the xDS
// sink) current without writing anything. Event handlers only add keys; the workers
// alone take them. lead is set while this replica leads; reconciled is written by the
// workers and read by requeue.
type workers struct {
	log     *zap.Logger
	n       int
	queue   priorityqueue.PriorityQueue[cache.ObjectName]
	stop    sync.Once
	rec     *reconciler
	metrics *metrics
	// maps tells whether a map is cached (passed).
	maps interface {
		trafficMap(namespace, name string) (*v1beta1.TrafficMap, error)
	}
	// reconciled holds the keys of the cached maps reconciled at least once since this
	// replica started (see requeue).
	reconciled sync.Map
	// lead is the context of the current term while this replica leads, nil otherwise.
	lead atomic.Pointer[context.Context]
}

// add queues key at pr.
func (w *workers) add(pr priority, key cache.ObjectName) {
	n := int(pr)
	w.queue.AddWithOpts(priorityqueue.AddOpts{Priority: &n}, key)
}

// requeue queues key for a sink whose consumers said something about the map (an xDS
// client's ACK, a replica's report): at normalPriority once the map has been reconciled
// since this replica started, at bulkPriority before (such news cannot complete a map that
// is not published yet, and at a cold start every map hears from every new client at once:
// at normal priority that would queue the whole fleet ahead of the maps whose route the
// gateway has just accepted). Only the leader judges, so a follower drops such news (the
// leader's first term queues every map).
func (w *workers) requeue(key cache.ObjectName) {
	if w.leading() == nil {
		return
	}
	pr := bulkPriority
	if _, ok := w.reconciled.Load(key); ok {
		pr = normalPriority
	}
	w.add(pr, key)
}

// passed records that key was reconciled (requeue), or forgets it when the map is gone.
func (w *workers) passed(key cache.ObjectName) {
	if tm, err := w.maps.trafficMap(key.Namespace, key.Name); err == nil && tm != nil {
		w.reconciled.Store(key, struct{}{})
		return
	}
	w.reconciled.Delete(key)
}

// shutDown shuts the queue down; it may be called more than once (the queue's own ShutDown
// may not).
func (w *workers) shutDown() { w.stop.Do(w.queue.ShutDown) }

// leading is the current term's context while this replica leads, nil otherwise.
func (w *workers) leading() context.Context {
	if c := w.lead.Load(); c != nil && (*c).Err() == nil {
		return *c
	}
	return nil
}

// leadTerm marks this replica leading for the term lctx, calls begin, and returns when the
// term ends.
func (w *workers) leadTerm(lctx context.Context, begin func()) {
	w.lead.Store(&lctx)
	begin()
	<-lctx.Done()
	w.lead.CompareAndSwap(&lctx, nil)
}

// run runs n workers until the queue is shut.
func (w *workers) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range w.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.processNext(ctx) {
			}
		}()
	}
	wg.Wait()
}

// processNext runs the pipeline for one key: all of it while leading, its first floors
// otherwise; false once the queue is shut.
func (w *workers) processNext(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	log := w.log.With(zap.String("trafficmap", key.String()))
	lctx := w.leading()
	if lctx == nil {
		if err := w.rec.serve(key); err != nil {
			log.Info("plan not served; retrying with backoff", zap.Error(err))
			w.queue.AddRateLimited(key)
			return true
		}
		w.queue.Forget(key)
		return true
	}
	hold, err := w.rec.reconcile(lctx, key, log)
	w.passed(key)
	w.metrics.reconciled(err)
	if err != nil {
		level := zap.InfoLevel
		switch {
		case apierrors.IsConflict(err):
			level = zap.DebugLevel // a cache behind our own last write; the retry reads it
		case apierrors.IsForbidden(err):
			level = zap.ErrorLevel // an RBAC gap: say so loudly, it does not heal by itself
		}
		log.Log(level, "reconcile failed; retrying with backoff", zap.Error(err), zap.Int("retries", w.queue.NumRequeues(key)))
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	if hold > 0 {
		w.queue.AddAfter(key, hold)
	}
	return true
}

// listen turns what the sink tells (model.Updater) into queue adds until ctx is done.
func (w *workers) listen(ctx context.Context, u model.Updater) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.Updates():
			for _, key := range u.Updated() {
				w.requeue(cache.NewObjectName(key.Namespace, key.Name))
			}
		}
	}
}

// prime hands every key's plan to the sinks that serve on every replica before they start
// (reconciler.serve), so the first snapshot they serve is complete: for state-of-the-world
// xDS a missing resource means a deleted one.
func (w *workers) prime(keys []cache.ObjectName) {
	for _, key := range keys {
		if err := w.rec.serve(key); err != nil {
			w.log.Info("plan not served before the start; the worker retries", zap.String("trafficmap", key.String()), zap.Error(err))
		}
	}
}
