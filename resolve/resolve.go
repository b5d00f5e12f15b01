package resolve

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Config configures a [Cache]. Zero fields take their defaults.
type Config struct {
	Interval       time.Duration    // re-resolve period when the lookup gives no TTL (default 30s), clamped to MinTTL..MaxTTL
	MinTTL, MaxTTL time.Duration    // floor and ceiling applied to a TTL (defaults 5s and 5m)
	Timeout        time.Duration    // per lookup (default 5s)
	Workers        int              // concurrent lookups in Run (default 8)
	Lookup         LookupFunc       // nil: [DNSLookup]
	Now            func() time.Time // nil: time.Now (tests inject a clock)
	Log            *zap.Logger      // nil: no logging; logs when a host starts failing and when hosts are over MaxHosts
}

// LookupFunc resolves host (valid, lowercase, without the trailing dot); ttl 0
// means unknown. It must return when ctx ends.
type LookupFunc func(ctx context.Context, host string) (addrs []netip.Addr, ttl time.Duration, err error)

// Error is a failed resolution of Host since Since (the time of the first
// failure in a row); [Cache.Resolve] still returns the last good addresses with
// it. Err is the latest lookup's error.
type Error struct {
	Host  string
	Since time.Time
	Err   error
}

// Error says which host fails, since when and why.
func (e *Error) Error() string {
	return fmt.Sprintf("resolve %s: failing since %s: %v", e.Host, e.Since.UTC().Format(time.RFC3339), e.Err)
}

// Unwrap returns the latest lookup's error.
func (e *Error) Unwrap() error { return e.Err }

// Cache keeps the addresses of hostnames; see the package documentation for its
// contract. Create it with [New].
type Cache struct {
	cfg     Config
	changed func(owners []string)
	wake    chan struct{} // capacity 1: a tracked host is due before wakeAt
	notify  chan struct{} // capacity 1: pending has hosts
	after   func(time.Duration) <-chan time.Time

	mu      sync.Mutex // guards hosts, owned, pending, wakeAt and every *entry
	hosts   map[string]*entry
	owned   map[string][]string // owner -> the hosts it tracks, sorted
	pending map[string]struct{} // hosts whose change Run has not reported yet
	wakeAt  time.Time           // when Run wakes next; zero: it rescans anyway
}

// entry is one host's state; c.mu guards it.
type entry struct {
	addrs  []netip.Addr // last good addresses; nil before the first success; never mutated
	err    *Error       // the latest lookup failed; never mutated (replaced)
	tried  bool         // a lookup finished
	next   time.Time    // when Run refreshes it (tracked) or it is stale (untracked)
	fails  int          // consecutive failures
	owners map[string]struct{}
	call   chan struct{} // closed when the lookup in flight finishes; nil when none
	queued bool          // Run has queued a refresh not started yet
}

// New returns a Cache. changed (nil: none) is called by [Cache.Run] with the
// sorted owners of a host whose addresses changed or which started or stopped
// failing; it should only enqueue work.
func New(cfg Config, changed func(owners []string)) *Cache {
	if changed == nil {
		changed = func([]string) {}
	}
	cfg = withDefaults(cfg)
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Cache{
		cfg:     cfg,
		changed: changed,
		wake:    make(chan struct{}, 1),
		notify:  make(chan struct{}, 1),
		after:   time.After,
		hosts:   map[string]*entry{},
		owned:   map[string][]string{},
		pending: map[string]struct{}{},
	}
}

// Resolve returns host's addresses: an IP literal as it is (never cached or
// tracked); a known host's last good addresses (sorted, deduplicated) and a
// non-nil [*Error] when the latest lookup failed; an unknown host is looked up
// now (concurrent callers for one host share one lookup) and remembered. Empty
// addrs with [*Error]: never resolved. An invalid host or a full cache is an
// error that is not an [*Error]; so is ctx ending while the lookup runs.
func (c *Cache) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, ok, err := literal(host); ok {
		if err != nil {
			return nil, err
		}
		return []netip.Addr{a}, nil
	}
	key, err := canonical(host)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e, err := c.entryLocked(key)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if e.tried && (e.call != nil || len(e.owners) > 0 || c.cfg.Now().Before(e.next)) {
		defer c.mu.Unlock()
		return e.result(key)
	}
	done := e.call
	if done == nil {
		// The lookup is shared, so one caller's ctx does not cancel it; Timeout
		// bounds it.
		done = make(chan struct{})
		e.call = done
		go c.lookup(context.WithoutCancel(ctx), key, e)
	}
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("resolve %s: %w", key, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.result(key)
}

// entryLocked returns key's entry, adding it when there is room.
func (c *Cache) entryLocked(key string) (*entry, error) {
	if e := c.hosts[key]; e != nil {
		return e, nil
	}
	if len(c.hosts) >= MaxHosts {
		c.evictStaleLocked(c.cfg.Now())
	}
	if len(c.hosts) >= MaxHosts {
		return nil, fmt.Errorf("resolve %s: %w: %d hosts known", key, ErrTooManyHosts, MaxHosts)
	}
	e := &entry{owners: map[string]struct{}{}}
	c.hosts[key] = e
	return e, nil
}

// result is e's addresses (a copy) and its error; c.mu is held.
func (e *entry) result(key string) ([]netip.Addr, error) {
	if !e.tried {
		return nil, fmt.Errorf("resolve %s: %w", key, errCanceled)
	}
	addrs := slices.Clone(e.addrs)
	if e.err != nil {
		return addrs, e.err
	}
	return addrs, nil
}

// lookup runs the lookup e.call stands for, records its result and closes
// e.call. It holds c.mu only to record.
func (c *Cache) lookup(parent context.Context, key string, e *entry) {
	ctx, cancel := context.WithTimeout(parent, c.cfg.Timeout)
	addrs, ttl, err := c.cfg.Lookup(ctx, key)
	cancel()
	addrs = normalize(addrs)
	if err == nil && len(addrs) == 0 {
		err = ErrNoAddresses
	}
	c.mu.Lock()
	if parent.Err() == nil { // a lookup cut short by Run ending says nothing about the host
		c.recordLocked(key, e, addrs, ttl, err)
	}
	close(e.call)
	e.call = nil
	c.mu.Unlock()
}

// recordLocked records a lookup's result in e; c.mu is held.
func (c *Cache) recordLocked(key string, e *entry, addrs []netip.Addr, ttl time.Duration, err error) {
	now := c.cfg.Now()
	wasFailing, old, first := e.err != nil, e.addrs, !e.tried
	if err != nil {
		e.fails++
		since := now
		if e.err != nil {
			since = e.err.Since
		}
		e.err = &Error{Host: key, Since: since, Err: err}
		e.next = now.Add(retryAfter(c.cfg, e.fails))
		if !wasFailing {
			c.cfg.Log.Info("hostname resolution failing, keeping the last addresses",
				zap.String("host", key), zap.Int("addresses", len(e.addrs)), zap.Error(err))
		}
	} else {
		e.fails, e.err, e.addrs = 0, nil, addrs
		e.next = now.Add(refreshAfter(c.cfg, ttl))
	}
	e.tried = true
	if c.hosts[key] != e || len(e.owners) == 0 {
		return // forgotten, or Run does not refresh it
	}
	c.scheduleLocked(e.next)
	if !first && (wasFailing != (e.err != nil) || !slices.Equal(old, e.addrs)) {
		c.pending[key] = struct{}{}
		signal(c.notify)
	}
}

// scheduleLocked wakes Run when a tracked host is due at next, before Run
// would wake anyway; c.mu is held.
func (c *Cache) scheduleLocked(next time.Time) {
	if c.wakeAt.IsZero() || next.Before(c.wakeAt) {
		signal(c.wake)
	}
}

// signal sends on a channel of capacity 1 without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Track sets the hosts owner (a map key "ns/name") uses; hosts no owner uses are
// forgotten (no more refresh). Track(owner, nil) drops the owner. IP literals
// and invalid hosts are ignored (Resolve reports the latter); hosts past
// [MaxHosts] are not tracked (Resolve reports them).
func (c *Cache) Track(owner string, hosts []string) {
	want := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if _, ok, _ := literal(h); ok {
			continue
		}
		if key, err := canonical(h); err == nil {
			want = append(want, key)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.owned[owner] {
		if _, found := slices.BinarySearch(want, h); !found {
			c.untrackLocked(owner, h)
		}
	}
	kept, skipped := want[:0], 0
	for _, h := range want {
		e, err := c.entryLocked(h)
		if err != nil {
			skipped++
			continue
		}
		if len(e.owners) == 0 {
			c.scheduleLocked(e.next) // newly tracked: Run refreshes it from now on
		}
		e.owners[owner] = struct{}{}
		kept = append(kept, h)
	}
	if skipped > 0 {
		c.cfg.Log.Error("too many hosts, not tracking some", zap.String("owner", owner),
			zap.Int("skipped", skipped), zap.Int("max", MaxHosts))
	}
	if len(kept) == 0 {
		delete(c.owned, owner)
	} else {
		c.owned[owner] = slices.Clip(kept)
	}
}

// untrackLocked removes owner from host and forgets host when no owner is left.
func (c *Cache) untrackLocked(owner, host string) {
	e := c.hosts[host]
	if e == nil {
		return
	}
	delete(e.owners, owner)
	if len(e.owners) == 0 {
		delete(c.hosts, host)
		delete(c.pending, host)
	}
}

// evictStaleLocked forgets the untracked hosts that are stale at now and have
// no lookup in flight; c.mu is held.
func (c *Cache) evictStaleLocked(now time.Time) {
	for key, e := range c.hosts {
		if len(e.owners) == 0 && e.call == nil && (!e.tried || !now.Before(e.next)) {
			delete(c.hosts, key)
		}
	}
}
