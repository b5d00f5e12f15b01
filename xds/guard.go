package xds

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/trafficmap/publisher/model/untrusted"
)

// errPanicked is the status of a stream whose handler panicked.
var errPanicked = status.Error(codes.Internal, "xds: internal error handling this stream; it is closed, reconnect")

// recovered turns a panic of a handler (p, from recover) into errPanicked: it is logged
// with the method, the peer and the stack, and counted. The server and every other stream
// go on; the stream's own state is released as it ends (its deferred closing callbacks ran).
func (s *Server) recovered(ctx context.Context, method string, p any) error {
	s.metrics.panics.Inc()
	s.log.Error("xds handler panicked; its stream is closed, the server goes on",
		zap.String("method", method), zap.String("peer", peerOf(ctx)),
		zap.String("panic", untrusted.Quote(fmt.Sprint(p), untrusted.MaxMessage)), zap.ByteString("stack", debug.Stack()))
	return errPanicked
}

// recoverStream is the outermost stream interceptor: a panic in a stream's handler (the
// go-control-plane loop, the tracker's callbacks, the cache) ends that stream with
// errPanicked instead of the process (see recovered).
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.recovered(ss.Context(), info.FullMethod, p)
		}
	}()
	return handler(srv, ss)
}

// recoverUnary is recoverStream for unary methods (the xDS services have none today).
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, s.recovered(ctx, info.FullMethod, p)
		}
	}()
	return handler(ctx, req)
}

// connLimiter bounds the connections with open streams of one client (see
// Limits.MaxConnectionsPerClient): a client is its certificate identity with mutual TLS,
// its peer IP address otherwise; a connection is its peer address. A stream that would
// add a connection beyond the bound is refused (ResourceExhausted); a connection counts
// while it has a stream open. Its state is guarded by mu.
type connLimiter struct {
	max     int
	refused func(reason string)

	mu      sync.Mutex
	streams map[string]map[string]int // client -> connection -> open streams
}

// clientOf names the client and the connection of a stream's context.
func clientOf(ctx context.Context) (client, conn string) {
	if id := AccessOf(ctx).Identity; id != "" {
		client = "identity " + untrusted.Quote(id, untrusted.MaxID)
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return client, ""
	}
	conn = p.Addr.String()
	if client == "" {
		host, _, err := net.SplitHostPort(conn)
		if err != nil {
			host = conn
		}
		client = "address " + host
	}
	return client, conn
}

// intercept counts the stream's connection for its client, or refuses it.
func (l *connLimiter) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if l.max < 0 {
		return handler(srv, ss)
	}
	client, conn := clientOf(ss.Context())
	if conn == "" {
		return handler(srv, ss)
	}
	if err := l.open(client, conn); err != nil {
		if l.refused != nil {
			l.refused(refusedConnections)
		}
		return err
	}
	defer l.close(client, conn)
	return handler(srv, ss)
}

func (l *connLimiter) open(client, conn string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := l.streams[client]
	if _, ok := conns[conn]; !ok && len(conns) >= l.max {
		return status.Errorf(codes.ResourceExhausted, "xds: client %s has %d connections with open streams, at most %d (--xds-max-connections-per-client)",
			client, len(conns), l.max)
	}
	if conns == nil {
		if l.streams == nil {
			l.streams = map[string]map[string]int{}
		}
		conns = map[string]int{}
		l.streams[client] = conns
	}
	conns[conn]++
	return nil
}

func (l *connLimiter) close(client, conn string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := l.streams[client]
	if conns[conn]--; conns[conn] <= 0 {
		delete(conns, conn)
	}
	if len(conns) == 0 {
		delete(l.streams, client)
	}
}
