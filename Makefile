# CAPCT: a Cluster API infrastructure provider whose machines are containers.
# `make help` lists the targets. Everything a fresh machine needs is set up
# by the targets themselves (hack/ensure-*.sh); nothing is downloaded from
# anywhere but the Go module proxy and Debian's package mirror.

SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
CAPCT_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/capct
export CAPCT_CACHE

CONTROLLER_GEN_VERSION := v0.20.1
CONTROLLER_GEN := $(CAPCT_CACHE)/bin/controller-gen-$(CONTROLLER_GEN_VERSION)

# The tests that need a real engine carry the `engine` build tag, so that a
# plain `go test ./...` runs every unit and envtest test on a machine without
# one; the targets that run on a real engine pass it (docs/environment.md).
GO_TEST_TAGS ?= engine
# Packages whose tests run in `go test`; the node image tests have their own
# target because they build images first, and the multihost ones because
# they need a second engine (test-multihost). Listed with the tags, since a
# package whose every file is tagged is not there without them.
GO_TEST_PACKAGES = $(shell go list -tags=$(GO_TEST_TAGS) ./... | grep -v -e /test/nodeimage -e /test/multihost)
GO_TEST_TIMEOUT ?= 30m
# The race detector runs under every Go test: a data race in a controller is
# a real bug. It needs cgo (hack/ensure-cgo.sh).
GO_TEST_FLAGS ?= -race
FUZZ_TIME ?= 10s

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

## --------------------------------------------------------------------------
## Build and generate

# The manager's version, stamped into the binary and logged at start.
VERSION_STAMP ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
MANAGER_LDFLAGS = -X main.version=$(VERSION_STAMP)

.PHONY: build
build: ## Build the manager binary into bin/manager, its version stamped in (VERSION_STAMP)
	CGO_ENABLED=0 go build -ldflags "$(MANAGER_LDFLAGS)" -o bin/manager .

$(CONTROLLER_GEN): hack/tools/controller-gen/go.mod
	mkdir -p $(dir $@)
	cd hack/tools/controller-gen && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs, RBAC and webhook manifests, the template flavors and the LB image's haproxy.cfg
	$(CONTROLLER_GEN) object paths=./api/... paths=./exp/api/...
	$(CONTROLLER_GEN) crd paths=./api/... paths=./exp/api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./internal/... paths=./exp/... output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) webhook paths=./internal/webhooks/... output:webhook:artifacts:config=config/webhook
	hack/webhook-match-conditions.sh config/webhook/manifests.yaml
	hack/templates.sh
	go test ./internal/loadbalancer -run '^TestImageConfigIsRendered$$' -count=1 -update >/dev/null

# Every script: the .sh files (sourced libraries have no shebang) and the
# files that start with a shell's shebang.
SHELL_SCRIPTS = $(sort $(shell git ls-files '*.sh'; git grep -lIE '^\#!(/usr/bin/env |/bin/)(bash|sh)' -- . ':!*.go' ':!*.md' ':!*.yaml' ':!*.yml'))

# golangci-lint (.golangci.yml) runs once per Go module, from its folder:
# the provider, the e2e suite (behind its build tag) and the pause program.
# The hack/tools modules only pin upstream tools and are not linted.
.PHONY: verify
verify: generate ## Fail when generated files are stale, code is not gofmt'd, go vet or golangci-lint complains, shellcheck finds a problem in a script, or a document names a test or links a file that does not exist
	@if [ -n "$$(git status --porcelain -- api exp config templates images test/e2e/data)" ]; then \
		echo "Generated files are stale; run 'make generate' and commit:"; git status --porcelain -- api exp config templates images test/e2e/data; exit 1; fi
	@if [ -n "$$(gofmt -l $$(git ls-files '*.go'))" ]; then \
		echo "Not gofmt'd:"; gofmt -l $$(git ls-files '*.go'); exit 1; fi
	@# Without tags (what builds on a machine without an engine), then with
	@# the engine's and the real clusters' (test/realcluster's packages).
	go vet ./...
	go vet -tags=engine,realcluster ./...
	cd hack/tools/kubernetes && go mod verify >/dev/null
	@# Every module's run, even after one fails: one verify lists all findings.
	lint="$$(hack/ensure-golangci-lint.sh)" || exit 1; ok=true; \
		"$$lint" run ./... || ok=false; \
		(cd test/e2e && "$$lint" run --build-tags e2e ./...) || ok=false; \
		(cd images/pause && "$$lint" run ./...) || ok=false; \
		$$ok
	hack/ensure-shellcheck.sh
	shellcheck -x $(SHELL_SCRIPTS)
	hack/verify-docs.sh

## --------------------------------------------------------------------------
## Test

.PHONY: test
test: ## Run every test: unit, envtest, Docker, fuzz, the node images, the whole quickstart, an engine restart, a scale-out on real nodes, the manager killed 20 times under a scale-out and a deletion, Cluster API's QuickStart, MachinePool and upgrade e2e specs, a cluster on Podman, and a second engine over TCP+TLS (sets up Docker, Podman and envtest itself)
	MAKE="$(MAKE)" hack/make-each.sh verify test-go test-fuzz test-node-image test-quickstart test-restart \
		test-scale-out test-e2e-subset test-podman test-multihost

.PHONY: test-go
test-go: ## Run the Go tests, with the race detector, against a real API server and Docker engine
	hack/ensure-docker.sh
	@# A test-multihost killed before its end leaves its second engine and the
	@# host's engine in the swarm it made; the engine tests need it in none.
	hack/multihost/engine.sh down
	hack/ensure-cgo.sh
	@# A lifecycle test preloads images into the real node image's containerd,
	@# and the pull tests pull from a registry built from source; built here,
	@# a cold build does not count against the tests' timeout.
	$(MAKE) node-image
	$(MAKE) registry-image
	KUBEBUILDER_ASSETS="$$(hack/ensure-envtest.sh)" CGO_ENABLED=1 go test -tags=$(GO_TEST_TAGS) $(GO_TEST_FLAGS) -count=1 -timeout $(GO_TEST_TIMEOUT) $(GO_TEST_PACKAGES)

.PHONY: test-fuzz
test-fuzz: ## Run the fuzzers (node IPAM, node addresses, bootstrap data and script, the policy) for a short time each
	go test -run='^$$' -fuzz=FuzzAllocator -fuzztime=$(FUZZ_TIME) ./internal/ipam
	go test -run='^$$' -fuzz=FuzzPick -fuzztime=$(FUZZ_TIME) ./internal/nodeaddr
	go test -run='^$$' -fuzz=FuzzPlan -fuzztime=$(FUZZ_TIME) ./internal/provisioning
	go test -run='^$$' -fuzz=FuzzScriptRoundTrip -fuzztime=$(FUZZ_TIME) ./internal/provisioning
	go test -run='^$$' -fuzz=FuzzMachineSpec -fuzztime=$(FUZZ_TIME) ./internal/policy

.PHONY: bench
bench: ## Run the Go benchmarks (IPAM allocator, runtime seam overhead)
	hack/ensure-docker.sh
	go test -tags=$(GO_TEST_TAGS) -run='^$$' -bench=. -benchmem ./internal/ipam ./internal/container/...

# make bench-scale: one run per count, each its own process (its own peak
# RSS) against its own envtest API server, bounded by BENCH_SCALE_TIMEOUT.
# The fake engine's bootstraps cost the host nothing, so the manager's
# --max-concurrent-bootstraps bound is off by default: with it (4) the run
# measures the bound (docs/bench.md). BENCH_SCALE_FLAGS=-max-concurrent-bootstraps=4
# with BENCH_SCALE_OUT=out/bench/bounded measures it.
BENCH_SCALE_COUNTS ?= 100 300 1000
BENCH_SCALE_CLUSTERS ?= 10
BENCH_SCALE_TIMEOUT ?= 9m
BENCH_SCALE_FLAGS ?= -max-concurrent-bootstraps=0
BENCH_SCALE_OUT ?= out/bench

.PHONY: bench-scale
bench-scale: ## CAPCT's and Cluster API's reconcilers on envtest with the fake engine: BENCH_SCALE_COUNTS machines over 10 clusters; out/bench/scale.json and profiles
	mkdir -p $(BENCH_SCALE_OUT)
	rm -f $(BENCH_SCALE_OUT)/scale.json
	go build -o bin/bench-scale ./test/bench/scale
	assets="$$(hack/ensure-envtest.sh)"; \
	for n in $(BENCH_SCALE_COUNTS); do \
		echo "== $$n machines (controller logs: $(BENCH_SCALE_OUT)/scale-$$n.log)"; \
		KUBEBUILDER_ASSETS="$$assets" bin/bench-scale -machines $$n -clusters $(BENCH_SCALE_CLUSTERS) \
			-timeout $(BENCH_SCALE_TIMEOUT) -out $(BENCH_SCALE_OUT) $(BENCH_SCALE_FLAGS) 2>$(BENCH_SCALE_OUT)/scale-$$n.log || exit 1; \
	done

include hack/release.mk
include images/images.mk
include hack/quickstart.mk
