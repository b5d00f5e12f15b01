package publish

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// trimProbe drives returnIdleMemory: the queue length and the heap's free and object
// bytes it reads, and the times it freed.
type trimProbe struct {
	pending, free, objects, polls atomic.Int64
	mu                            sync.Mutex
	freed                         []time.Time
}

func (p *trimProbe) run(ctx context.Context, t *testing.T, quiet, every time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		returnIdleMemory(ctx, zaptest.NewLogger(t), quiet, every,
			func() int { p.polls.Add(1); return int(p.pending.Load()) },
			func() (uint64, uint64) { return uint64(p.free.Load()), uint64(p.objects.Load()) },
			func() { p.free.Store(0); p.mu.Lock(); p.freed = append(p.freed, time.Now()); p.mu.Unlock() }) // free is 0 before the free is seen
	}()
	return done
}

func (p *trimProbe) frees() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.freed...)
}

// The heap's free memory is returned only after the queue has stayed empty for the quiet
// time: never while work is pending, then once; and again after the next burst, but not
// sooner than every after the last time.
func TestReturnIdleMemoryAfterEachQuietBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := &trimProbe{}
	p.pending.Store(3)
	p.free.Store(idleFloor * 4)
	p.objects.Store(idleFloor)
	const quiet, every = 20 * time.Millisecond, 300 * time.Millisecond
	done := p.run(ctx, t, quiet, every)
	require.Eventually(t, func() bool { return p.polls.Load() >= 20 }, 10*time.Second, time.Millisecond)
	assert.Empty(t, p.frees(), "nothing is freed while work is pending")

	p.pending.Store(0)
	require.Eventually(t, func() bool { return len(p.frees()) == 1 }, 10*time.Second, time.Millisecond, "freed after the queue went quiet")

	p.pending.Store(1) // the next burst leaves memory behind
	p.free.Store(idleFloor * 4)
	polls := p.polls.Load()
	require.Eventually(t, func() bool { return p.polls.Load() >= polls+5 }, 10*time.Second, time.Millisecond)
	p.pending.Store(0)
	require.Eventually(t, func() bool { return len(p.frees()) == 2 }, 10*time.Second, time.Millisecond, "freed again after the next burst")
	f := p.frees()
	assert.GreaterOrEqual(t, f[1].Sub(f[0]), every, "not sooner than every after the last time")
	cancel()
	<-done
}

// After the first time, free memory below the floor, or below a quarter of the heap's
// objects, is left to the runtime: no collection is forced for it. The first quiet moment
// (the start's backlog done) always frees: a collection then also reclaims the start's
// garbage, which the free memory does not count.
func TestReturnIdleMemoryLeavesLittleFreeMemory(t *testing.T) {
	for _, tc := range []struct {
		name          string
		free, objects int64
	}{
		{name: "below the floor", free: idleFloor - 1, objects: 0},
		{name: "below a quarter of the objects", free: idleFloor * 2, objects: idleFloor * 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			p := &trimProbe{}
			p.free.Store(tc.free)
			p.objects.Store(tc.objects)
			done := p.run(ctx, t, 5*time.Millisecond, 0)
			require.Eventually(t, func() bool { return len(p.frees()) == 1 }, 10*time.Second, time.Millisecond, "the first quiet moment frees")
			p.free.Store(tc.free)
			polls := p.polls.Load()
			require.Eventually(t, func() bool { return p.polls.Load() >= polls+40 }, 10*time.Second, time.Millisecond)
			cancel()
			<-done
			assert.Len(t, p.frees(), 1, "no more after it")
		})
	}
}

// A stop before the queue goes quiet frees nothing.
func TestReturnIdleMemoryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := &trimProbe{}
	p.pending.Store(1)
	p.free.Store(idleFloor * 4)
	done := p.run(ctx, t, time.Hour, 0)
	cancel()
	<-done
	assert.Empty(t, p.frees())
}

// The production reading of the heap is the runtime's: some objects, never negative.
func TestRuntimeHeapIdleReadsTheRuntime(t *testing.T) {
	_, objects := runtimeHeapIdle()
	assert.Positive(t, objects)
}
