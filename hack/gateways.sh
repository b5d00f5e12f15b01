#!/usr/bin/env bash
# Builds the real Gateway API implementations the end-to-end tests (make e2e, integration/e2e)
# run against, from the Go module proxy: Traefik (controller and proxy in one binary) and the
# Envoy Gateway controller. Both modules carry replace directives, so `go install mod@v` refuses
# them: the module is downloaded, copied to a writable folder and built there as the main module.
# Binaries go to the cache folder hack/controlplane.sh uses and are reused when present.
# Prints the folder holding traefik and envoy-gateway on stdout; progress goes to stderr
# (hack/progress.sh), the go tool's output to log files in the cache (VERBOSE=1 shows it).
#
# Versions: Traefik v3.6.12 is the newest v3 whose every module is served here (v3.7.x needs
# ACME DNS provider SDKs and a go-http-auth fork that are not); Envoy Gateway v1.9.1.
set -euo pipefail

TRAEFIK_VERSION=v3.6.12
ENVOY_GATEWAY_VERSION=v1.9.1
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRAFFICMAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trafficmap-publisher}
bin="$cache/gateways-traefik-$TRAEFIK_VERSION-eg-$ENVOY_GATEWAY_VERSION"
logs="$cache/logs"
src="$cache/src"
phases=${PHASES:-2}
mkdir -p "$bin" "$logs" "$src"
# shellcheck source=progress.sh
. "$root/hack/progress.sh"

# compile MODULE VERSION PACKAGE OUTPUT: download MODULE@VERSION, copy it to $src (the module
# cache is read-only) and build PACKAGE in it to $bin/OUTPUT.tmp.
compile() {
  local mod=$1 ver=$2 pkg=$3 out=$4 dir copy
  dir=$(cd "$src" && GOFLAGS=-mod=mod go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "go mod download $mod@$ver gave no directory" >&2; return 1; }
  copy="$src/$out-$ver"
  rm -rf "$copy" && cp -r "$dir" "$copy" && chmod -R u+w "$copy"
  (cd "$copy" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/$out.tmp" "$pkg")
}

# build N MODULE VERSION PACKAGE OUTPUT: phase N builds $bin/OUTPUT, or says it reuses it.
build() {
  local n=$1 mod=$2 ver=$3 pkg=$4 out=$5
  if [ -x "$bin/$out" ]; then
    echo "[$n/$phases] $out $ver: reusing the binary built on an earlier run" >&2
    return 0
  fi
  step "[$n/$phases] building $out $ver from its Go module (first run only)" "$logs/$out.log" compile "$mod" "$ver" "$pkg" "$out" || exit
  mv "$bin/$out.tmp" "$bin/$out"
}

if ! [ -x "$bin/traefik" ] || ! [ -x "$bin/envoy-gateway" ]; then
  echo "first run: building Traefik and the Envoy Gateway controller from source takes long (tens of minutes on 2 cores); later runs reuse them" >&2
fi
build 1 github.com/envoyproxy/gateway "$ENVOY_GATEWAY_VERSION" ./cmd/envoy-gateway envoy-gateway
build 2 github.com/traefik/traefik/v3 "$TRAEFIK_VERSION" ./cmd/traefik traefik
echo "$bin"
