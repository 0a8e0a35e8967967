//go:build tools

// Package tools pins CAPD, Cluster API's Docker provider, which
// hack/bench/capd-vs-capct.sh builds to measure CAPCT against it on the same
// machine. The test module v1.13.6 is not served here; v1.13.7 is, and builds
// against the core module v1.13.6 that the quickstart runs (the replace).
package tools

import _ "sigs.k8s.io/cluster-api/test/infrastructure/docker"
