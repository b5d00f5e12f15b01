// Package xdstest holds test helpers for the xDS sink's tests: real gRPC servers standing
// for the workload clusters' endpoints. Only tests import it.
package xdstest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// backend answers UnaryCall with its cluster name as the hostname, so a client can tell
// which cluster served each RPC.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	cluster string
}

// UnaryCall implements testgrpc.TestServiceServer.
func (b backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: b.cluster}, nil
}

// StartBackend starts a gRPC server for cluster on a free loopback port, stops it when the
// test ends, and returns its endpoint URL (http://127.0.0.1:PORT).
func StartBackend(t testing.TB, cluster string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for backend %s: %v", cluster, err)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, backend{cluster: cluster})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}
