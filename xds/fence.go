package xds

import (
	"net"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fence ends every xDS connection and refuses new streams while it is up (Server.Fence), so
// the clients of a replica that the leader may no longer count fail over to replicas it
// does. Streams end by their connection closing: go-control-plane's stream loops end when
// their stream's receive fails, not when its context is cancelled. Its state is guarded
// by mu.
type fence struct {
	mu     sync.Mutex
	up     bool
	reason string
	next   uint64
	conns  map[uint64]net.Conn // the open connections, by an id of the fence's own
}

// errFenced is what a stream opened while fenced gets: Unavailable, which xDS clients
// retry (reaching another replica behind the Service).
func errFenced(reason string) error {
	return status.Errorf(codes.Unavailable, "xds server is fenced: %s", reason)
}

// intercept refuses every stream while the fence is up.
func (f *fence) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	f.mu.Lock()
	up, reason := f.up, f.reason
	f.mu.Unlock()
	if up {
		return errFenced(reason)
	}
	return handler(srv, ss)
}

// listener tracks the connections lis accepts, for Fence to close.
func (f *fence) listener(lis net.Listener) net.Listener { return fencedListener{Listener: lis, f: f} }

type fencedListener struct {
	net.Listener
	f *fence
}

func (l fencedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	if l.f.conns == nil {
		l.f.conns = map[uint64]net.Conn{}
	}
	t := &trackedConn{Conn: c, f: l.f, id: l.f.next}
	l.f.next++
	l.f.conns[t.id] = t
	return t, nil
}

// trackedConn leaves the fence's set when closed.
type trackedConn struct {
	net.Conn
	f    *fence
	id   uint64
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c.id)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

// Fence closes every xDS connection (ending its streams) and refuses new streams (gRPC
// status Unavailable, with reason) until Unfence. Clients keep their last configuration
// and reconnect, reaching another replica. Safe for concurrent use; fencing a fenced
// server closes what connected meanwhile and updates reason.
func (s *Server) Fence(reason string) {
	f := &s.fence
	f.mu.Lock()
	was := f.up
	f.up, f.reason = true, reason
	conns := make([]net.Conn, 0, len(f.conns))
	for _, c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.Close() // a connection already closed by its client needs nothing more
	}
	if !was {
		s.log.Warn("xds server fenced: every connection closed, new streams refused", zap.String("reason", reason), zap.Int("connections", len(conns)))
	}
}

// Unfence accepts streams again after Fence.
func (s *Server) Unfence() {
	f := &s.fence
	f.mu.Lock()
	was := f.up
	f.up, f.reason = false, ""
	f.mu.Unlock()
	if was {
		s.log.Info("xds server unfenced: accepting streams again")
	}
}

// Fenced reports whether the server is fenced.
func (s *Server) Fenced() bool {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	return s.fence.up
}
