package resolve

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// Run refreshes every tracked host when its TTL (clamped) or Interval is due
// until ctx ends; when a host's address set changes, or it starts or stops
// failing, it calls changed with the sorted owners of that host. A lookup that
// returns zero addresses and no error counts as a failure (never empty a
// serving backend). Lookups run on [Config.Workers] goroutines; Run returns
// when ctx has ended and all of them have returned. Call Run once.
func (c *Cache) Run(ctx context.Context) {
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for key := range jobs {
				c.refresh(ctx, key)
			}
		})
	}
	defer wg.Wait()
	defer close(jobs)
	var queue []string
	var wait <-chan time.Time
	rescan := true
	for {
		if rescan && len(queue) == 0 {
			var d time.Duration
			queue, d = c.due(c.cfg.Now())
			wait, rescan = nil, false
			if len(queue) == 0 {
				wait = c.after(d)
			}
		}
		var send chan<- string
		var head string
		if len(queue) > 0 {
			send, head = jobs, queue[0]
		}
		select {
		case <-ctx.Done():
			return
		case send <- head:
			queue = queue[1:]
			rescan = rescan || len(queue) == 0
		case <-c.notify:
			c.deliver()
		case <-c.wake:
			rescan = true
		case <-wait:
			rescan = true
		}
	}
}

// due marks and returns, sorted, the tracked hosts due at now with no lookup in
// flight or queued, forgets untracked hosts that are stale, and returns how long
// until the next tracked host is due (MaxTTL when none is), which it records in
// c.wakeAt when nothing is due.
func (c *Cache) due(now time.Time) ([]string, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictStaleLocked(now)
	var queue []string
	wait := c.cfg.MaxTTL
	for key, e := range c.hosts {
		switch {
		case e.call != nil || e.queued || len(e.owners) == 0:
		case !now.Before(e.next):
			e.queued = true
			queue = append(queue, key)
		default:
			wait = min(wait, e.next.Sub(now))
		}
	}
	slices.Sort(queue)
	c.wakeAt = time.Time{}
	if len(queue) == 0 {
		c.wakeAt = now.Add(wait)
	}
	return queue, wait
}

// refresh looks key up if it is still tracked and no lookup is in flight.
func (c *Cache) refresh(ctx context.Context, key string) {
	c.mu.Lock()
	e := c.hosts[key]
	if e == nil {
		c.mu.Unlock()
		return
	}
	e.queued = false
	if e.call != nil || len(e.owners) == 0 {
		c.mu.Unlock()
		return
	}
	e.call = make(chan struct{})
	c.mu.Unlock()
	c.lookup(ctx, key, e)
}

// deliver calls changed, outside c.mu, with the sorted owners of every host
// whose change is pending, in host order.
func (c *Cache) deliver() {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	var calls [][]string
	for _, key := range slices.Sorted(maps.Keys(c.pending)) {
		if e := c.hosts[key]; e != nil && len(e.owners) > 0 {
			calls = append(calls, slices.Sorted(maps.Keys(e.owners)))
		}
	}
	clear(c.pending)
	c.mu.Unlock()
	for _, owners := range calls {
		c.changed(owners)
	}
}
