package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// tcpProxy forwards every connection accepted on 127.0.0.1 (a port of its own) to the
// address target returns at accept time, and can blackhole: stop forwarding both ways for a
// while with every connection kept open, as a network partition does to TCP (the bytes sent
// meanwhile arrive after it heals, unless an end gives up first). A connection accepted
// while the target is "" or cannot be dialed is closed; when one end closes, so does the
// other. It is safe for concurrent use.
type tcpProxy struct {
	ln     net.Listener
	target func() string

	mu     sync.Mutex
	healed chan struct{} // closed while forwarding; open during a blackhole
	holes  int           // blackholes under way
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startTCPProxy listens on 127.0.0.1:0 and forwards to target() until Close.
func startTCPProxy(target func() string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcp proxy listen: %w", err)
	}
	healed := make(chan struct{})
	close(healed)
	p := &tcpProxy{ln: ln, target: target, healed: healed, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, 127.0.0.1:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops forwarding for d (or until ctx ends), then forwards again; overlapping
// calls heal when the last one ends.
func (p *tcpProxy) Blackhole(ctx context.Context, d time.Duration) {
	p.mu.Lock()
	if p.holes == 0 {
		p.healed = make(chan struct{})
	}
	p.holes++
	p.mu.Unlock()
	sleep(ctx, d)
	p.mu.Lock()
	if p.holes--; p.holes == 0 {
		close(p.healed)
	}
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the forwarding to end.
func (p *tcpProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	if p.holes > 0 {
		p.holes = 0
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one client connection: it dials the target once the proxy forwards (a
// connection made during a blackhole waits, as a SYN would be retried), then copies both
// ways until either end closes.
func (p *tcpProxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	p.waitHealed()
	addr := p.target()
	if addr == "" {
		return
	}
	upstream, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(upstream) {
		return
	}
	defer p.untrack(upstream)
	done := make(chan struct{}, 2)
	go func() { p.copy(upstream, client); done <- struct{}{} }()
	go func() { p.copy(client, upstream); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = upstream.Close()
	<-done
}

// copy forwards src to dst, each chunk only while the proxy forwards, until an error.
func (p *tcpProxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitHealed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) waitHealed() {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	<-healed
}

// track records c for Close; false (and c closed) when the proxy is closed.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
