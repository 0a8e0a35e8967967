// Module pause builds the pod sandbox program of the node image (see main.go).
module github.com/capct/cluster-api-provider-container/hack/tools/pause

go 1.26
