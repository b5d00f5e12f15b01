#!/usr/bin/env bash
# Runs the demo for `make demo` in four phases, with a progress line per phase on stderr:
# [1/4] etcd and [2/4] kube-apiserver are built on the first run and reused after
# (hack/controlplane.sh), [3/4] the demo is built, [4/4] it runs. The go tool's output goes to
# log files (VERBOSE=1 shows it as it runs; a failed build shows its last lines).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=../progress.sh
. hack/progress.sh
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
logs="$cache/logs"
mkdir -p "$logs"
tmp=$(mktemp -d)
prefetch=
trap 'rm -rf "$tmp"; [ -z "$prefetch" ] || kill "$prefetch" 2>/dev/null || true' EXIT
start=$SECONDS

# The demo's modules download while the control plane builds.
go mod download >"$logs/demo-download.log" 2>&1 &
prefetch=$!

note="first run: make demo builds etcd, kube-apiserver and the demo from source, about 12 minutes on 2 idle cores in all (measured with empty Go caches); later runs reuse the builds and take under a minute"
assets=$(PHASES=4 FIRST_RUN_NOTE=$note bash hack/controlplane.sh)
# Built as hack/controlplane.sh builds (no cgo, -trimpath), so the standard library and the
# modules at the same versions compile once for both.
step "[3/4] building the demo" "$logs/demo.log" \
  env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/demo" ./hack/demo || exit
wait "$prefetch" || true
prefetch=
echo "[4/4] running the demo" >&2
status=0
KUBEBUILDER_ASSETS="$assets" "$tmp/demo" || status=$?
echo "make demo: $(elapsed $((SECONDS - start))) in all" >&2
exit "$status"
