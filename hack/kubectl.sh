#!/usr/bin/env bash
# Builds the real kubectl the docs test (integration/docsrun_test.go) runs the how-to guides
# with: kubectl v1.37.2, the control plane's Kubernetes version, from the Go module proxy
# (module hack/kubectl, the way hack/controlplane.sh builds kube-apiserver).
# The binary goes to a cache folder outside the repository and is reused when present.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

K8S_VERSION=v1.37.2
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
bin="$cache/kubectl-$K8S_VERSION"
mkdir -p "$bin"

if [ ! -x "$bin/kubectl" ]; then
  echo "building kubectl $K8S_VERSION (first run only; a few minutes on 2 cores)..." >&2
  # Built as hack/controlplane.sh builds kube-apiserver (no cgo, -s -w, -trimpath), so the
  # packages both use at the same versions compile once.
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  (cd "$root/hack/kubectl" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl)
  mv "$bin/kubectl.tmp" "$bin/kubectl"
fi
echo "$bin/kubectl"
