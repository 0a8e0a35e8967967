// Module pause is the pod sandbox program of the node image (see main.go).
// It is CAPCT's own program, not a pin of an upstream tool, so it lives beside
// its image in images/pause rather than in hack/tools (build.sh says more).
module github.com/capct/cluster-api-provider-container/images/pause

go 1.26
