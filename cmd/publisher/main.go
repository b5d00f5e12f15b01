// Command publisher publishes OME TrafficMaps as Gateway API HTTPRoute weights and sets
// their Published condition once the weights are really in place.
//
// Exit codes: 0 on success, 1 when the publisher fails at run time, 2 on a usage or
// configuration error of 'publisher run'. The operator commands follow OME's kubectl plugin:
// 1 for any error, 3 for a rejected guarded patch, and 4 (--wait timed out), 5 (status
// --check: not published) and 6 (refused by the last-serving guard); see
// docs/reference/exit-codes.md.
//
// Run as kubectl-trafficmap (installed or linked under that name on PATH) it is a kubectl
// plugin: 'kubectl trafficmap status ...'.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/trafficmap/publisher/cmd/publisher/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.RunProgram(ctx, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
