package cli

import (
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// memoryReserve is what of the container's memory limit Go's soft limit leaves out before
// the ratio applies: the binary's resident pages (about 50 MiB, measured by make bench),
// which the container counts and Go's limit does not, and headroom. Without it, a 10,000-map
// cold start under GOMEMLIMIT at 90% of a 512 MiB limit peaked at 536 MiB resident.
const memoryReserve = 64 << 20

// setMemoryLimit sets Go's soft memory limit (as GOMEMLIMIT would) to ratio of the memory
// limit of the container the publisher runs in (its cgroup) less memoryReserve, so the
// collector works harder as the heap nears the limit instead of letting it grow to twice
// the live heap (GOGC=100) and the container be killed. Nothing is set when ratio is 0,
// when GOMEMLIMIT or AUTOMEMLIMIT is set in the environment (they win), or when the cgroup
// has no limit.
func setMemoryLimit(ratio float64, log *zap.Logger) {
	if ratio == 0 {
		return
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("soft memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v), zap.Int64("bytes", debug.SetMemoryLimit(-1)))
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(reserved(memlimit.FromCgroup)))
	switch {
	case err != nil:
		log.Info("no soft memory limit from the container's: none found", zap.Error(err))
	case limit < math.MaxInt64:
		log.Info("soft memory limit set from the container's memory limit", zap.Int64("bytes", limit), zap.Float64("ratio", ratio),
			zap.Int64("reserve", memoryReserve))
	}
}

// reserved is provider's limit less memoryReserve; a limit of at most twice the reserve is
// left whole (the ratio alone then applies).
func reserved(provider memlimit.Provider) memlimit.Provider {
	return func() (uint64, error) {
		limit, err := provider()
		if err != nil || limit <= 2*memoryReserve {
			return limit, err
		}
		return limit - memoryReserve, nil
	}
}
