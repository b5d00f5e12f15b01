package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is an injected time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// answer is one scripted lookup result.
type answer struct {
	addrs []string
	ttl   time.Duration
	err   error
}

// fakeDNS answers each host from its script, repeating the last answer, and
// counts the lookups; calls (when set) receives each looked-up host.
type fakeDNS struct {
	mu     sync.Mutex
	script map[string][]answer
	count  map[string]int
	calls  chan string
}

func newFakeDNS(script map[string][]answer) *fakeDNS {
	return &fakeDNS{script: script, count: map[string]int{}}
}

func (f *fakeDNS) Lookup(_ context.Context, host string) ([]netip.Addr, time.Duration, error) {
	f.mu.Lock()
	n := f.count[host]
	f.count[host]++
	answers := f.script[host]
	f.mu.Unlock()
	if f.calls != nil {
		f.calls <- host
	}
	if len(answers) == 0 {
		return nil, 0, fmt.Errorf("no such host %s", host)
	}
	a := answers[min(n, len(answers)-1)]
	return addrs(a.addrs...), a.ttl, a.err
}

func (f *fakeDNS) Count(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[host]
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// recorder collects the changed calls.
type recorder struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *recorder) changed(owners []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, owners)
}

func (r *recorder) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func newTestCache(t *testing.T, cfg Config, dns *fakeDNS) (*Cache, *clock, *recorder) {
	t.Helper()
	clk, rec := newClock(), &recorder{}
	cfg.Lookup, cfg.Now = dns.Lookup, clk.Now
	return New(cfg, rec.changed), clk, rec
}

func TestDelays(t *testing.T) {
	cfg := withDefaults(Config{})
	tests := []struct {
		name string
		cfg  Config
		ttl  time.Duration
		want time.Duration
	}{
		{name: "no TTL uses the interval", cfg: cfg, ttl: 0, want: 30 * time.Second},
		{name: "TTL within bounds", cfg: cfg, ttl: 42 * time.Second, want: 42 * time.Second},
		{name: "TTL below the floor", cfg: cfg, ttl: time.Second, want: 5 * time.Second},
		{name: "TTL above the ceiling", cfg: cfg, ttl: time.Hour, want: 5 * time.Minute},
		{name: "interval clamped to the floor", cfg: withDefaults(Config{Interval: time.Second}), want: 5 * time.Second},
		{name: "interval clamped to the ceiling", cfg: withDefaults(Config{Interval: time.Hour, MaxTTL: 2 * time.Minute}), want: 2 * time.Minute},
		{name: "custom bounds", cfg: withDefaults(Config{MinTTL: time.Second, MaxTTL: 10 * time.Second}), ttl: 20 * time.Second, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, refreshAfter(tt.cfg, tt.ttl))
		})
	}
}

func TestRetryBackoff(t *testing.T) {
	cfg := withDefaults(Config{})
	want := map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 30 * time.Second, 100: 30 * time.Second}
	for fails, d := range want {
		assert.Equal(t, d, retryAfter(cfg, fails), "failure %d", fails)
	}
}

// TestTTLSchedulesRefresh checks that the host is due exactly after its clamped
// TTL (or the interval without one), then after the backoff on failure.
func TestTTLSchedulesRefresh(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		want time.Duration
	}{
		{name: "TTL", ttl: 60 * time.Second, want: 60 * time.Second},
		{name: "TTL under the floor", ttl: time.Second, want: 5 * time.Second},
		{name: "TTL over the ceiling", ttl: 24 * time.Hour, want: 5 * time.Minute},
		{name: "no TTL", ttl: 0, want: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS(map[string][]answer{"api.example.com": {{addrs: []string{"10.0.0.1"}, ttl: tt.ttl}}})
			c, clk, _ := newTestCache(t, Config{}, dns)
			c.Track("ns/a", []string{"api.example.com"})
			_, err := c.Resolve(t.Context(), "api.example.com")
			require.NoError(t, err)

			queue, wait := c.due(clk.Now())
			assert.Empty(t, queue)
			assert.Equal(t, tt.want, wait)
			queue, _ = c.due(clk.Add(tt.want - time.Nanosecond))
			assert.Empty(t, queue)
			queue, _ = c.due(clk.Add(time.Nanosecond))
			assert.Equal(t, []string{"api.example.com"}, queue)
		})
	}
}

func TestFailureKeepsLastAddresses(t *testing.T) {
	lookupErr := errors.New("server misbehaving")
	dns := newFakeDNS(map[string][]answer{"api.example.com": {
		{addrs: []string{"10.0.0.2", "10.0.0.1"}, ttl: 10 * time.Second},
		{err: lookupErr},
		{addrs: nil}, // empty answer: a failure too
		{addrs: []string{"10.0.0.1", "10.0.0.2"}, ttl: 10 * time.Second},
	}})
	c, clk, rec := newTestCache(t, Config{}, dns)
	c.Track("ns/b", []string{"api.example.com"})
	c.Track("ns/a", []string{"API.example.com."})
	want := addrs("10.0.0.1", "10.0.0.2")

	got, err := c.Resolve(t.Context(), "api.example.com")
	require.NoError(t, err)
	assert.Equal(t, want, got)

	failedAt := clk.Add(10 * time.Second)
	c.refresh(t.Context(), "api.example.com")
	got, err = c.Resolve(t.Context(), "api.example.com")
	assert.Equal(t, want, got, "a failure keeps the last addresses")
	var rerr *Error
	require.ErrorAs(t, err, &rerr)
	assert.Equal(t, "api.example.com", rerr.Host)
	assert.Equal(t, failedAt, rerr.Since)
	require.ErrorIs(t, err, lookupErr)
	c.deliver()
	assert.Equal(t, [][]string{{"ns/a", "ns/b"}}, rec.take(), "starting to fail is a change")
	_, wait := c.due(clk.Now())
	assert.Equal(t, 5*time.Second, wait, "retry after MinTTL")

	clk.Add(5 * time.Second)
	c.refresh(t.Context(), "api.example.com")
	got, err = c.Resolve(t.Context(), "api.example.com")
	assert.Equal(t, want, got, "an empty answer keeps the last addresses")
	require.ErrorAs(t, err, &rerr)
	assert.Equal(t, failedAt, rerr.Since, "since the first failure in a row")
	require.ErrorIs(t, err, ErrNoAddresses)
	c.deliver()
	assert.Empty(t, rec.take(), "still failing is no change")
	_, wait = c.due(clk.Now())
	assert.Equal(t, 10*time.Second, wait, "the backoff doubles")

	clk.Add(10 * time.Second)
	c.refresh(t.Context(), "api.example.com")
	got, err = c.Resolve(t.Context(), "api.example.com")
	require.NoError(t, err, "recovery clears the error")
	assert.Equal(t, want, got)
	c.deliver()
	assert.Equal(t, [][]string{{"ns/a", "ns/b"}}, rec.take(), "recovering is a change")
}

func TestChangedOnlyOnChange(t *testing.T) {
	dns := newFakeDNS(map[string][]answer{"api.example.com": {
		{addrs: []string{"10.0.0.1", "2001:db8::1"}},
		{addrs: []string{"2001:db8::1", "10.0.0.1", "::ffff:10.0.0.1"}}, // same set, reordered, mapped duplicate
		{addrs: []string{"10.0.0.1"}},
	}})
	c, _, rec := newTestCache(t, Config{}, dns)
	c.Track("ns/a", []string{"api.example.com"})

	c.refresh(t.Context(), "api.example.com")
	c.deliver()
	assert.Empty(t, rec.take(), "the first resolution is no change")

	c.refresh(t.Context(), "api.example.com")
	c.deliver()
	assert.Empty(t, rec.take(), "the same address set is no change")
	got, err := c.Resolve(t.Context(), "api.example.com")
	require.NoError(t, err)
	assert.Equal(t, addrs("10.0.0.1", "2001:db8::1"), got)

	c.refresh(t.Context(), "api.example.com")
	c.deliver()
	assert.Equal(t, [][]string{{"ns/a"}}, rec.take())
	assert.Equal(t, 3, dns.Count("api.example.com"))
}

func TestNeverResolved(t *testing.T) {
	tests := []struct {
		name  string
		given answer
		is    error
	}{
		{name: "lookup error", given: answer{err: errors.New("no such host")}},
		{name: "empty answer", given: answer{}, is: ErrNoAddresses},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS(map[string][]answer{"api.example.com": {tt.given}})
			c, clk, _ := newTestCache(t, Config{}, dns)
			got, err := c.Resolve(t.Context(), "api.example.com")
			assert.Empty(t, got)
			var rerr *Error
			require.ErrorAs(t, err, &rerr)
			assert.Equal(t, clk.Now(), rerr.Since)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			assert.Contains(t, err.Error(), "api.example.com")
		})
	}
}

func TestIPLiterals(t *testing.T) {
	tests := []struct {
		host    string
		want    string
		invalid bool
	}{
		{host: "10.1.2.3", want: "10.1.2.3"},
		{host: "2001:db8::5", want: "2001:db8::5"},
		{host: "::ffff:10.1.2.3", want: "10.1.2.3"},
		{host: "fe80::1%eth0", invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			dns := newFakeDNS(nil)
			c, clk, _ := newTestCache(t, Config{}, dns)
			c.Track("ns/a", []string{tt.host})
			got, err := c.Resolve(t.Context(), tt.host)
			if tt.invalid {
				require.ErrorIs(t, err, ErrInvalidHost)
			} else {
				require.NoError(t, err)
				assert.Equal(t, addrs(tt.want), got)
			}
			assert.Empty(t, dns.count, "never looked up")
			queue, _ := c.due(clk.Now())
			assert.Empty(t, queue, "never tracked")
			assert.Empty(t, c.hosts, "never cached")
		})
	}
}

func TestInvalidHosts(t *testing.T) {
	label := strings.Repeat("a", 63)
	long := strings.Join([]string{label, label, label, label[:61]}, ".") // 253 bytes
	tests := []struct {
		host  string
		valid bool
	}{
		{host: long, valid: true},
		{host: long + ".", valid: true},
		{host: long + "a"},
		{host: strings.Repeat("a", 100000)},
		{host: ""},
		{host: "."},
		{host: "a..b"},
		{host: "-a.example.com"},
		{host: "a-.example.com"},
		{host: "a b.example.com"},
		{host: "a/b"},
		{host: strings.Repeat("a", 64) + ".com"},
		{host: "_svc.example-1.com", valid: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.20s/%d", tt.host, len(tt.host)), func(t *testing.T) {
			dns := newFakeDNS(nil)
			c, _, _ := newTestCache(t, Config{}, dns)
			_, err := c.Resolve(t.Context(), tt.host)
			if tt.valid {
				var rerr *Error
				require.ErrorAs(t, err, &rerr, "looked up (and failed in the fake)")
				return
			}
			require.ErrorIs(t, err, ErrInvalidHost)
			assert.Less(t, len(err.Error()), 200, "the error bounds the host it quotes")
			assert.Empty(t, dns.count, "no lookup")
		})
	}
}

func TestTrackAndForget(t *testing.T) {
	dns := newFakeDNS(map[string][]answer{
		"one.example.com": {{addrs: []string{"10.0.0.1"}}},
		"two.example.com": {{addrs: []string{"10.0.0.2"}}},
	})
	c, clk, _ := newTestCache(t, Config{}, dns)
	c.Track("ns/a", []string{"one.example.com", "two.example.com", "one.example.com"})
	c.Track("ns/b", []string{"two.example.com", "10.0.0.9"})
	queue, _ := c.due(clk.Now())
	assert.Equal(t, []string{"one.example.com", "two.example.com"}, queue, "tracked hosts are due at once")
	for _, h := range queue {
		c.refresh(t.Context(), h)
	}

	c.Track("ns/a", []string{"two.example.com"})
	assert.NotContains(t, c.hosts, "one.example.com", "a host no owner uses is forgotten")
	queue, _ = c.due(clk.Add(time.Hour))
	assert.Equal(t, []string{"two.example.com"}, queue)
	c.refresh(t.Context(), "two.example.com")

	c.Track("ns/a", nil)
	c.Track("ns/b", nil)
	assert.Empty(t, c.hosts)
	assert.Empty(t, c.owned)
	queue, _ = c.due(clk.Add(time.Hour))
	assert.Empty(t, queue)
	assert.Equal(t, 1, dns.Count("one.example.com"))
	assert.Equal(t, 2, dns.Count("two.example.com"))
}

func TestUntrackedHostExpires(t *testing.T) {
	dns := newFakeDNS(map[string][]answer{"api.example.com": {{addrs: []string{"10.0.0.1"}, ttl: time.Minute}}})
	c, clk, _ := newTestCache(t, Config{}, dns)
	for range 3 {
		_, err := c.Resolve(t.Context(), "api.example.com")
		require.NoError(t, err)
	}
	assert.Equal(t, 1, dns.Count("api.example.com"), "remembered while fresh")
	clk.Add(time.Minute)
	queue, _ := c.due(clk.Now())
	assert.Empty(t, queue, "Run never refreshes an untracked host")
	assert.Empty(t, c.hosts, "and forgets it once stale")
	_, err := c.Resolve(t.Context(), "api.example.com")
	require.NoError(t, err)
	assert.Equal(t, 2, dns.Count("api.example.com"))
}

func TestTooManyHosts(t *testing.T) {
	dns := newFakeDNS(nil)
	c, _, _ := newTestCache(t, Config{}, dns)
	hosts := make([]string, MaxHosts+1)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example.com", i)
	}
	c.Track("ns/a", hosts)
	assert.Len(t, c.hosts, MaxHosts)
	assert.Len(t, c.owned["ns/a"], MaxHosts)
	_, err := c.Resolve(t.Context(), "new.example.com")
	require.ErrorIs(t, err, ErrTooManyHosts)
	assert.Zero(t, dns.Count("new.example.com"))
}

func TestConcurrentResolveSharesOneLookup(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	count := 0
	lookup := func(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
		mu.Lock()
		count++
		mu.Unlock()
		started <- struct{}{}
		<-release
		return addrs("10.0.0.2", "10.0.0.1"), 0, nil
	}
	c := New(Config{Lookup: lookup}, nil)
	const n = 64
	results := make(chan []netip.Addr, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			got, err := c.Resolve(t.Context(), "api.example.com")
			assert.NoError(t, err)
			results <- got
		})
	}
	<-started
	// Callers arriving after the release find the result in the cache.
	close(release)
	wg.Wait()
	close(results)
	for got := range results {
		assert.Equal(t, addrs("10.0.0.1", "10.0.0.2"), got)
	}
	assert.Equal(t, 1, count)
}

func TestResolveContextEnds(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	lookup := func(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
		close(started)
		<-release
		return addrs("10.0.0.1"), 0, nil
	}
	c := New(Config{Lookup: lookup}, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := c.Resolve(t.Context(), "api.example.com")
		assert.NoError(t, err)
	}()
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Resolve(ctx, "api.example.com")
	require.ErrorIs(t, err, context.Canceled, "a waiter whose context ends stops waiting")
	close(release)
	<-done
}

// TestRun drives Run with an injected clock and timer and waits on the changed
// callback.
func TestRun(t *testing.T) {
	dns := newFakeDNS(map[string][]answer{"api.example.com": {
		{addrs: []string{"10.0.0.1"}, ttl: 10 * time.Second},
		{addrs: []string{"10.0.0.2"}, ttl: 10 * time.Second},
		{err: errors.New("timeout")},
		{addrs: []string{"10.0.0.2"}, ttl: 10 * time.Second},
	}})
	dns.calls = make(chan string, 10)
	clk := newClock()
	changed := make(chan []string, 10)
	c := New(Config{Lookup: dns.Lookup, Now: clk.Now}, func(owners []string) { changed <- owners })
	tick := make(chan time.Time)
	c.after = func(time.Duration) <-chan time.Time { return tick }

	c.Track("ns/b", []string{"api.example.com"})
	c.Track("ns/a", []string{"api.example.com"})
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.Run(ctx)
	}()
	require.Equal(t, "api.example.com", <-dns.calls, "a tracked host is resolved at once")
	got, err := c.Resolve(t.Context(), "api.example.com") // waits for that first lookup
	require.NoError(t, err)
	require.Equal(t, addrs("10.0.0.1"), got)

	steps := []struct {
		advance time.Duration
		want    []netip.Addr
		failing bool
	}{
		{advance: 10 * time.Second, want: addrs("10.0.0.2")},                // address change
		{advance: 10 * time.Second, want: addrs("10.0.0.2"), failing: true}, // starts failing
		{advance: 5 * time.Second, want: addrs("10.0.0.2")},                 // recovers
	}
	for i, step := range steps {
		now := clk.Add(step.advance)
		// Offer the timer's tick until Run looks the host up: a tick taken while
		// the previous lookup is still being recorded finds nothing due.
		for looked := false; !looked; {
			select {
			case tick <- now:
			case host := <-dns.calls:
				require.Equal(t, "api.example.com", host, "step %d", i)
				looked = true
			}
		}
		require.Equal(t, []string{"ns/a", "ns/b"}, <-changed, "step %d", i)
		got, err := c.Resolve(t.Context(), "api.example.com")
		assert.Equal(t, step.want, got, "step %d", i)
		if step.failing {
			assert.Error(t, err, "step %d", i)
		} else {
			assert.NoError(t, err, "step %d", i)
		}
	}
	cancel()
	<-stopped
	assert.Empty(t, changed)
}
