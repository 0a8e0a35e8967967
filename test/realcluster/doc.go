// Package realcluster is what the Go tests of real clusters share: the
// tests of make test-restart (test/restart), make test-scale-out
// (test/scaleout), make test-chaos (test/chaos) and the two-engine cluster
// of make test-multihost (test/multihost/cluster). Their scripts bring the clusters up through the
// quickstart's machinery and pass where they are in REALCLUSTER_*
// variables (Env); this package connects to them (the management cluster
// with controller-runtime, the workload cluster with client-go, engines
// with Docker's client, pods through the quickstart's kubectl) and holds
// the pure derivations the tests assert on, each with its table test here.
//
// The tests themselves carry the build tag realcluster, which only those
// make targets pass: under a plain `go test ./...` they are not compiled,
// so they can neither run against nothing nor skip.
package realcluster
