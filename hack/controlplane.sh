#!/usr/bin/env bash
# Builds the real control plane the integration tests run: kube-apiserver v1.37.2 and etcd
# v3.6.16, both from the Go module proxy. (The publisher cleans up by labels, not by
# ownerReferences, so no garbage collector is needed.)
# Binaries go to a cache folder outside the repository and are reused when present.
# Prints the folder (for KUBEBUILDER_ASSETS) on stdout; progress goes to stderr.
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
bin="$cache/controlplane-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$bin"

ldflags="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

build() { # build DIR OUTPUT PACKAGE [LDFLAGS]
  local dir=$1 out=$2 pkg=$3 flags=${4:-}
  if [ -x "$bin/$out" ]; then return 0; fi
  echo "building $out (first run only; several minutes on 2 cores)..." >&2
  (cd "$root/hack/$dir" && go build -trimpath -ldflags "$flags" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
}

build etcd etcd go.etcd.io/etcd/server/v3
build controlplane kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
echo "$bin"
