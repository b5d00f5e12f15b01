# Development targets. Recipes are POSIX sh. The control plane (kube-apiserver and etcd)
# is built by hack/controlplane.sh into a cache dir outside the repository; the script
# prints that dir, which becomes KUBEBUILDER_ASSETS.

GO ?= go
FUZZTIME ?= 30s

.PHONY: test e2e lint shape demo bench chaos chaos-plant chaos-gateways unit fuzz generate docs build image controlplane kubectl install-plugin plugin-archives

## test: lint, go vet, then every test with the race detector, the integration tests on a real
## kube-apiserver and etcd, with a real kubectl (hack/kubectl.sh: the docs test runs the how-to
## guides with it, and it comes first on PATH); then the same for the separate test modules
## (TEST_MODULES)
TEST_MODULES = hack/image integration/tty
test: lint
	assets="$$(bash hack/controlplane.sh)" && \
	kubectl="$$(bash hack/kubectl.sh)" && \
	$(GO) vet ./... && \
	PATH="$$(dirname "$$kubectl"):$$PATH" TRAFFICMAP_KUBECTL="$$kubectl" \
	KUBEBUILDER_ASSETS="$$assets" $(GO) test -race ./... -count=1 && \
	for m in $(TEST_MODULES); do \
		$(GO) -C "$$m" vet ./... && \
		KUBEBUILDER_ASSETS="$$assets" $(GO) -C "$$m" test -race -timeout 30m ./... -count=1 || exit 1; \
	done

## e2e: the end-to-end tests (integration/e2e_*_test.go, build tag e2e) on real gateways built
## from their Go modules by hack/gateways.sh (Traefik v3.6.12 as controller and proxy, the
## Envoy Gateway v1.9.1 controller; tens of minutes the first time, reused later), on the same
## control plane: real requests through Traefik to backends in a network namespace, Envoy
## Gateway's verdicts on each backend kind. Needs root (ip netns, unshare). E2E_REPORT=file
## appends the measured figures to file.
E2E_REPORT ?=
e2e:
	assets="$$(bash hack/controlplane.sh)" && \
	kubectl="$$(bash hack/kubectl.sh)" && \
	gateways="$$(bash hack/gateways.sh)" && \
	PATH="$$(dirname "$$kubectl"):$$PATH" TRAFFICMAP_KUBECTL="$$kubectl" \
	KUBEBUILDER_ASSETS="$$assets" TRAFFICMAP_GATEWAYS="$$gateways" E2E_REPORT="$(if $(E2E_REPORT),$(abspath $(E2E_REPORT)))" \
	$(GO) test -tags e2e -race ./integration/ -run '^TestE2E' -count=1 -timeout 30m -v

## lint: staticcheck, pinned in the tools module hack/tools/go.mod and run with go tool (so a
## fresh clone needs nothing else), with zero findings on the main module (except the generated
## clientset api/client), on integration with the e2e build tag and on the separate modules (LINT_MODULES); then the shape check
## (hack/shape: no type over 15 methods, no function over 80 lines; SHAPE_FLAGS=-warn only
## reports)
STATICCHECK = $(GO) tool -modfile="$(CURDIR)/hack/tools/go.mod" staticcheck
LINT_MODULES = hack/image integration/tty
SHAPE_FLAGS ?=
lint:
	$(STATICCHECK) $$($(GO) list ./... | grep -v '/api/client/') && \
	$(STATICCHECK) -tags e2e ./integration/ && \
	for m in $(LINT_MODULES); do \
		(cd "$$m" && $(STATICCHECK) ./...) || exit 1; \
	done
	$(GO) run ./hack/shape $(SHAPE_FLAGS)

## shape: fail on every type over 15 methods and every function over 80 lines outside tests,
## integration/ and generated code (hack/shape), listing each as file:line name count
shape:
	$(GO) run ./hack/shape

## demo: drain and undrain a cluster on an embedded control plane (hack/demo), with a progress
## line per phase (hack/demo/run.sh); VERBOSE=1 shows the go tool's downloads and build output
demo:
	bash hack/demo/run.sh

## bench: fleet-scale benchmark (P1-P5) on an embedded control plane; writes BENCHMARKS.md.
## BENCH_FLAGS passes flags to integration/bench, e.g. BENCH_FLAGS="-n 10000 -phases cold,memory".
BENCH_FLAGS ?=
bench:
	assets="$$(bash hack/controlplane.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" $(GO) run ./integration/bench $(BENCH_FLAGS)

## chaos: the fault-injection run (integration/chaos) on an embedded control plane: a workload
## of drains, taints, ramps, hostname changes and deletions under overlapping faults, with an
## invariant checker counting Published lies; writes its table to BENCHMARKS.md. CHAOS_FLAGS
## passes flags, e.g. CHAOS_FLAGS="-n 200 -duration 30m -seed 7". A one-minute smoke run of it
## (TestSmoke) is part of make test.
CHAOS_FLAGS ?=
chaos:
	assets="$$(bash hack/controlplane.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" $(GO) run ./integration/chaos $(CHAOS_FLAGS)

## chaos-plant: the chaos run's mutation score: each lie of internal/lieplant (premature
## acceptance, an unACKed client, an ignored input, a wrong weight on one xDS flavour, a
## cluster dropped from CDS, a rival's hostname) planted in turn in a publisher built with
## -tags lieplant, one short run each (-plant-duration); writes which the checker caught to
## BENCHMARKS.md and fails unless it caught every one. CHAOS_FLAGS passes flags as for chaos.
## A planted smoke run (TestSmokePlanted) is part of make test.
chaos-plant:
	assets="$$(bash hack/controlplane.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" $(GO) run ./integration/chaos -mutation $(CHAOS_FLAGS)

## chaos-gateways: make chaos with a real data plane (-gateways): Traefik (built by
## hack/gateways.sh, tens of minutes the first time) serves -traefik-maps maps published by a
## second set of replicas, and every request through it is judged against Published (the
## traffic rule). Needs root (ip netns).
chaos-gateways:
	assets="$$(bash hack/controlplane.sh)" && gateways="$$(bash hack/gateways.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" $(GO) run ./integration/chaos -gateways "$$gateways" $(CHAOS_FLAGS)

## unit: the tests of every package except ./integration/... (no control plane), and hack/image's
unit:
	$(GO) test $$($(GO) list ./... | grep -v '/integration') && \
	$(GO) -C hack/image test ./...

## fuzz: every fuzz target of the module (hack/fuzz.sh: the xDS request path, the drain,
## taint and toleration parsers, the claim journal, the replica report decoder, ...), one
## after the other, each for FUZZTIME; FUZZ_PACKAGES and FUZZ_MATCH narrow it, e.g.
## make fuzz FUZZ_PACKAGES=./xds FUZZTIME=10m. Their seed corpora run in make test.
fuzz:
	FUZZTIME="$(FUZZTIME)" GO="$(GO)" bash hack/fuzz.sh

## generate: deepcopy functions, CRDs and the api/client clientset, listers, informers and apply configurations from api/v1beta1
generate:
	bash hack/generate.sh

## docs: regenerate the reference pages made from the code (hack/docgen): docs/reference/flags.md,
## metrics.md, conditions.md, helm-values.md and charts/publisher/README.md; make test fails while
## a committed one is stale (hack/docgen's TestGeneratedPagesAreCurrent)
docs:
	$(GO) run ./hack/docgen

## build: the publisher binary at bin/publisher
build:
	$(GO) build -o bin/publisher ./cmd/publisher

## install-plugin: build the publisher, install it as BINDIR/publisher and link it there as
## kubectl-trafficmap (the kubectl plugin: 'kubectl trafficmap status ...') and
## kubectl_complete-trafficmap (kubectl's completion of the plugin). BINDIR must be on PATH.
PREFIX ?= $(HOME)/.local
BINDIR ?= $(PREFIX)/bin
install-plugin: build
	mkdir -p "$(BINDIR)"
	cp bin/publisher "$(BINDIR)/publisher.tmp" && chmod 0755 "$(BINDIR)/publisher.tmp" && mv "$(BINDIR)/publisher.tmp" "$(BINDIR)/publisher"
	ln -sf publisher "$(BINDIR)/kubectl-trafficmap"
	ln -sf publisher "$(BINDIR)/kubectl_complete-trafficmap"

## plugin-archives: the krew archives plugins/trafficmap.yaml names, bin/publisher_OS_ARCH.tar.gz,
## and their bin/SHA256SUMS
PLUGIN_PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
plugin-archives:
	for p in $(PLUGIN_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; dir="bin/plugin_$${os}_$${arch}"; \
		mkdir -p "$$dir" && \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w" -o "$$dir/publisher" ./cmd/publisher && \
		tar -C "$$dir" -czf "bin/publisher_$${os}_$${arch}.tar.gz" publisher || exit 1; \
	done
	cd bin && sha256sum publisher_*.tar.gz > SHA256SUMS

## image: the OCI image as a tarball at bin/publisher-image.tar (no container engine needed)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags "-s -w" -o bin/publisher-linux-amd64 ./cmd/publisher
	$(GO) -C hack/image run . --binary "$(CURDIR)/bin/publisher-linux-amd64" --output "$(CURDIR)/bin/publisher-image.tar"

## controlplane: build (or reuse) kube-apiserver and etcd and print their dir
controlplane:
	bash hack/controlplane.sh

## kubectl: build (or reuse) kubectl v1.37.2, the control plane's version, and print its path
kubectl:
	bash hack/kubectl.sh
