# CAPCT's images, built offline (docs/node-image.md): the node, the
# control plane's load balancer, the pod sandbox the node preloads, and the
# image registry the pull tests run (docs/registries.md).
# Included by the repository's Makefile (include images/images.mk); paths
# are relative to this file, so it also works with `make -f`.

IMAGES_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
IMAGES_ROOT := $(abspath $(IMAGES_DIR)/..)

# Any k8s.io/kubernetes release the Go module proxy serves
# (make node-image KUBERNETES_VERSION=v1.36.3); by default the pin of
# hack/tools/kubernetes/go.mod, the version the tests run.
KUBERNETES_VERSION ?= $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ { print $$2; exit }' $(IMAGES_ROOT)/hack/tools/kubernetes/go.mod)
NODE_IMAGE ?= capct/node:$(KUBERNETES_VERSION)
# Empty: capct/haproxy:<major.minor of Debian's haproxy>, e.g. capct/haproxy:2.6
LB_IMAGE ?=
NODE_IMAGE_TEST_TIMEOUT ?= 30m

# Empty: capct/registry:<version of hack/tools/registry's pin>, e.g. capct/registry:3.1.2
REGISTRY_IMAGE ?=

.PHONY: node-image lb-image registry-image test-node-image

node-image: ## Build the node image capct/node:<KUBERNETES_VERSION> from source, offline, for any Kubernetes release the module proxy serves (images/node)
	KUBERNETES_VERSION=$(KUBERNETES_VERSION) NODE_IMAGE=$(NODE_IMAGE) \
		$(IMAGES_ROOT)/images/node/build.sh

lb-image: ## Build the load-balancer image capct/haproxy:<haproxy version>, offline (images/haproxy)
	LB_IMAGE=$(LB_IMAGE) $(IMAGES_ROOT)/images/haproxy/build.sh

registry-image: ## Build the image registry capct/registry:<version>, the distribution project's server from source, for the pull tests and a local registry (images/registry, docs/registries.md)
	REGISTRY_IMAGE=$(REGISTRY_IMAGE) $(IMAGES_ROOT)/images/registry/build.sh

test-node-image: node-image lb-image ## Boot a cluster of node images behind the LB image, with the configurations CAPCT renders (needs Docker)
	cd $(IMAGES_ROOT) && NODE_IMAGE=$(NODE_IMAGE) LB_IMAGE=$(LB_IMAGE) \
		go test -tags=engine ./test/nodeimage/... -count=1 -v -timeout $(NODE_IMAGE_TEST_TIMEOUT)
