package webhooks

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// invalid turns field errors into the API server's Invalid answer, which
// kubectl prints with each field's path.
func invalid(gk schema.GroupKind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gk, name, errs)
}

// containerClusterValidator applies the policy to a ContainerCluster's
// network and load-balancer image, and refuses engines that do not allow
// the cluster's namespace, the manager's own engine included (a cluster
// that lists none). reader reads ContainerEngines and Namespaces uncached,
// so that an engine narrowed, or a Namespace labelled, a moment ago is
// seen.
type containerClusterValidator struct {
	policy *policy.Policy
	reader client.Reader
}

var _ admission.Validator[*infrav1.ContainerCluster] = &containerClusterValidator{}

func (v *containerClusterValidator) ValidateCreate(ctx context.Context, c *infrav1.ContainerCluster) (admission.Warnings, error) {
	return v.validate(ctx, c, nil)
}

// ValidateUpdate checks only what changed, so that a tightened policy never
// blocks an update that leaves the spec alone, such as the removal of the
// finalizer that ends a deletion. An object being deleted is checked all the
// same: a finalizer anyone may add holds it for as long as they like, and
// CAPCT's deletion acts on its spec.
func (v *containerClusterValidator) ValidateUpdate(ctx context.Context, old, c *infrav1.ContainerCluster) (admission.Warnings, error) {
	return v.validate(ctx, c, &old.Spec)
}

func (v *containerClusterValidator) validate(ctx context.Context, c *infrav1.ContainerCluster, old *infrav1.ContainerClusterSpec) (admission.Warnings, error) {
	errs := v.policy.ClusterSpec(field.NewPath("spec"), &c.Spec, old)
	refused, err := v.enginesNotAllowed(ctx, c, old)
	if err != nil {
		return nil, err
	}
	local, err := v.localEngineNotAllowed(ctx, c, old)
	if err != nil {
		return nil, err
	}
	return nil, invalid(infrav1.GroupVersion.WithKind("ContainerCluster").GroupKind(), c.Name, add(append(errs, refused...), local))
}

// localEngineNotAllowed refuses a cluster that lists no engines, and so
// runs its machines on the manager's own engine (the host the manager runs
// on), in a namespace the manager's --local-engine-allowed-namespaces does
// not list and --local-engine-namespace-selector does not select
// (engines.LocalAllowsNamespace, which the controller asks too). With
// neither flag every namespace may, and no Namespace is read. On update it
// checks only a cluster whose engines the update takes away (which the
// CRD refuses as well), so that a policy narrowed later does not block
// every other change to a cluster already on the manager's engine (nor
// the end of its deletion); the controller reports such a cluster in
// EnginesReady.
func (v *containerClusterValidator) localEngineNotAllowed(ctx context.Context, c *infrav1.ContainerCluster, old *infrav1.ContainerClusterSpec) (*field.Error, error) {
	if v.policy.LocalEngineNamespaces == nil || len(c.Spec.Engines) > 0 || (old != nil && len(old.Engines) == 0) {
		return nil, nil
	}
	ns, err := v.namespace(ctx, c)
	if err != nil {
		return nil, err
	}
	path := field.NewPath("spec", "engines")
	allowed, err := engines.LocalAllowsNamespace(v.policy.LocalEngineNamespaces, ns)
	switch {
	case err != nil:
		return field.Forbidden(path, err.Error()), nil
	case !allowed:
		return field.Forbidden(path, fmt.Sprintf(
			"lists no engine, so the cluster's machines would run on the manager's own engine, which does not allow namespace %s: "+
				"the manager's --%s must list the namespace or its --%s select it, or the cluster must list a ContainerEngine that allows it",
			c.Namespace, policy.FlagLocalEngineAllowedNamespaces, policy.FlagLocalEngineNamespaceSelector)), nil
	}
	return nil, nil
}

// namespace reads the cluster's Namespace, whose name and labels say which
// engines it may use.
func (v *containerClusterValidator) namespace(ctx context.Context, c *infrav1.ContainerCluster) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	if err := v.reader.Get(ctx, client.ObjectKey{Name: c.Namespace}, ns); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to get Namespace %s of ContainerCluster %s: %w", c.Namespace, c.Name, err))
	}
	return ns, nil
}

// enginesNotAllowed refuses each engine the cluster names that exists and
// does not allow the cluster's namespace. On update it checks only the
// engines the update adds, so that an engine narrowed later does not block
// every other change to a cluster already on it (nor its deletion); the
// controller checks every engine on each pass. An engine that does not
// exist yet is left to the controller too, since an admin may create it
// after the cluster.
func (v *containerClusterValidator) enginesNotAllowed(ctx context.Context, c *infrav1.ContainerCluster, old *infrav1.ContainerClusterSpec) (field.ErrorList, error) {
	var errs field.ErrorList
	var ns *corev1.Namespace
	for i, ref := range c.Spec.Engines {
		if old != nil && slices.ContainsFunc(old.Engines, func(e infrav1.ClusterEngine) bool { return e.Name == ref.Name }) {
			continue
		}
		engine := &infrav1.ContainerEngine{}
		if err := v.reader.Get(ctx, client.ObjectKey{Name: ref.Name}, engine); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to get ContainerEngine %s named by ContainerCluster %s/%s: %w", ref.Name, c.Namespace, c.Name, err))
		}
		if ns == nil {
			var err error
			if ns, err = v.namespace(ctx, c); err != nil {
				return nil, err
			}
		}
		path := field.NewPath("spec", "engines").Index(i).Child("name")
		allowed, err := engines.AllowsNamespace(engine, ns)
		switch {
		case err != nil:
			errs = append(errs, field.Forbidden(path, err.Error()))
		case !allowed:
			errs = append(errs, field.Forbidden(path, fmt.Sprintf(
				"ContainerEngine %s does not allow namespace %s: its admin must list the namespace, or select it by label, in the engine's spec.allowedNamespaces", ref.Name, c.Namespace)))
		}
	}
	return errs, nil
}

func (v *containerClusterValidator) ValidateDelete(context.Context, *infrav1.ContainerCluster) (admission.Warnings, error) {
	return nil, nil
}

// containerMachineValidator applies the policy to a ContainerMachine, on
// create refuses a preset providerID, a machine beyond the cluster's cap and
// host ports another machine on the same engine publishes
// (hostPortsTaken), and keeps the machine in its cluster
// (clusterNameChanged). These need the API: reader reads it uncached, so
// that a burst of creates (a scale-up, a clusterctl move) sees every
// machine and the Cluster created a moment before.
type containerMachineValidator struct {
	policy *policy.Policy
	reader client.Reader
}

var _ admission.Validator[*infrav1.ContainerMachine] = &containerMachineValidator{}

func (v *containerMachineValidator) ValidateCreate(ctx context.Context, m *infrav1.ContainerMachine) (admission.Warnings, error) {
	errs := v.policy.MachineSpec(field.NewPath("spec"), &m.Spec, nil)
	cluster, err := v.cluster(ctx, m)
	if err != nil {
		return nil, err
	}
	if m.Spec.ProviderID != "" && (cluster == nil || !annotations.IsPaused(cluster, m)) {
		// CAPCT derives the provider ID from the container it made; a preset
		// one could claim another machine's Node. clusterctl move creates
		// machines with theirs while the Cluster is paused.
		errs = append(errs, field.Forbidden(field.NewPath("spec", "providerID"),
			"is set by CAPCT once the container runs; only clusterctl move, with the Cluster paused, creates a ContainerMachine that has one"))
	}
	if _, placed := m.Annotations[infrav1.EngineAnnotation]; placed && (cluster == nil || !annotations.IsPaused(cluster, m)) {
		// Likewise the engine: CAPCT places the machine on one its
		// cluster lists, which a preset annotation would bypass.
		errs = append(errs, field.Forbidden(engineAnnotationPath,
			"is set by CAPCT when it places the machine; only clusterctl move, with the Cluster paused, creates a ContainerMachine that has one"))
	}
	// The cap counts machines by the label, whether or not their Cluster
	// exists yet: machines made ahead of their Cluster would otherwise
	// escape it.
	countErr, err := v.beyondCap(ctx, m)
	if err != nil {
		return nil, err
	}
	errs = add(errs, countErr)
	// Host ports only on create: they are immutable, and where a machine
	// may run only narrows once it is placed.
	taken, err := v.hostPortsTaken(ctx, m)
	if err != nil {
		return nil, err
	}
	errs = append(errs, taken...)
	return nil, invalid(infrav1.GroupVersion.WithKind("ContainerMachine").GroupKind(), m.Name, errs)
}

// ValidateUpdate checks what changed, also of a machine being deleted (see
// the ContainerCluster's ValidateUpdate): the policy, the engine the machine
// is placed on and the cluster it belongs to. A cluster-name label added to
// a machine that had none, as Cluster API's Machine controller adds it,
// counts against that cluster's cap like a new machine.
func (v *containerMachineValidator) ValidateUpdate(ctx context.Context, old, m *infrav1.ContainerMachine) (admission.Warnings, error) {
	errs := v.policy.MachineSpec(field.NewPath("spec"), &m.Spec, &old.Spec)
	if engine, placed := old.Annotations[infrav1.EngineAnnotation]; placed && m.Annotations[infrav1.EngineAnnotation] != engine {
		errs = append(errs, field.Forbidden(engineAnnotationPath, fmt.Sprintf(
			"the machine is placed on engine %q, where its container is, and stays there; delete the machine to place another", engine)))
	}
	errs = add(errs, clusterNameChanged(old, m))
	// A machine being deleted no longer counts against the cap.
	if old.Labels[clusterv1.ClusterNameLabel] == "" && m.DeletionTimestamp.IsZero() {
		countErr, err := v.beyondCap(ctx, m)
		if err != nil {
			return nil, err
		}
		errs = add(errs, countErr)
	}
	return nil, invalid(infrav1.GroupVersion.WithKind("ContainerMachine").GroupKind(), m.Name, errs)
}

// clusterNamePath is the label that says which cluster an object belongs to.
var clusterNamePath = field.NewPath("metadata", "labels").Key(clusterv1.ClusterNameLabel)

// clusterNameChanged refuses a change or removal of the cluster-name label
// once it is set. The cap counts machines by the label when they come, so
// moving one into another cluster would bypass it; and the machine's
// container was made for the cluster it names. Cluster API sets the label at
// create (from the template, or on a machine pool's machines) or adds it
// once to an object that lacks it, and never changes it.
func clusterNameChanged(old, obj metav1.Object) *field.Error {
	was := old.GetLabels()[clusterv1.ClusterNameLabel]
	if was == "" || obj.GetLabels()[clusterv1.ClusterNameLabel] == was {
		return nil
	}
	return field.Forbidden(clusterNamePath, fmt.Sprintf(
		"is immutable once set: the object belongs to Cluster %q; create a new one for another cluster", was))
}

// beyondCap refuses m, labelled for a cluster, when that cluster already has
// as many machines as the manager's --max-machines-per-cluster allows.
func (v *containerMachineValidator) beyondCap(ctx context.Context, m *infrav1.ContainerMachine) (*field.Error, error) {
	name := m.Labels[clusterv1.ClusterNameLabel]
	if name == "" || v.policy.MaxMachinesPerCluster <= 0 {
		return nil, nil
	}
	n, err := v.machines(ctx, m)
	if err != nil {
		return nil, err
	}
	return v.policy.MachineCount(clusterNamePath, name, n), nil
}

// engineAnnotationPath is where a ContainerMachine records its engine.
var engineAnnotationPath = field.NewPath("metadata", "annotations").Key(infrav1.EngineAnnotation)

func (v *containerMachineValidator) ValidateDelete(context.Context, *infrav1.ContainerMachine) (admission.Warnings, error) {
	return nil, nil
}

// cluster returns the machine's Cluster, or nil when the machine names none
// or it does not exist yet.
func (v *containerMachineValidator) cluster(ctx context.Context, m *infrav1.ContainerMachine) (*clusterv1.Cluster, error) {
	name := m.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return nil, nil
	}
	cluster := &clusterv1.Cluster{}
	if err := v.reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to get Cluster %s/%s of ContainerMachine %s: %w", m.Namespace, name, m.Name, err))
	}
	return cluster, nil
}

// machines counts the other ContainerMachines labelled for m's cluster that
// are not being deleted (m is not among them: it is being created, or gets
// the label now). It runs at every admission of a machine, from the API server
// (a cache could miss one admitted a moment ago), so it lists metadata only:
// the whole objects made this list the manager's second-largest read in
// make bench-scale, growing with the square of the machines per cluster.
func (v *containerMachineValidator) machines(ctx context.Context, m *infrav1.ContainerMachine) (int, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(infrav1.GroupVersion.WithKind("ContainerMachineList"))
	if err := v.reader.List(ctx, list, client.InNamespace(m.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: m.Labels[clusterv1.ClusterNameLabel]}); err != nil {
		return 0, apierrors.NewInternalError(fmt.Errorf("failed to list the ContainerMachines of Cluster %s/%s: %w",
			m.Namespace, m.Labels[clusterv1.ClusterNameLabel], err))
	}
	n := 0
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			n++
		}
	}
	return n, nil
}

// containerMachinePoolValidator applies the policy to the machine spec of a
// ContainerMachinePool and keeps the pool in its cluster. Its machines are
// ContainerMachines and meet the machine validator as well.
type containerMachinePoolValidator struct {
	policy *policy.Policy
}

var _ admission.Validator[*expinfrav1.ContainerMachinePool] = &containerMachinePoolValidator{}

func (v *containerMachinePoolValidator) ValidateCreate(_ context.Context, p *expinfrav1.ContainerMachinePool) (admission.Warnings, error) {
	return nil, invalid(expinfrav1.GroupVersion.WithKind("ContainerMachinePool").GroupKind(), p.Name,
		v.policy.MachineSpec(field.NewPath("spec", "template"), &p.Spec.Template, nil))
}

// ValidateUpdate checks what changed, also of a pool being deleted (see the
// ContainerCluster's ValidateUpdate).
func (v *containerMachinePoolValidator) ValidateUpdate(_ context.Context, old, p *expinfrav1.ContainerMachinePool) (admission.Warnings, error) {
	errs := v.policy.MachineSpec(field.NewPath("spec", "template"), &p.Spec.Template, &old.Spec.Template)
	return nil, invalid(expinfrav1.GroupVersion.WithKind("ContainerMachinePool").GroupKind(), p.Name,
		add(errs, clusterNameChanged(old, p)))
}

func (v *containerMachinePoolValidator) ValidateDelete(context.Context, *expinfrav1.ContainerMachinePool) (admission.Warnings, error) {
	return nil, nil
}

func add(errs field.ErrorList, err *field.Error) field.ErrorList {
	if err == nil {
		return errs
	}
	return append(errs, err)
}
