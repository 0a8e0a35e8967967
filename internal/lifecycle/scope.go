package lifecycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// WorkloadClientFunc returns a client of a workload cluster, such as Cluster
// API's ClusterCache.GetClient.
type WorkloadClientFunc func(ctx context.Context, cluster client.ObjectKey) (client.Client, error)

// Deps are what the phases share across machines.
type Deps struct {
	// Client reads and writes the management cluster.
	Client client.Client
	// Engines are the container engines machines run on; each phase uses
	// the machine's own, MachineScope.Runtime.
	Engines engines.Set
	// Clock is the only source of time for timeouts.
	Clock clock.PassiveClock
	// Recorder emits Kubernetes events on the ContainerMachine.
	Recorder record.EventRecorder
	// WorkloadClient reaches the workload cluster's API server.
	WorkloadClient WorkloadClientFunc
	// Bootstraps runs bootstrap data asynchronously.
	Bootstraps *BootstrapRunner
	// NodeIPAM decides and records node pod CIDRs; nil when node IPAM is
	// off.
	NodeIPAM *nodeipam.Recorder
	// HostCapacity admits node containers onto the container host; nil
	// admits every one.
	HostCapacity HostCapacity
	// Images copies an image a machine needs to the machine's engine from
	// another that holds it; nil leaves missing images to the admin.
	Images ImageCopier
	// Policy is what machines may ask of the host (the manager's policy
	// flags); checked again right before each container is created, since
	// the webhooks may not have run or the flags may have changed since. The
	// zero Policy allows everything.
	Policy policy.Policy
}

// ImageCopier puts images on engines that lack them (imagecopy.Copier).
type ImageCopier interface {
	// Ensure reports the copy of ref to the engine target from the first
	// of sources that holds it, starting it when none runs, and wakes
	// waiter when it ends.
	Ensure(target, ref string, sources []string, waiter types.NamespacedName) imagecopy.Status
}

// HostCapacity admits node containers onto the container host while its
// kernel limits leave room (hostcapacity.Gate).
type HostCapacity interface {
	// Admit decides whether the node container name of role, for the
	// cluster whose ContainerCluster is cluster, may be created now.
	Admit(ctx context.Context, cluster types.NamespacedName, name string, role container.Role) (hostcapacity.Decision, error)
}

// MachineScope is what the phases of one reconcile work on.
type MachineScope struct {
	Cluster          *clusterv1.Cluster
	ContainerCluster *infrav1.ContainerCluster
	// Machine owns the ContainerMachine; nil until Cluster API sets the
	// owner reference.
	Machine          *clusterv1.Machine
	ContainerMachine *infrav1.ContainerMachine

	// BootstrapDataSecretName names the Secret with the bootstrap data; nil
	// until the bootstrap provider has written it.
	BootstrapDataSecretName *string
	// Version is the Kubernetes version the machine runs, e.g. v1.35.4.
	Version string

	// Engine names the engine the machine's container is on, and Runtime
	// is that engine's. The reconciler sets both before any phase runs.
	Engine  string
	Runtime container.Runtime

	// Container is the machine's container as the runtime last reported it.
	// It is set by Launch.
	Container *container.Machine
	// Node is the workload cluster's Node of the machine. It is set by
	// Registration.
	Node *corev1.Node
}

// ContainerName is the machine's container name (see naming.ContainerName).
func (s *MachineScope) ContainerName() string {
	return naming.ContainerName(s.ContainerMachine.Namespace, s.Cluster.Name, s.ContainerMachine.Name)
}

// ProviderID is the provider ID of the machine: container:///<container>.
func (s *MachineScope) ProviderID() string {
	return naming.ProviderID(s.ContainerName())
}

// Owner is the owner of the machine's container. It owns nothing until the
// ContainerCluster has its cluster ID, which it gets before any machine of
// the cluster is launched.
func (s *MachineScope) Owner() container.Owner {
	return naming.ClusterOwner(s.Cluster, s.ContainerCluster).ForMachine(s.ContainerMachine.Name)
}

// IsControlPlane reports whether the machine runs a control-plane node.
func (s *MachineScope) IsControlPlane() bool {
	_, ok := s.ContainerMachine.Labels[clusterv1.MachineControlPlaneLabel]
	if !ok && s.Machine != nil {
		_, ok = s.Machine.Labels[clusterv1.MachineControlPlaneLabel]
	}
	return ok
}

// Role is the container role of the machine.
func (s *MachineScope) Role() container.Role {
	if s.IsControlPlane() {
		return container.RoleControlPlane
	}
	return container.RoleWorker
}

// ContainerLabels are the labels of the machine's container: its owner's,
// and its pool's.
func (s *MachineScope) ContainerLabels() map[string]string {
	labels := s.Owner().Labels()
	if pool := s.ContainerMachine.Labels[clusterv1.MachinePoolNameLabel]; pool != "" {
		labels[container.LabelPool] = pool
	}
	return labels
}

// InvalidSpecError is input that can never succeed, such as an unparseable
// version; retrying will not help, so callers stop retrying.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return e.Err.Error() }
func (e *InvalidSpecError) Unwrap() error { return e.Err }

// Image is the machine's node image: spec.image, or CAPCT's node image for
// the machine's Kubernetes version.
func (s *MachineScope) Image() (string, error) {
	if s.ContainerMachine.Spec.Image != "" {
		return s.ContainerMachine.Spec.Image, nil
	}
	if s.Version == "" {
		return "", &InvalidSpecError{Err: fmt.Errorf("no image: spec.image is empty and Machine %s has no Kubernetes version", s.machineName())}
	}
	image, err := naming.DefaultNodeImage(s.Version)
	if err != nil {
		return "", &InvalidSpecError{Err: fmt.Errorf("no image for Machine %s: %w", s.machineName(), err)}
	}
	return image, nil
}

func (s *MachineScope) machineName() string {
	if s.Machine == nil {
		return "<none>"
	}
	return s.Machine.Namespace + "/" + s.Machine.Name
}
