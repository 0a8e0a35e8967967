# Offline node and load-balancer images (docs/node-image.md).
# Included by the repository's Makefile (include hack/node-image/images.mk);
# paths are relative to this file, so it also works with `make -f`.

NODE_IMAGE_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
NODE_IMAGE_ROOT := $(abspath $(NODE_IMAGE_DIR)/../..)

# The Kubernetes version must equal the k8s.io/kubernetes pin of
# hack/tools/kubernetes/go.mod: the binaries are built from that module.
NODE_KUBERNETES_VERSION ?= v1.35.4
NODE_IMAGE ?= capct/node:$(NODE_KUBERNETES_VERSION)
# Empty: capct/haproxy:<major.minor of Debian's haproxy>, e.g. capct/haproxy:2.6
LB_IMAGE ?=
NODE_IMAGE_TEST_TIMEOUT ?= 30m

.PHONY: node-image lb-image test-node-image

node-image: ## Build the node image capct/node:<kubernetes version> from source, offline
	KUBERNETES_VERSION=$(NODE_KUBERNETES_VERSION) NODE_IMAGE=$(NODE_IMAGE) \
		$(NODE_IMAGE_ROOT)/hack/node-image/build-node-image.sh node

lb-image: ## Build the load-balancer image capct/haproxy:<haproxy version>, offline
	LB_IMAGE=$(LB_IMAGE) $(NODE_IMAGE_ROOT)/hack/node-image/build-node-image.sh lb

test-node-image: node-image lb-image ## Boot node images with kubeadm and test the LB image (needs Docker)
	cd $(NODE_IMAGE_ROOT) && NODE_IMAGE=$(NODE_IMAGE) LB_IMAGE=$(LB_IMAGE) \
		go test ./test/nodeimage/... -count=1 -v -timeout $(NODE_IMAGE_TEST_TIMEOUT)
