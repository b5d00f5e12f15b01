package xds

import "time"

// pacer keeps the xDS rebuild to a share of one core in a storm of changes (a cold start,
// a fleet-wide drain), so that the API writes and the clients' updates keep their CPU, and
// each rebuild carries more changes (those that arrive meanwhile coalesce in the queue). A
// rebuild after a quiet period starts at once: the pacer is a leaky bucket that fills by
// rebuildCost times each rebuild's duration, drains with wall time, and pauses the next
// rebuild only for what exceeds rebuildBurst, at most maxRebuildPause.
type pacer struct {
	debt time.Duration
	last time.Time
}

const (
	rebuildCost     = 2 // in a storm, rebuilds take at most half a core
	rebuildBurst    = 500 * time.Millisecond
	maxRebuildPause = time.Second
)

// pause accounts for a rebuild that started at start and ended at end, and returns how
// long to wait before the next.
func (p *pacer) pause(start, end time.Time) time.Duration {
	if !p.last.IsZero() {
		p.debt = max(0, p.debt-start.Sub(p.last))
	}
	// rebuildCost times the rebuild's duration fills it; the rebuild's own time drains it.
	p.debt += (rebuildCost - 1) * end.Sub(start)
	p.last = end
	return min(max(0, p.debt-rebuildBurst), maxRebuildPause)
}
