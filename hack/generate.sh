#!/usr/bin/env bash
# Regenerates the code and manifests derived from api/v1beta1:
#   - api/v1beta1/zz_generated.deepcopy.go (deep-copy functions)
#   - charts/publisher/crds/ome.io_trafficmaps.yaml (the TrafficMap CRD)
# controller-gen is pinned in hack/tools/go.mod, a separate module, so the
# publisher's own go.mod never depends on controller-tools. The output is
# deterministic: running this twice changes nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

controller_gen() {
	go tool -modfile="${root}/hack/tools/go.mod" controller-gen "$@"
}

controller_gen \
	object:headerFile="${root}/hack/boilerplate.go.txt" \
	paths=./api/v1beta1/...

controller_gen \
	crd:crdVersions=v1 \
	paths=./api/v1beta1/... \
	output:crd:artifacts:config="${root}/charts/publisher/crds"
