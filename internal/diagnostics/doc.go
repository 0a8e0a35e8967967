// Package diagnostics holds what CAPCT keeps to explain itself and its
// machines: the permissions of the manager's secure diagnostics endpoint,
// and the logs of a machine that failed for good.
//
// The secure diagnostics endpoint (--diagnostics-address, served over HTTPS
// unless --insecure-diagnostics): Cluster API's flags.GetManagerOptions puts
// controller-runtime's authentication and authorization filter in front of
// /metrics and /debug: each request's bearer token goes to a TokenReview and
// the caller's right to GET the path to a SubjectAccessReview, both made
// with the manager's own credentials. Without the two permissions below
// every scrape fails. A scraper needs a ClusterRole that allows GET on the
// /metrics non-resource URL: config/rbac/metrics_reader_role.yaml ships one
// (capct-metrics-reader once installed) for users to bind. The scrape test
// in this package checks both against a real API server.
//
// A failed machine's logs (CollectNodeLogs): before a machine that failed
// for good is deleted, and its container with it, the end of its node's
// journal and the marks of its last bootstrap attempt are read, bounded, for
// the caller to keep (the ContainerMachinePool keeps them in a Secret,
// docs/machinepool.md). Reading never changes the node and never fails the
// caller: what cannot be read is noted instead.
package diagnostics

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
