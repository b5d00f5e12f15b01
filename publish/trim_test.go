package publish

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// The start's memory is returned once, only after the queue has stayed empty for the
// quiet time: never while work is pending, then exactly once.
func TestReturnBacklogMemoryWaitsForAQuietQueue(t *testing.T) {
	var pending, polls, freed atomic.Int64
	pending.Store(3)
	done := make(chan struct{})
	go func() {
		defer close(done)
		returnBacklogMemory(context.Background(), zaptest.NewLogger(t), 50*time.Millisecond,
			func() int { polls.Add(1); return int(pending.Load()) }, func() { freed.Add(1) })
	}()
	require.Eventually(t, func() bool { return polls.Load() >= 20 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, freed.Load(), "nothing is freed while work is pending")
	pending.Store(0)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not freed after the queue went quiet")
	}
	assert.Equal(t, int64(1), freed.Load())
}

// A stop before the backlog is done frees nothing.
func TestReturnBacklogMemoryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var freed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		returnBacklogMemory(ctx, zaptest.NewLogger(t), time.Hour, func() int { return 1 }, func() { freed.Add(1) })
	}()
	cancel()
	<-done
	assert.Zero(t, freed.Load())
}
