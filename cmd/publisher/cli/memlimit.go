package cli

import (
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// setMemoryLimit sets Go's soft memory limit (as GOMEMLIMIT would) to ratio of the memory
// limit of the container the publisher runs in (its cgroup), so the collector works harder
// as the heap nears the limit instead of letting it grow to twice the live heap (GOGC=100)
// and the container be killed. Nothing is set when ratio is 0, when GOMEMLIMIT or
// AUTOMEMLIMIT is set in the environment (they win), or when the cgroup has no limit.
func setMemoryLimit(ratio float64, log *zap.Logger) {
	if ratio == 0 {
		return
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("soft memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v), zap.Int64("bytes", debug.SetMemoryLimit(-1)))
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Info("no soft memory limit from the container's: none found", zap.Error(err))
	case limit < math.MaxInt64:
		log.Info("soft memory limit set from the container's memory limit", zap.Int64("bytes", limit), zap.Float64("ratio", ratio))
	}
}
