# `make quickstart` and its pieces (included by the Makefile). See docs/quickstart.md.

QUICKSTART_VERSION ?= v0.1.0
MANAGER_IMAGE ?= docker.io/capct/manager:$(QUICKSTART_VERSION)

.PHONY: docker-build
docker-build: ## Build CAPCT's manager image MANAGER_IMAGE (default docker.io/capct/manager:v0.1.0) FROM scratch
	hack/ensure-docker.sh
	CGO_ENABLED=0 go build -trimpath -ldflags "$(MANAGER_LDFLAGS)" -o bin/manager .
	tar -c Dockerfile bin/manager | DOCKER_BUILDKIT=0 docker build -q -t $(MANAGER_IMAGE) - >/dev/null
	@echo "built $(MANAGER_IMAGE)"

.PHONY: quickstart-capi-images
quickstart-capi-images: ## Build Cluster API's controller images and clusterctl from hack/tools/capi (cached)
	hack/quickstart/build-capi-images.sh

.PHONY: quickstart-repositories
quickstart-repositories: ## Lay out clusterctl's local repositories (CAPI, CAPCT via release-manifests) and out/quickstart/clusterctl.yaml
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) hack/quickstart/capi-repository.sh

.PHONY: quickstart-mgmt-up
quickstart-mgmt-up: ## Boot the management cluster (one capct/node container) and load the controller images
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) hack/quickstart/mgmt-cluster.sh up

.PHONY: quickstart-mgmt-down
quickstart-mgmt-down: ## Remove the management cluster's container, network and volume
	hack/quickstart/mgmt-cluster.sh down

.PHONY: quickstart-cert-manager
quickstart-cert-manager: ## Build cert-manager's three binaries and images from hack/tools/certmanager, and its manifest
	hack/quickstart/build-cert-manager.sh

.PHONY: quickstart
quickstart: ## Offline: management cluster, clusterctl init, workload cluster "demo" of 5 container nodes, traffic checks
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) hack/quickstart/quickstart.sh up

.PHONY: quickstart-down
quickstart-down: ## Delete "demo" through the management cluster, then the management cluster; fail if anything is left
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) hack/quickstart/quickstart.sh down

.PHONY: test-quickstart
test-quickstart: ## The whole quickstart non-interactively: up, scale MD 2->3 and MP 2->1, a ContainerCluster with an empty spec Provisioned and deleted (test/emptyspec), a pod pulling through a registry mirror on a Node made for it and failing on an old one (test/mirror), down, nothing left
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-qstest QUICKSTART_CLUSTER=qstest \
		QUICKSTART_OUT=$(CURDIR)/out/quickstart-test hack/quickstart/quickstart.sh test

# The Docker backend's tests that hold for any engine it drives: the runtime
# behaviour suite and the exec, event, address and file tests. The others
# check Docker's own flags and its default bridge (docs/runtime.md).
PODMAN_GO_TESTS ?= ^(TestSuite|TestExecLargeBinaryStdinRoundTrips|TestExecTimeoutIsPrompt|TestExecStderrIsBounded|TestExecTimeoutNamesNoScript|TestOutOfBandRemovalIsAnEventWithin2s|TestParallelCreatesGetDistinctAddresses|TestDualStackNetwork|TestFilesOnTmpfsAreVisibleInside|TestExtraMountsBindExistingHostPathsOnly)$$

# The Kubernetes releases make test-versions proves, one after another; each
# needs its node image, which the run builds (docs/versions.md).
TEST_VERSIONS ?= $(KUBERNETES_VERSION)

.PHONY: test-versions
test-versions: ## For each of TEST_VERSIONS (default: the pinned one): its node image, a cluster of 1 control plane, 1 MachineDeployment and 1 MachinePool worker, pod and Service traffic, deletion with nothing left
	for v in $(TEST_VERSIONS); do \
		echo "test-versions: Kubernetes $$v" >&2; \
		KUBERNETES_VERSION=$$v QUICKSTART_VERSION=$(QUICKSTART_VERSION) QUICKSTART_WORKERS=1 MGMT_NAME=capct-vstest \
			QUICKSTART_CLUSTER=vstest QUICKSTART_OUT=$(CURDIR)/out/versions-test/$$v hack/quickstart/quickstart.sh smoke || exit 1; \
	done

.PHONY: test-podman
test-podman: ## Podman as the engine: the runtime behaviour suite against rootful Podman, then a quickstart cluster of 1+1+1 nodes on it with traffic proven, and down
	hack/ensure-podman.sh
	CAPCT_ENGINE=podman go test -tags=engine -count=1 -run '$(PODMAN_GO_TESTS)' ./internal/container/docker
	CAPCT_ENGINE=podman QUICKSTART_VERSION=$(QUICKSTART_VERSION) QUICKSTART_WORKERS=1 MGMT_NAME=capct-pmtest QUICKSTART_CLUSTER=pmtest \
		QUICKSTART_OUT=$(CURDIR)/out/podman-test hack/quickstart/quickstart.sh smoke

.PHONY: test-multihost
test-multihost: ## A second engine in a network namespace of its own, reached only over TCP+TLS: the runtime behaviour suite through engines.Connect, the overlay across both, a lost engine, the load balancer's image copied to it, and a real cluster on both engines (the Go test test/multihost/cluster); the engine removed after (docs/multihost.md)
	hack/ensure-docker.sh
	hack/multihost/engine.sh up
	set -a; . out/multihost/engine.env; set +a; \
		go test -tags=engine -count=1 -v ./test/multihost/ && \
		QUICKSTART_VERSION=$(QUICKSTART_VERSION) hack/multihost/cluster-test.sh; rc=$$?; \
		hack/multihost/engine.sh down; exit $$rc

.PHONY: test-restart
test-restart: ## A real cluster survives an engine restart: stops and starts dockerd (run it alone); the Go test test/restart asserts addresses, ports, Nodes, pods, traffic
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-rstest QUICKSTART_CLUSTER=rstest \
		QUICKSTART_OUT=$(CURDIR)/out/restart-test hack/quickstart/restart-test.sh

.PHONY: test-chaos
test-chaos: ## CAPCT's manager SIGKILLed at 20 random points during a MachinePool 0->10 and the cluster's deletion, the engine restarted once mid-scale; then no leaked container or network, no duplicate pod CIDR, every Node Ready (run it alone; the Go test test/chaos)
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-chtest QUICKSTART_CLUSTER=chtest \
		QUICKSTART_OUT=$(CURDIR)/out/chaos-test hack/quickstart/chaos-test.sh

.PHONY: test-scale-out
test-scale-out: ## MachinePool 0->10 real nodes and back, then again with the host's inotify instances nearly exhausted (the Go test test/scaleout), then test-chaos's test on the same clusters (stops the engine: run it alone)
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-sotest QUICKSTART_CLUSTER=sotest \
		QUICKSTART_OUT=$(CURDIR)/out/scale-out-test hack/quickstart/scale-out-test.sh test

.PHONY: bench-scale-out-profile
bench-scale-out-profile: ## MachinePool 0->10 on real nodes with the manager's pprof on: goroutine and CPU profiles and each machine's phase timeline (out/scale-out-test/profile)
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-sotest QUICKSTART_CLUSTER=sotest \
		QUICKSTART_OUT=$(CURDIR)/out/scale-out-test hack/quickstart/scale-out-test.sh profile

.PHONY: bench-node-capacity
bench-node-capacity: ## How many real nodes this host runs at once, all Ready (MachinePool to 10, 20, 30), and what runs out first
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) MGMT_NAME=capct-sotest QUICKSTART_CLUSTER=sotest \
		QUICKSTART_OUT=$(CURDIR)/out/scale-out-test hack/quickstart/scale-out-test.sh capacity

.PHONY: bench-capd
bench-capd: ## CAPCT against CAPD side by side, ABAB (ROUNDS=3): create, MachinePool 0->N->0 (N=10), delete, the floor, audit-log writes, managers' CPU and memory; out/bench/results.json
	hack/bench/capd-vs-capct.sh

# E2E_LABELS: a ginkgo label filter over the specs; empty runs every one
# (docs/e2e.md lists the labels).
E2E_LABELS ?=
# What `make test` runs of them: the wiring, MachinePools, and one
# Kubernetes upgrade on real nodes, within CI's time.
E2E_TEST_SUBSET ?= quick-start || machine-pool || cluster-upgrade

.PHONY: test-e2e
test-e2e: ## Cluster API's own e2e specs (test/e2e), every one or E2E_LABELS, on a quickstart-made management cluster, offline; junit in out/e2e/artifacts
	QUICKSTART_VERSION=$(QUICKSTART_VERSION) E2E_LABELS='$(E2E_LABELS)' hack/e2e.sh

.PHONY: test-e2e-subset
test-e2e-subset: ## The e2e specs `make test` runs: QuickStart with the resilience checks, MachinePool, and the upgrade from v1.35.4 to v1.36.3
	$(MAKE) test-e2e E2E_LABELS='$(E2E_TEST_SUBSET)'
