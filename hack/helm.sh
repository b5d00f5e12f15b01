#!/usr/bin/env bash
# Builds helm v3.22.0 from the Go module proxy into the same cache folder as the control
# plane, reusing it when present. Prints the binary's path on stdout; progress on stderr.
set -euo pipefail

HELM_VERSION=v3.22.0
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
bin="$cache/helm-$HELM_VERSION"
if [ ! -x "$bin/helm" ]; then
  echo "building helm $HELM_VERSION (first run only; about 90 s on 2 cores)..." >&2
  mkdir -p "$bin"
  GOBIN="$bin" go install -trimpath "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
echo "$bin/helm"
