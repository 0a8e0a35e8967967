// Package loadbalancer runs the HAProxy container in front of a cluster's
// control-plane machines. The ContainerCluster controller ensures it and
// keeps its backends current; a control-plane machine's termination syncs
// it too, so that the machine leaves the load balancer before its container
// goes. The configuration is rewritten, and HAProxy reloaded, only when its
// content changes: needless reloads reset health-check state.
package loadbalancer
