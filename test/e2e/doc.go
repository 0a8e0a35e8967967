// Package e2e runs Cluster API's own end-to-end specs (sigs.k8s.io/cluster-api/test/e2e)
// against CAPCT, on a management cluster made by the quickstart's machinery
// (hack/e2e.sh, make test-e2e), offline: every provider comes from local
// clusterctl repositories and every image is built on this machine.
//
// It is its own Go module so that the test framework's dependencies (kind,
// etcd clients, ...) never enter CAPCT's, the way CAPV keeps them apart.
package e2e
