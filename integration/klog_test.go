package integration

import (
	"sync/atomic"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// klogTarget is where client-go's klog output goes while a test wants it (nowhere
// otherwise). klog's logger may be set only once, before anything logs, so TestMain routes
// klog into a core that forwards to klogTarget, which a test swaps atomically.
var klogTarget atomic.Pointer[zapcore.Core]

// routeKlog routes klog into klogTarget, as the binary routes it into its logger
// (cmd/publisher). Called once, from TestMain.
func routeKlog() {
	nop := zapcore.NewNopCore()
	klogTarget.Store(&nop)
	klog.SetLoggerWithOptions(zapr.NewLogger(zap.New(forwardCore{}).Named("client-go")), klog.ContextualLogger(true))
	// controller-runtime's loggers (its certwatcher, used by the xDS TLS) go the same way, as
	// the command's do (cmd/publisher/cli/logs.go).
	ctrllog.SetLogger(zapr.NewLogger(zap.New(forwardCore{}).Named("controller-runtime")))
}

// captureKlog sends klog's output to core until the returned function is called.
func captureKlog(core zapcore.Core) (restore func()) {
	klogTarget.Store(&core)
	return func() {
		nop := zapcore.NewNopCore()
		klogTarget.Store(&nop)
	}
}

// forwardCore is a zapcore.Core that writes through whatever klogTarget holds at the time.
type forwardCore struct{ fields []zapcore.Field }

func (c forwardCore) target() zapcore.Core { return (*klogTarget.Load()).With(c.fields) }

func (c forwardCore) Enabled(l zapcore.Level) bool { return (*klogTarget.Load()).Enabled(l) }

func (c forwardCore) With(fields []zapcore.Field) zapcore.Core {
	return forwardCore{fields: append(append([]zapcore.Field{}, c.fields...), fields...)}
}

func (c forwardCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return c.target().Check(e, ce)
}

func (c forwardCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.target().Write(e, fields)
}

func (c forwardCore) Sync() error { return (*klogTarget.Load()).Sync() }
