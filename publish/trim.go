package publish

import (
	"context"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// backlogQuiet is how long the work queue must stay empty before the start's backlog
// counts as done (returnBacklogMemory): longer than the xDS codec keeps its large buffers
// after the last large response (10 s), so they are released first.
const backlogQuiet = 15 * time.Second

// returnBacklogMemory hands the memory the start's backlog left behind back to the system,
// once: when pending (the work queue's length) has been 0 for quiet, it calls free
// (debug.FreeOSMemory: a collection, then every free page returned). A cold start of the
// whole fleet peaks far above what a steady fleet holds, and Go otherwise returns the
// difference over minutes; the one collection costs what one of the start's many did.
// It returns after freeing, or when ctx is done.
func returnBacklogMemory(ctx context.Context, log *zap.Logger, quiet time.Duration, pending func() int, free func()) {
	tick := time.NewTicker(quiet / 5)
	defer tick.Stop()
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if pending() > 0 {
				since = now
				continue
			}
			if now.Sub(since) >= quiet {
				free()
				log.Info("start's backlog done; returned its memory to the system", zap.Duration("quiet", quiet))
				return
			}
		}
	}
}

// freeOSMemory is returnBacklogMemory's free in production.
func freeOSMemory() { debug.FreeOSMemory() }
