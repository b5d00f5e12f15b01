package main

import (
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zapgrpc"
	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// routeLibraryLogs sends what the libraries log through log, so the process writes one
// format: client-go's klog output (logger "client-go"), controller-runtime's (its
// certificate watcher; logger "controller-runtime"), gRPC's errors (logger "grpc"; gRPC
// writes only errors by default too) and the standard library's log package, which net/http
// uses for its server errors (logger "stdlib", at error level). klog's verbosity stays at
// its default, 0: client-go's V(1) and higher messages are not written, and klog's own
// flags are not offered, so klog never writes its own format. It returns a function that
// undoes the standard library's redirection. Call it once, before any of these libraries
// runs.
func routeLibraryLogs(log *zap.Logger) (undo func()) {
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	ctrllog.SetLogger(zapr.NewLogger(log)) // its loggers are named controller-runtime.*
	grpcLevel := max(zapcore.LevelOf(log.Core()), zapcore.ErrorLevel)
	grpclog.SetLoggerV2(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(grpcLevel))))
	undo, err := zap.RedirectStdLogAt(log.Named("stdlib"), zapcore.ErrorLevel)
	if err != nil { // only for a level zap does not know
		panic(err)
	}
	return undo
}
