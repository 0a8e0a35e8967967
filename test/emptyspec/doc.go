// Package emptyspec is make test-quickstart's check of the default that
// works (issue #39): a ContainerCluster with an empty spec under a Cluster
// reaches Provisioned on a fresh quickstart host, on the load-balancer
// image CAPCT defaults to and builds (naming.DefaultLoadBalancerImage,
// make lb-image), and leaves nothing behind when it is deleted.
// hack/quickstart/quickstart.sh's test flow runs this package's test with
// the build tag realcluster against the quickstart's management cluster.
package emptyspec
