package containermachine

import (
	"bytes"
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// persister writes what a reconcile changed of a ContainerMachine: at most
// one patch of its metadata and spec (the finalizer, spec.providerID) and
// one of its status, conditions included.
//
// Cluster API's patch helper sends the conditions and the rest of the
// status as two patches, so each reconcile that moved a phase cost two
// status writes (make bench-scale); here they are one JSON merge patch.
// Merge patches replace lists whole, so that patch carries the
// resourceVersion it was computed against: a status another writer changed
// in between is never overwritten, the patch fails with a conflict instead
// and the machine's next reconcile starts from what is there.
type persister struct {
	client client.Client
	// reader reads the machine uncached after a conflict.
	reader client.Reader
	// before is the machine as the API server has it, as far as this
	// reconcile knows: as read, then as its own patches left it.
	before *infrav1.ContainerMachine
}

func newPersister(c client.Client, reader client.Reader, cm *infrav1.ContainerMachine) *persister {
	return &persister{client: c, reader: reader, before: cm.DeepCopy()}
}

// write patches the metadata and spec, then the status, each only when it
// changed. stale is true when the status could not be written because the
// machine changed meanwhile: the event of that change reconciles it again.
func (p *persister) write(ctx context.Context, cm *infrav1.ContainerMachine) (stale bool, err error) {
	if cm.ResourceVersion != p.before.ResourceVersion {
		// A phase patched the machine itself and left on cm what it wrote
		// and the resourceVersion it got (node IPAM's record): that is the
		// API server's now, and the status patch locks on it instead of
		// conflicting with it.
		p.rebase(cm, cm.DeepCopy())
	}
	if err := p.writeObject(ctx, cm); err != nil {
		return false, err
	}
	if !cm.DeletionTimestamp.IsZero() && len(cm.Finalizers) == 0 {
		// The finalizer's removal was the last write: the machine is gone.
		return false, nil
	}
	return p.writeStatus(ctx, cm)
}

// writeObject patches the machine's metadata and spec when they changed,
// at once: the finalizer has to be there before a container is created.
// A change of the spec makes a new generation; the conditions are stamped
// with it, so that the next reconcile does not write them all again only
// for their observedGeneration.
func (p *persister) writeObject(ctx context.Context, cm *infrav1.ContainerMachine) error {
	after := cm.DeepCopy()
	// The status is another request's (the status subresource).
	after.Status = p.before.Status
	data, err := client.MergeFrom(p.before).Data(after)
	if err != nil {
		return fmt.Errorf("failed to compute the patch of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	if bytes.Equal(data, []byte("{}")) {
		return nil
	}
	if err := p.client.Patch(ctx, after, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("failed to patch ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	lock := p.before.ResourceVersion
	statusChanged := !apiequality.Semantic.DeepEqual(after.Status, p.before.Status)
	p.rebase(cm, after)
	if statusChanged {
		// Another writer changed the status meanwhile: the status patch
		// keeps the old resourceVersion, and its conflict says so.
		p.before.ResourceVersion = lock
	}
	return nil
}

// writeStatus patches the status when it changed, under the
// resourceVersion it was computed against. A conflict whose cause left the
// status as it was (a metadata write, such as node IPAM's record) is
// rebased on the machine as it is now and sent again, once.
func (p *persister) writeStatus(ctx context.Context, cm *infrav1.ContainerMachine) (stale bool, err error) {
	if apiequality.Semantic.DeepEqual(p.before.Status, cm.Status) {
		return false, nil
	}
	for range 2 {
		base := cm.DeepCopy()
		base.Status = p.before.Status
		base.ResourceVersion = p.before.ResourceVersion
		out := cm.DeepCopy()
		err := p.client.Status().Patch(ctx, out, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			p.before = out
			cm.ResourceVersion = out.ResourceVersion
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("failed to patch the status of ContainerMachine %s: %w", klog.KObj(cm), err)
		}
		latest := &infrav1.ContainerMachine{}
		if err := p.reader.Get(ctx, client.ObjectKeyFromObject(cm), latest); err != nil {
			return false, fmt.Errorf("failed to read ContainerMachine %s after a conflict: %w", klog.KObj(cm), err)
		}
		if !apiequality.Semantic.DeepEqual(latest.Status, p.before.Status) {
			ctrl.LoggerFrom(ctx).V(4).Info("The status changed meanwhile; reconciling again from it")
			return true, nil
		}
		p.rebase(cm, latest)
	}
	return true, nil
}

// rebase takes the machine's metadata and spec from the API server's
// (server), which holds every change of them this reconcile made: both cm
// and p.before follow, so that a later diff does not undo what another
// writer added (node IPAM's record annotation). Conditions stamped with
// the old generation get the new one.
func (p *persister) rebase(cm, server *infrav1.ContainerMachine) {
	old := p.before.Generation
	cm.ObjectMeta, cm.Spec = *server.ObjectMeta.DeepCopy(), *server.Spec.DeepCopy()
	p.before.ObjectMeta, p.before.Spec = *server.ObjectMeta.DeepCopy(), *server.Spec.DeepCopy()
	if old == cm.Generation {
		return
	}
	for i := range cm.Status.Conditions {
		if cm.Status.Conditions[i].ObservedGeneration == old {
			cm.Status.Conditions[i].ObservedGeneration = cm.Generation
		}
	}
}
