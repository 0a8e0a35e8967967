// Package cluster is the assertion of make test-multihost's real cluster
// on two engines (docs/multihost.md, section 7): the management cluster
// capct-mhtest and the cluster mhtest, whose machines run on this
// machine's engine and on engine 2 (hack/multihost/engine.sh), joined by
// an attachable overlay network. hack/multihost/cluster-test.sh brings them
// up through the quickstart's machinery and runs this package's test with
// the build tag realcluster; the test loses and brings back engine 2
// through engine.sh stop and start, and deletes the cluster through CAPCT.
package cluster
