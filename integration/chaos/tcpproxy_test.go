package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer echoes every connection on 127.0.0.1 until the test ends.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln
}

func startTestProxy(t *testing.T, target func() string) *tcpProxy {
	t.Helper()
	p, err := startTCPProxy(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip writes msg and reads as many bytes back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	return readWithin(c, len(msg), d)
}

func readWithin(c net.Conn, n int, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func TestTCPProxyForwards(t *testing.T) {
	up := echoServer(t)
	p := startTestProxy(t, func() string { return up.Addr().String() })
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	got, err := roundTrip(c, "hello", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
}

func TestTCPProxyBlackholeKeepsTheConnectionOpen(t *testing.T) {
	up := echoServer(t)
	p := startTestProxy(t, func() string { return up.Addr().String() })
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = roundTrip(c, "before", time.Second)
	require.NoError(t, err)

	holed := make(chan struct{})
	go func() {
		defer close(holed)
		p.Blackhole(context.Background(), 600*time.Millisecond)
	}()
	time.Sleep(50 * time.Millisecond)
	// Nothing comes back meanwhile, and the connection is neither closed nor reset.
	_, err = roundTrip(c, "during", 300*time.Millisecond)
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "want a timeout, not %v", err)
	// A connection made during the blackhole is accepted and waits too.
	late, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer late.Close()
	_, err = late.Write([]byte("late"))
	require.NoError(t, err)

	// After it, what was sent meanwhile arrives on the same connections, and they work on.
	<-holed
	got, err := readWithin(c, len("during"), 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "during", got)
	got, err = roundTrip(c, "after", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "after", got)
	got, err = readWithin(late, len("late"), 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "late", got)
}

func TestTCPProxyBlackholeEndsWithContext(t *testing.T) {
	up := echoServer(t)
	p := startTestProxy(t, func() string { return up.Addr().String() })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	p.Blackhole(ctx, time.Minute)
	assert.Less(t, time.Since(start), 10*time.Second)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = roundTrip(c, "x", time.Second)
	assert.NoError(t, err)
}

func TestTCPProxyClosesWhenAnEndCloses(t *testing.T) {
	t.Run("no target", func(t *testing.T) {
		p := startTestProxy(t, func() string { return "" })
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = readWithin(c, 1, 2*time.Second)
		assert.ErrorIs(t, err, io.EOF)
	})
	t.Run("upstream closes", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				_ = c.Close()
			}
		}()
		p := startTestProxy(t, func() string { return ln.Addr().String() })
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = readWithin(c, 1, 2*time.Second)
		assert.ErrorIs(t, err, io.EOF)
	})
	t.Run("proxy closed", func(t *testing.T) {
		up := echoServer(t)
		p, err := startTCPProxy(func() string { return up.Addr().String() })
		require.NoError(t, err)
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = roundTrip(c, "x", time.Second)
		require.NoError(t, err)
		require.NoError(t, p.Close())
		_, err = readWithin(c, 1, 2*time.Second)
		assert.ErrorIs(t, err, io.EOF)
	})
}
