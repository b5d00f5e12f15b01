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
	Interval       time.Duration // re-resolve period when the lookup gives no TTL (default 30s), clamped to MinTTL..MaxTTL
	MinTTL, MaxTTL time.Duration // floor and ceiling applied to a TTL (defaults 5s and 5m)
	Timeout        time.Duration // per lookup (default 5s)
	Workers        int           // concurrent lookups in Run (default 8)
	Lookup         LookupFunc    // nil: [DNSLookup]
	Now            func() time.Time
	Log            *zap.Logger // nil: no logging
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
	wake    chan struct{} // capacity 1: the schedule changed (Track, a lookup finished)
	after   func(time.Duration) <-chan time.Time

	mu      sync.Mutex // guards hosts, owned, pending and every *entry
	hosts   map[string]*entry
	owned   map[string][]string // owner -> the hosts it tracks, sorted
	pending map[string]struct{} // hosts whose change Run has not reported yet
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
	done, start := e.call, e.call == nil
	if start {
		done = make(chan struct{})
		e.call = done
	}
	c.mu.Unlock()
	if start {
		c.lookup(context.WithoutCancel(ctx), key, e)
	} else {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("resolve %s: %w", key, ctx.Err())
		}
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
	c.signal()
}

// recordLocked records a lookup's result in e; c.mu is held.
func (c *Cache) recordLocked(key string, e *entry, addrs []netip.Addr, ttl time.Duration, err error) {
	now := c.cfg.Now()
	wasFailing, old := e.err != nil, e.addrs
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
	if e.tried && (wasFailing != (e.err != nil) || !slices.Equal(old, e.addrs)) && c.hosts[key] == e {
		c.pending[key] = struct{}{}
	}
	e.tried = true
}

// signal wakes Run without blocking.
func (c *Cache) signal() {
	select {
	case c.wake <- struct{}{}:
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
	c.signal()
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
