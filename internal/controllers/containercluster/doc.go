// Package containercluster reconciles ContainerClusters: the cluster's
// container network, the HAProxy load balancer in front of the control
// plane, the control-plane endpoint, and the removal of containers whose
// ContainerMachine is gone.
package containercluster
