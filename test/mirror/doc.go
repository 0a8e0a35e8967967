// Package mirror is make test-quickstart's check that a node pulls a
// workload image through a registry mirror (issue #39): the test, built
// with the tag realcluster, starts a registry built from source
// (internal/test/registry) on the workload cluster's container network,
// pushes an image to it as docker.io/library/busybox:capct-mirror, sets
// the ContainerCluster's spec.registryMirrors to send docker.io to it, and
// scales the MachineDeployment up by one. A pod on the new Node must run
// that image (the host has no internet, so only the mirror can serve it),
// the registry's access log must show the Node's requests, and a pod on a
// Node made before the change must fail to pull. Then everything is put
// back as it was. hack/quickstart/quickstart.sh's test flow runs it
// against the quickstart's clusters.
//
// The package's plain Go code reads the registry's access log, with its
// table test in every `go test`.
package mirror
