# Release artifacts (included by the Makefile).

VERSION ?= v0.1.0
RELEASE_DIR ?= out

.PHONY: release-manifests
release-manifests: ## Write clusterctl's repository layout for VERSION (default v0.1.0) to out/infrastructure-container/VERSION
	hack/release-manifests.sh $(VERSION) $(RELEASE_DIR)
