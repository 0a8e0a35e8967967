package machineprovider

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// Claim is a machine as the provider sees it: the objects its container is
// derived from. Everything about the container (its name, owner, labels,
// role and image) follows from them, so that a launch interrupted by a
// crash finds the same container again.
type Claim struct {
	Cluster          *clusterv1.Cluster
	ContainerCluster *infrav1.ContainerCluster
	// Machine owns the ContainerMachine; nil until Cluster API sets the
	// owner reference.
	Machine          *clusterv1.Machine
	ContainerMachine *infrav1.ContainerMachine
	// Version is the Kubernetes version the machine runs, e.g. v1.35.4.
	Version string
}

// ContainerName is the machine's container name (see naming.ContainerName).
func (c *Claim) ContainerName() string {
	return naming.ContainerName(c.ContainerMachine.Namespace, c.Cluster.Name, c.ContainerMachine.Name)
}

// ProviderID is the provider ID of the machine: container:///<container>.
func (c *Claim) ProviderID() string {
	return naming.ProviderID(c.ContainerName())
}

// Owner is the owner of the machine's container. It owns nothing until the
// ContainerCluster has its cluster ID, which it gets before any machine of
// the cluster is launched.
func (c *Claim) Owner() container.Owner {
	return naming.ClusterOwner(c.Cluster, c.ContainerCluster).ForMachine(c.ContainerMachine.Name)
}

// IsControlPlane reports whether the machine runs a control-plane node.
func (c *Claim) IsControlPlane() bool {
	_, ok := c.ContainerMachine.Labels[clusterv1.MachineControlPlaneLabel]
	if !ok && c.Machine != nil {
		_, ok = c.Machine.Labels[clusterv1.MachineControlPlaneLabel]
	}
	return ok
}

// RequestedFailureDomain is the failure domain the machine is asked to run
// in: its Machine's spec.failureDomain, else, for a MachinePool's member,
// whose Machine Cluster API makes with none, the one its pool chose
// (infrav1.FailureDomainAnnotation); "" for none.
func (c *Claim) RequestedFailureDomain() string {
	if c.Machine != nil && c.Machine.Spec.FailureDomain != "" {
		return c.Machine.Spec.FailureDomain
	}
	return c.ContainerMachine.Annotations[infrav1.FailureDomainAnnotation]
}

// Role is the container role of the machine.
func (c *Claim) Role() container.Role {
	if c.IsControlPlane() {
		return container.RoleControlPlane
	}
	return container.RoleWorker
}

// ContainerLabels are the labels of the machine's container: its owner's,
// and its pool's, which a warm machine carries from the start (its
// container's labels never change), so that the pool's deletion finds it.
func (c *Claim) ContainerLabels() map[string]string {
	labels := c.Owner().Labels()
	pool := c.ContainerMachine.Labels[clusterv1.MachinePoolNameLabel]
	if pool == "" {
		pool = c.ContainerMachine.Labels[infrav1.WarmPoolLabel]
	}
	if pool != "" {
		labels[container.LabelPool] = pool
	}
	return labels
}

// Warm reports whether the machine is a pool's warm machine, not yet
// promoted (infrav1.WarmPoolLabel): it is launched without a Machine or
// bootstrap data, and goes no further until its pool promotes it.
func (c *Claim) Warm() bool { return infrav1.IsWarm(c.ContainerMachine) }

// InvalidSpecError is input that can never succeed, such as an unparseable
// version; retrying will not help, so callers stop retrying.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return e.Err.Error() }
func (e *InvalidSpecError) Unwrap() error { return e.Err }

// Image is the machine's node image: spec.image, or CAPCT's node image for
// the machine's Kubernetes version.
func (c *Claim) Image() (string, error) {
	if c.ContainerMachine.Spec.Image != "" {
		return c.ContainerMachine.Spec.Image, nil
	}
	if c.Version == "" {
		return "", &InvalidSpecError{Err: fmt.Errorf("no image: spec.image is empty and Machine %s has no Kubernetes version", c.machineName())}
	}
	image, err := naming.DefaultNodeImage(c.Version)
	if err != nil {
		return "", &InvalidSpecError{Err: fmt.Errorf("no image for Machine %s: %w", c.machineName(), err)}
	}
	return image, nil
}

func (c *Claim) machineName() string {
	if c.Machine == nil {
		return "<none>"
	}
	return c.Machine.Namespace + "/" + c.Machine.Name
}

// containerSpec is the container the claim asks for, from image.
func (c *Claim) containerSpec(image string) container.MachineSpec {
	cm := c.ContainerMachine
	return container.MachineSpec{
		Name:         c.ContainerName(),
		Image:        image,
		Network:      naming.NetworkName(c.Cluster, c.ContainerCluster),
		Labels:       c.ContainerLabels(),
		Role:         c.Role(),
		KindNode:     true,
		IPFamily:     naming.IPFamily(c.Cluster, c.ContainerCluster),
		ExtraMounts:  mounts(cm.Spec.ExtraMounts),
		PortMappings: portMappings(cm.Spec.ExtraPortMappings),
		Resources:    resources(cm.Spec.Resources),
	}
}

// portMappings are a machine's extraPortMappings as the engine publishes
// them: each on its fixed host port, which the engine keeps in the
// container's configuration, so that the port comes back with the
// container after a restart of the engine (docs/port-mappings.md).
func portMappings(in []infrav1.PortMapping) []container.PortMapping {
	out := make([]container.PortMapping, 0, len(in))
	for _, p := range in {
		out = append(out, container.PortMapping{
			ContainerPort: int(p.ContainerPort),
			HostPort:      int(p.HostPort),
			HostIP:        p.EffectiveListenAddress(),
			Protocol:      strings.ToLower(string(p.EffectiveProtocol())),
		})
	}
	return out
}

// hostPortInUse turns the engine's refusal of a host port of the machine's
// extraPortMappings into a wait naming the field: another container or a
// program of the host holds the port, and the container, made but not
// started, starts once it is free. It returns nil for any other error.
func (c *Claim) hostPortInUse(err error) error {
	refused, ok := container.HostPortInUse(err)
	if !ok {
		return nil
	}
	what := fmt.Sprintf("spec.extraPortMappings: %v", refused)
	for i, p := range c.ContainerMachine.Spec.ExtraPortMappings {
		if refused.Matches(portMappings([]infrav1.PortMapping{p})[0]) {
			what = fmt.Sprintf("%s: host port %s is in use", field.NewPath("spec", "extraPortMappings").Index(i), policy.Describe(p))
			break
		}
	}
	return &WaitError{Reason: infrav1.HostPortInUseReason, RequeueAfter: hostRecheck, Message: what +
		": another container or program of the container host holds it, and the machine's container starts once it is free. " +
		"A host port serves one machine per engine: free it, or replace the machine with one that publishes another port"}
}

func mounts(in []infrav1.Mount) []container.Mount {
	out := make([]container.Mount, 0, len(in))
	for _, m := range in {
		out = append(out, container.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return out
}

func resources(r *infrav1.MachineResources) container.Resources {
	var out container.Resources
	if r == nil {
		return out
	}
	if r.CPUs != nil {
		out.MilliCPUs = r.CPUs.MilliValue()
	}
	if r.Memory != nil {
		out.MemoryBytes = r.Memory.Value()
	}
	return out
}
