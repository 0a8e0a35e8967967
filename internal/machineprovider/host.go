package machineprovider

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

const (
	// capacityRecheck is how soon a machine waiting for host capacity
	// looks again, so that it carries on by itself once a limit is raised.
	capacityRecheck = 15 * time.Second
	// hostRecheck is how soon a machine waiting for an image or a host path
	// to appear on the host looks again: nothing on the host wakes it.
	hostRecheck = 30 * time.Second
)

// waitForCapacity holds the launch, without failing it, while the host's
// limits leave no room for another node; the first machine to wait asks
// for its ContainerCluster to be told (WaitError.Announce).
//
// The gate reads the manager's own host: only machines on its engine wait
// for it. Another engine's host limits are not visible through its API.
func (p *Provider) waitForCapacity(ctx context.Context, c *Claim, at Placement) error {
	if p.HostCapacity == nil || !at.OnManagersEngine() {
		return nil
	}
	d, err := p.HostCapacity.Admit(ctx, client.ObjectKeyFromObject(c.ContainerCluster), c.ContainerName(), c.Role())
	if err != nil {
		return fmt.Errorf("failed to check the host's capacity for ContainerMachine %s: %w", klog.KObj(c.ContainerMachine), err)
	}
	if d.Shortfall == nil {
		return nil
	}
	return &WaitError{Reason: infrav1.WaitingForHostCapacityReason, Message: d.Shortfall.Message(), RequeueAfter: capacityRecheck, Announce: d.Announce}
}

// checkHost checks, right before the container is created, what only the
// manager's policy and the host can judge: the policy flags (the webhooks
// checked them at admission, but may not have run, or the flags may have
// changed since) and the images, which it has put on the engine when they
// are missing (obtainMissingImages). A policy violation waits for a change
// of the object or the flags, with no requeue: a new spec or a restarted
// manager reconciles the machine.
func (p *Provider) checkHost(ctx context.Context, c *Claim, at Placement, image string) error {
	if err := p.Policy.CheckMachine(&c.ContainerMachine.Spec, image); err != nil {
		if policy.IsViolation(err) {
			return &WaitError{Reason: infrav1.RefusedByPolicyReason, Message: err.Error()}
		}
		return err
	}
	err := policy.MissingImages(ctx, at.Runtime.ImageExists, policy.MachineImages(&c.ContainerMachine.Spec, image))
	return p.obtainMissingImages(ctx, c, at, err)
}

// obtainMissingImages has the images that checkHost found missing (err, a
// *policy.NotOnHostError) put on the machine's engine (imagecopy.Copier's
// Obtain): on a ContainerEngine, copied from another engine of its
// cluster, or the manager's own, that holds them; else pulled from their
// registries where spec.imagePullPolicy allows, with the credentials of
// the ContainerCluster's spec.imagePullSecretRef. Missing images are a
// *WaitError: copying, pulling, a failed pull, or not on the host. Any
// other err is returned as it is.
func (p *Provider) obtainMissingImages(ctx context.Context, c *Claim, at Placement, err error) error {
	var notOn *policy.NotOnHostError
	if !errors.As(err, &notOn) {
		return err // nil too
	}
	if p.Images == nil {
		return &WaitError{Reason: infrav1.ImageNotOnHostReason, Message: err.Error(), RequeueAfter: hostRecheck}
	}
	req := imagecopy.Request{
		Target: at.Engine,
		Auth:   imagecopy.PullSecretAuth(ctx, p.APIReader, c.ContainerCluster),
		Waiter: client.ObjectKeyFromObject(c.ContainerMachine),
	}
	if !at.OnManagersEngine() {
		req.Sources = imagecopy.Sources(c.ContainerCluster)
	}
	pulls := c.ContainerMachine.Spec.ImagePullPolicy.Pulls()
	for _, m := range notOn.Missing {
		req.Missing = append(req.Missing, imagecopy.Missing{Field: m.Field.String(), Ref: m.Value, Pull: pulls,
			PolicyField: field.NewPath("spec", "imagePullPolicy").String()})
	}
	wait := p.Images.Obtain(req)
	return &WaitError{Reason: wait.Reason, Message: wait.Message, RequeueAfter: hostRecheck}
}

// hostPathNotFound is the wait for a host path of spec.extraMounts that
// the engine did not find, naming the field.
func hostPathNotFound(mounts []infrav1.Mount, missing string) error {
	fld := field.NewPath("spec", "extraMounts")
	for i, m := range mounts {
		if path.Clean(m.HostPath) == path.Clean(missing) {
			fld = fld.Index(i).Child("hostPath")
			break
		}
	}
	return &WaitError{Reason: infrav1.HostPathNotFoundReason, RequeueAfter: hostRecheck, Message: fmt.Sprintf(
		"%s: host path %q does not exist on the container host; CAPCT does not create it: create it there or change the field", fld, missing)}
}
