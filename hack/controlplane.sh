#!/usr/bin/env bash
# Builds the real control plane the integration tests run: kube-apiserver v1.37.2 and etcd
# v3.6.16, both from the Go module proxy. (The publisher cleans up by labels, not by
# ownerReferences, so no garbage collector is needed.)
# Binaries go to a cache folder outside the repository and are reused when present.
# Prints the folder (for KUBEBUILDER_ASSETS) on stdout; progress goes to stderr: a note before
# a first build, then a line per binary with its build time (hack/progress.sh). The go tool's
# output goes to log files in the cache folder: VERBOSE=1 shows it as it runs, and a failed
# build shows its last lines.
# PHASES=N numbers the two lines [1/N] and [2/N] for a caller with more phases (make demo: 4);
# FIRST_RUN_NOTE replaces the note printed before a first build.
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
bin="$cache/controlplane-$K8S_VERSION-etcd-$ETCD_VERSION"
logs="$cache/logs"
phases=${PHASES:-2}
mkdir -p "$bin" "$logs"
# shellcheck source=progress.sh
. "$root/hack/progress.sh"

# -s -w: no symbol table or DWARF (a shorter link; stack traces keep file and line).
# CGO_ENABLED=0, as the upstream release builds: no C compiler runs, and the standard library
# compiled for these builds is reused by the demo's (hack/demo/run.sh builds it the same way).
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

# compile DIR OUTPUT PACKAGE LDFLAGS builds PACKAGE of module hack/DIR to $bin/OUTPUT.tmp.
compile() {
  (cd "$root/hack/$1" && CGO_ENABLED=0 go build -trimpath -ldflags "$4" -o "$bin/$2.tmp" "$3")
}

# build N DIR OUTPUT PACKAGE LDFLAGS: phase N builds $bin/OUTPUT, or says it reuses it.
build() {
  local n=$1 dir=$2 out=$3 pkg=$4 flags=$5
  if [ -x "$bin/$out" ]; then
    echo "[$n/$phases] $out: reusing the binary built on an earlier run" >&2
    return 0
  fi
  step "[$n/$phases] building $out (first run only)" "$logs/$out.log" compile "$dir" "$out" "$pkg" "$flags" || exit
  mv "$bin/$out.tmp" "$bin/$out"
}

prefetch=
trap '[ -z "$prefetch" ] || kill "$prefetch" 2>/dev/null || true' EXIT
if ! [ -x "$bin/etcd" ] || ! [ -x "$bin/kube-apiserver" ]; then
  echo "${FIRST_RUN_NOTE:-first run: building etcd and kube-apiserver from source takes about 9 minutes on 2 idle cores (measured with empty Go caches); later runs reuse them}" >&2
fi
if ! [ -x "$bin/kube-apiserver" ]; then # its modules download while etcd compiles
  (cd "$root/hack/controlplane" && go mod download) >"$logs/kube-apiserver-download.log" 2>&1 &
  prefetch=$!
fi
build 1 etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build 2 controlplane kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
if [ -n "$prefetch" ]; then wait "$prefetch" || true; fi
prefetch=
echo "$bin"
