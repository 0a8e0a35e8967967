package webhooks

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// defaultAPIServerPort is where kubeadm's API servers listen, and so the port
// of a control-plane endpoint that names only a host.
const defaultAPIServerPort = 6443

// Defaults are what the defaulting webhooks fill in from the manager's
// flags.
type Defaults struct {
	// Network is the manager's --default-network: the existing network a
	// ContainerCluster created with neither spec.network.name nor
	// spec.network.mode joins, Unmanaged. Empty keeps CAPCT's own default,
	// a Managed network derived from the cluster's name.
	Network string
}

// SetupWithManager registers every CAPCT webhook with the manager's webhook
// server. All of them are registered whatever the feature gates say, because
// the CRDs are always installed and an update with no handler would fail.
// The validators read p on every request; it must not change once the
// manager runs.
func SetupWithManager(mgr ctrl.Manager, p *policy.Policy, defaults Defaults) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.ContainerCluster{}).
		WithDefaulter(&containerClusterDefaulter{network: defaults.Network}).
		WithValidator(&containerClusterValidator{policy: p, reader: mgr.GetAPIReader()}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerCluster webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.ContainerMachine{}).
		WithValidator(&containerMachineValidator{policy: p, reader: mgr.GetAPIReader()}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerMachine webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &expinfrav1.ContainerMachinePool{}).
		WithValidator(&containerMachinePoolValidator{policy: p}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerMachinePool webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.ContainerMachineTemplate{}).
		WithValidator(&templateValidator[*infrav1.ContainerMachineTemplate]{
			groupKind: infrav1.GroupVersion.WithKind("ContainerMachineTemplate").GroupKind(),
			spec:      func(t *infrav1.ContainerMachineTemplate) any { return t.Spec.Template.Spec },
			validate: func(t, old *infrav1.ContainerMachineTemplate) field.ErrorList {
				var oldSpec *infrav1.ContainerMachineSpec
				if old != nil {
					oldSpec = &old.Spec.Template.Spec
				}
				return p.MachineSpec(field.NewPath("spec", "template", "spec"), &t.Spec.Template.Spec, oldSpec)
			},
		}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerMachineTemplate webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.ContainerClusterTemplate{}).
		WithValidator(&templateValidator[*infrav1.ContainerClusterTemplate]{
			groupKind: infrav1.GroupVersion.WithKind("ContainerClusterTemplate").GroupKind(),
			spec:      func(t *infrav1.ContainerClusterTemplate) any { return t.Spec.Template.Spec },
			validate: func(t, old *infrav1.ContainerClusterTemplate) field.ErrorList {
				var oldSpec *infrav1.ContainerClusterSpec
				if old != nil {
					oldSpec = &old.Spec.Template.Spec
				}
				return p.ClusterSpec(field.NewPath("spec", "template", "spec"), &t.Spec.Template.Spec, oldSpec)
			},
		}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerClusterTemplate webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &expinfrav1.ContainerMachinePoolTemplate{}).
		WithValidator(&templateValidator[*expinfrav1.ContainerMachinePoolTemplate]{
			groupKind: expinfrav1.GroupVersion.WithKind("ContainerMachinePoolTemplate").GroupKind(),
			spec:      func(t *expinfrav1.ContainerMachinePoolTemplate) any { return t.Spec.Template.Spec },
			validate: func(t, old *expinfrav1.ContainerMachinePoolTemplate) field.ErrorList {
				var oldSpec *infrav1.ContainerMachineSpec
				if old != nil {
					oldSpec = &old.Spec.Template.Spec.Template
				}
				return p.MachineSpec(field.NewPath("spec", "template", "spec", "template"), &t.Spec.Template.Spec.Template, oldSpec)
			},
		}).Complete(); err != nil {
		return fmt.Errorf("failed to set up the ContainerMachinePoolTemplate webhook: %w", err)
	}
	return nil
}

// The ContainerCluster validator reads the engines a cluster names, and
// their namespace's labels.
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-cluster-x-k8s-io-v1alpha1-containercluster,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containerclusters,versions=v1alpha1,name=default.containercluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containercluster,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containerclusters,versions=v1alpha1,name=validation.containercluster.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containermachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containermachines,versions=v1alpha1,name=validation.containermachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containermachinepool,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containermachinepools,versions=v1alpha1,name=validation.containermachinepool.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containermachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containermachinetemplates,versions=v1alpha1,name=validation.containermachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containerclustertemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containerclustertemplates,versions=v1alpha1,name=validation.containerclustertemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-containermachinepooltemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=containermachinepooltemplates,versions=v1alpha1,name=validation.containermachinepooltemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// containerClusterDefaulter fills the endpoint port when a user gives only a
// host (the endpoint's type is Cluster API's, so no CRD default marker can
// reach it), and the network of a cluster created without one when the
// manager has a default network.
type containerClusterDefaulter struct {
	network string
}

// Default sets spec.controlPlaneEndpoint.port to 6443 when a host is set,
// and, on create only, spec.network to the default network, Unmanaged,
// when neither its name nor its mode is set. A manager in a container
// (the quickstart's, a kind cluster's) reaches only the networks its own
// container is on, so a cluster on a network of its own would never get
// its load balancer verified; CAPD's clusters all join kind's network for
// the same reason. Only on create: the network is immutable, and an older
// cluster with an empty name keeps the Managed network it has.
func (d *containerClusterDefaulter) Default(ctx context.Context, c *infrav1.ContainerCluster) error {
	if c.Spec.ControlPlaneEndpoint.Host != "" && c.Spec.ControlPlaneEndpoint.Port == 0 {
		c.Spec.ControlPlaneEndpoint.Port = defaultAPIServerPort
	}
	if d.network == "" || c.Spec.Network.Name != "" || c.Spec.Network.Mode != "" {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return fmt.Errorf("failed to read the admission request of ContainerCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	if req.Operation == admissionv1.Create {
		c.Spec.Network.Name, c.Spec.Network.Mode = d.network, infrav1.NetworkUnmanaged
	}
	return nil
}
