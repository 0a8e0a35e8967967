// Package capacity derives what Cluster API's opt-in autoscaling from zero
// asks of an infrastructure template (status.capacity and status.nodeInfo)
// from the resources a machine gets. The cluster autoscaler reads them to
// picture the node it would add to a node group that has no node to look
// at; without cpu and memory it never scales such a group up from zero.
//
// It is pure, so that the ContainerMachineTemplate controller and the
// ContainerMachinePool controller report the same figures for the same
// machine spec. See docs/templates.md#scale-from-zero.
package capacity

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// OperatingSystem is the operating system of every node: node images are
// Debian with systemd, and a container shares its host's Linux kernel.
const OperatingSystem = "linux"

// Of returns the capacity of one machine whose container has resources:
// cpu from resources.cpus and memory from resources.memory, each only when
// set, under the contract's resource names (cpu, memory) as quantities.
//
// It is nil when neither is set. An unlimited container may use the whole
// host, but so may every other node on it: the host's CPUs and memory are
// no node's own, and reporting them would have the autoscaler count each
// node it adds as a whole host's worth of room that the host does not
// have. A template without limits therefore gives the autoscaler nothing,
// and a node group of it scales from zero only with the capacity
// annotations on its MachineDeployment or MachinePool.
//
// The pod count is left out on purpose: the kubelet's maxPods is set by
// the bootstrap configuration (a KubeadmConfigTemplate), which the
// infrastructure template does not see, and the autoscaler fills pods from
// its maxPods annotation, or its default of 110 (the kubelet's default,
// which CAPCT's flavors keep), over whatever status.capacity says.
func Of(resources *infrav1.MachineResources) corev1.ResourceList {
	if resources == nil {
		return nil
	}
	var list corev1.ResourceList
	add := func(name corev1.ResourceName, q *resource.Quantity) {
		if q == nil {
			return
		}
		if list == nil {
			list = corev1.ResourceList{}
		}
		list[name] = q.DeepCopy()
	}
	add(corev1.ResourceCPU, resources.CPUs)
	add(corev1.ResourceMemory, resources.Memory)
	return list
}

// NodeInfo returns the nodeInfo of every machine: its operating system.
// The architecture is left out: the engines do not report theirs through
// the runtime seam yet, and a wrong one would be worse than none, since
// the autoscaler would then label the node it pictures with it (without
// one it assumes amd64, or its CAPI_SCALE_ZERO_DEFAULT_ARCH).
func NodeInfo() *infrav1.NodeInfo {
	return &infrav1.NodeInfo{OperatingSystem: OperatingSystem}
}
