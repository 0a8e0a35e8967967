package lifecycle

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
)

// WorkloadClientFunc returns a client of a workload cluster, such as Cluster
// API's ClusterCache.GetClient.
type WorkloadClientFunc func(ctx context.Context, cluster client.ObjectKey) (client.Client, error)

// MachineScope is what the phases of one reconcile work on: the machine's
// objects (the Claim the machine provider derives its container from),
// where its container is, and what the phases observed.
type MachineScope struct {
	machineprovider.Claim

	// BootstrapDataSecretName names the Secret with the bootstrap data; nil
	// until the bootstrap provider has written it.
	BootstrapDataSecretName *string

	// Placement is the engine the machine's container is on, and that
	// engine's runtime. Launch sets it; it is empty until the machine is
	// placed.
	machineprovider.Placement

	// Container is the machine's container as the runtime last reported it,
	// while it runs. It is set by Launch.
	Container *container.Machine
	// Node is the workload cluster's Node of the machine. It is set by
	// Registration.
	Node *corev1.Node
}
