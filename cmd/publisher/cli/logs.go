package cli

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
// format on one stream:
//   - client-go's klog output, logger "client-go" ("client-go.NAME" for its named loggers);
//   - controller-runtime's (the certificate watcher of the xDS TLS), "controller-runtime.*";
//   - gRPC's errors, "grpc" (gRPC's own default writes only errors too);
//   - the standard library's log package, which net/http uses for its server errors,
//     "stdlib", at error level.
//
// klog's flags are not offered and its verbosity stays 0, so klog never writes its own
// format and its V(1) and higher calls are dropped; client-go's contextual V(n) messages
// are zap level -n, so --log-level debug shows V(1). It returns a function that undoes the
// standard library's redirection. Call it once, before any of these libraries runs.
func routeLibraryLogs(log *zap.Logger) (undo func()) {
	// Contextual: klog.Background and klog.FromContext give the zap logger itself, so a
	// named client-go logger (utilruntime's "UnhandledError") extends the zap name instead
	// of adding a second "logger" key, as klog's own klogr would.
	klog.SetLoggerWithOptions(zapr.NewLogger(log.Named("client-go")), klog.ContextualLogger(true))
	ctrllog.SetLogger(zapr.NewLogger(log)) // its loggers are named controller-runtime.*
	grpcLevel := max(zapcore.LevelOf(log.Core()), zapcore.ErrorLevel)
	grpclog.SetLoggerV2(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(grpcLevel))))
	undo, err := zap.RedirectStdLogAt(log.Named("stdlib"), zapcore.ErrorLevel)
	if err != nil { // only for a level zap does not know
		panic(err)
	}
	return undo
}
