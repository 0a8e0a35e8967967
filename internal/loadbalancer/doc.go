// Package loadbalancer runs the HAProxy container in front of a cluster's
// control-plane machines. The ContainerCluster controller ensures it and
// keeps its backends current; a control-plane machine's termination syncs
// it too, so that the machine leaves the load balancer before its container
// goes. The configuration is rewritten, and HAProxy reloaded, only when its
// content changes: needless reloads reset health-check state.
//
// Reloads are verified. A new configuration is first written to a
// candidate path and checked with `haproxy -c` in the container; one that
// HAProxy refuses never replaces the running one (LoadBalancerConfigInvalid).
// Every rendered configuration ends with an empty backend named after its
// hash, and after the SIGHUP the statistics page (:8404/stats, which custom
// templates must keep) must list that backend, or the reload is reported as
// failed (LoadBalancerReloadFailed) and signalled again on the next retry.
package loadbalancer
