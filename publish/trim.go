package publish

import (
	"context"
	"runtime/debug"
	runtimemetrics "runtime/metrics"
	"time"

	"go.uber.org/zap"
)

// backlogQuiet is how long the work queue must stay empty before a burst of work (the
// cold start's backlog, a fleet drain) counts as done (returnIdleMemory): longer than the
// xDS codec keeps its large buffers after the last large response (10 s), so they are
// released first.
const backlogQuiet = 15 * time.Second

// Thresholds of returnIdleMemory: it returns the heap's free memory when that is at least
// idleFloor and a quarter of the heap's objects, at most once per idleEvery.
const (
	idleFloor = 32 << 20
	idleEvery = 2 * backlogQuiet
)

// heapIdle reports the heap's free memory not yet returned to the system and the bytes of
// its objects (live and not yet swept), as returnIdleMemory reads them.
type heapIdle func() (free, objects uint64)

// returnIdleMemory hands the memory a burst of work left behind back to the system: the
// first time pending (the work queue's length) has been 0 for quiet (the start's backlog
// done), and after that each time it has and idle says the heap holds free memory worth
// returning (idleFloor and a quarter of its objects), it calls
// free (debug.FreeOSMemory: a collection, then every free page returned), at most once
// per every. A cold start of the whole fleet, or the xDS responses that follow it, peak
// far above what a steady fleet holds, and Go otherwise returns the difference over
// minutes; one collection costs what one of the burst's many did. It returns when ctx is
// done.
func returnIdleMemory(ctx context.Context, log *zap.Logger, quiet, every time.Duration, pending func() int, idle heapIdle, free func()) {
	tick := time.NewTicker(quiet / 5)
	defer tick.Stop()
	since, last := time.Now(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			now := time.Now()
			if pending() > 0 {
				since = now
				continue
			}
			if now.Sub(since) < quiet || (!last.IsZero() && now.Sub(last) < every) {
				continue
			}
			if f, objects := idle(); !last.IsZero() && (f < idleFloor || f < objects/4) {
				continue // the first quiet moment (the start's backlog done) always frees
			}
			free()
			last = time.Now()
			log.Info("work queue quiet; returned the heap's free memory to the system", zap.Duration("quiet", quiet))
		}
	}
}

// freeOSMemory is returnIdleMemory's free in production.
func freeOSMemory() { debug.FreeOSMemory() }

// runtimeHeapIdle is returnIdleMemory's idle in production, from runtime/metrics.
func runtimeHeapIdle() (free, objects uint64) {
	s := []runtimemetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	runtimemetrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
