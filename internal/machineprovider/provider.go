package machineprovider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/nodeaddr"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// Provider creates, finds and deletes machines' containers on the engines
// of their clusters.
type Provider struct {
	// Client reads the management cluster and records placements.
	Client client.Client
	// APIReader counts a cluster's machines when placing one, uncached so
	// that the last placement is seen.
	APIReader client.Reader
	// Engines are the container engines machines run on.
	Engines engines.Set
	// HostCapacity admits node containers onto the manager's host; nil
	// admits every one.
	HostCapacity HostCapacity
	// Images puts an image a machine needs on the machine's engine: a copy
	// from another engine that holds it, or a pull; nil leaves missing
	// images to the admin.
	Images ImageCopier
	// Policy is what machines may ask of the host (the manager's policy
	// flags); checked again right before each container is created, since
	// the webhooks may not have run or the flags may have changed since. The
	// zero Policy allows everything.
	Policy policy.Policy
	// LoadBalancer is the load balancer in front of a cluster's control
	// plane; nil leaves it alone.
	LoadBalancer *loadbalancer.LoadBalancer

	// placing makes placements one at a time (place).
	placing sync.Mutex
}

// ImageCopier puts images on engines that lack them (imagecopy.Copier).
type ImageCopier interface {
	// Obtain starts, or reports, what puts the missing images of req on
	// its engine (a copy or a pull), waking req.Waiter when one ends.
	Obtain(req imagecopy.Request) imagecopy.Wait
}

// HostCapacity admits node containers onto the container host while its
// kernel limits leave room (hostcapacity.Gate).
type HostCapacity interface {
	// Admit decides whether the node container name of role, for the
	// cluster whose ContainerCluster is cluster, may be created now.
	Admit(ctx context.Context, cluster types.NamespacedName, name string, role container.Role) (hostcapacity.Decision, error)
}

// Created is a container Create made, or found made and started.
type Created struct {
	Placement
	// Machine is the container as the engine reports it.
	Machine *container.Machine
	// New says Create made it, rather than finding it.
	New bool
	// StaticFallback says its network took no static address, so that it
	// may come back on another address after a restart.
	StaticFallback bool
}

// Get returns where c's container is and the container as its engine
// reports it. A machine not placed yet has no container: the error is then
// a container NotFound error, as for a container that is gone.
func (p *Provider) Get(ctx context.Context, c *Claim) (Placement, *container.Machine, error) {
	at, placed, err := p.locate(c)
	if err != nil {
		return Placement{}, nil, err
	}
	if !placed {
		return Placement{}, nil, container.NewError("inspect", "container", c.ContainerName(), container.KindNotFound, fmt.Errorf("ContainerMachine %s is not placed on an engine yet", klog.KObj(c.ContainerMachine)))
	}
	m, err := at.Runtime.Inspect(ctx, c.ContainerName())
	return at, m, err
}

// Create makes c's container and starts it, or starts the one a launch
// interrupted by a crash made. It is idempotent: the container's name is
// derived from c, so a second call finds the first call's container. Before
// a container is made it places the machine, and checks the host's room,
// the manager's policy, the images and the host paths; what must come
// first is a *WaitError. A container that never ran and whose addresses the
// engine refused is removed, with a *RetryError. An *InvalidSpecError can
// never succeed.
func (p *Provider) Create(ctx context.Context, c *Claim) (*Created, error) {
	at, err := p.place(ctx, c)
	if err != nil {
		return nil, err
	}
	existing, err := at.Runtime.Inspect(ctx, c.ContainerName())
	switch {
	case err == nil:
		return p.adopt(ctx, c, at, existing)
	case !container.IsNotFound(err):
		return nil, fmt.Errorf("failed to inspect the container of ContainerMachine %s: %w", klog.KObj(c.ContainerMachine), err)
	}
	if err := p.waitForCapacity(ctx, c, at); err != nil {
		return nil, err
	}
	image, err := c.Image()
	if err != nil {
		return nil, err
	}
	if err := p.checkHost(ctx, c, at, image); err != nil {
		return nil, err
	}
	launcher, err := p.launcher(ctx, c, at)
	if err != nil {
		return nil, err
	}
	spec := c.containerSpec(image)
	// Control-plane nodes publish no host port: one the engine picks
	// changes at every restart, so nothing could rely on it, and clients
	// reach the API servers through the load balancer's fixed port. The
	// container gets static addresses (nodeaddr), so that it comes back on
	// the address etcd and the API server advertise when the engine
	// restarts it.
	launched, err := launcher.Launch(ctx, spec)
	if path, ok := container.HostPathNotFound(err); ok {
		return nil, hostPathNotFound(c.ContainerMachine.Spec.ExtraMounts, path)
	}
	if wait := c.hostPortInUse(err); wait != nil {
		return nil, wait
	}
	if err != nil {
		return nil, fmt.Errorf("failed to launch container %s for ContainerMachine %s: %w", spec.Name, klog.KObj(c.ContainerMachine), err)
	}
	return &Created{Placement: at, Machine: launched.Machine, New: true, StaticFallback: launched.StaticFallback}, nil
}

// adopt starts a container that was made but never started (a crash
// between the two calls). One that runs is returned as it is.
func (p *Provider) adopt(ctx context.Context, c *Claim, at Placement, m *container.Machine) (*Created, error) {
	if !c.Owner().Owns(m.Labels) {
		return nil, container.NotOwnedError("use", "container", m.Name, c.Owner(), m.Labels)
	}
	if m.State == container.StateRunning {
		return &Created{Placement: at, Machine: m}, nil
	}
	err := at.Runtime.Start(ctx, m.Name, c.Owner())
	if wait := c.hostPortInUse(err); wait != nil {
		// Made, never started: it starts once the port is free.
		return nil, wait
	}
	if container.IsInUse(err) && m.State == container.StateCreated {
		// Its static address was taken since it was picked, or the engine
		// still holds it for nobody. It never ran, so nothing is lost: it
		// goes, and the next call creates it again on addresses picked
		// anew, skipping the refused ones. Starting it again would fail the
		// same way until the launch timed out.
		nodeaddr.Refused(m.Network, m.StaticIPv4, m.StaticIPv6)
		if derr := at.Runtime.Delete(ctx, m.Name, c.Owner()); derr != nil {
			return nil, errors.Join(fmt.Errorf("failed to start container %s: %w", m.Name, err),
				fmt.Errorf("failed to remove it to launch it again: %w", derr))
		}
		return nil, &RetryError{Err: fmt.Errorf("container %s never started (%w); launching it again on new addresses", m.Name, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("failed to start container %s: %w", m.Name, err)
	}
	started, err := at.Runtime.Inspect(ctx, m.Name)
	if err != nil {
		return nil, fmt.Errorf("failed to inspect container %s after starting it: %w", m.Name, err)
	}
	return &Created{Placement: at, Machine: started}, nil
}

// Deleted reports whether the container is gone. A container of another
// cluster with c's name is not c's: it is neither deleted nor waited for.
type Deleted struct {
	Placement
	// Gone says there is no container of c's left on its engine.
	Gone bool
}

// Delete removes c's container. It returns Gone once the container is not
// there, so that the caller confirms the removal on a later call rather
// than trusting the delete call. A container of the same name that c does
// not own is not c's, and counts as gone.
func (p *Provider) Delete(ctx context.Context, c *Claim) (Deleted, error) {
	at, _, err := p.locate(c)
	if err != nil {
		return Deleted{}, err
	}
	name := c.ContainerName()
	existing, err := at.Runtime.Inspect(ctx, name)
	switch {
	case container.IsNotFound(err):
		return Deleted{Placement: at, Gone: true}, nil
	case err != nil:
		return Deleted{Placement: at}, fmt.Errorf("failed to inspect container %s of ContainerMachine %s: %w", name, klog.KObj(c.ContainerMachine), err)
	case !c.Owner().Owns(existing.Labels):
		return Deleted{Placement: at, Gone: true}, nil
	}
	if err := at.Runtime.Delete(ctx, name, c.Owner()); err != nil && !container.IsNotFound(err) {
		return Deleted{Placement: at}, fmt.Errorf("failed to delete container %s of ContainerMachine %s: %w", name, klog.KObj(c.ContainerMachine), err)
	}
	return Deleted{Placement: at}, nil
}

// List returns the containers of cc that owner owns and that match extra,
// on every engine of the cluster; an engine that does not answer fails it.
func (p *Provider) List(ctx context.Context, cc *infrav1.ContainerCluster, owner container.Owner, extra map[string]string) ([]engines.Owned, error) {
	return engines.ListOwned(ctx, p.Engines, cc, owner, extra)
}

// LeaveLoadBalancer takes c's machine out of its cluster's load balancer:
// its weight drops to 0 as soon as it is being deleted, and the
// configuration is written again without it. Only control-plane machines
// are behind it. An error for which waiting does not help (the
// configuration refused, the custom template's ConfigMap or the
// load-balancer container gone) is a *PermanentError.
func (p *Provider) LeaveLoadBalancer(ctx context.Context, c *Claim) error {
	if !c.IsControlPlane() || p.LoadBalancer == nil || c.ContainerCluster == nil || !c.ContainerCluster.DeletionTimestamp.IsZero() {
		return nil
	}
	_, err := p.LoadBalancer.Sync(ctx, c.Cluster, c.ContainerCluster)
	if err == nil {
		return nil
	}
	var reloadErr *loadbalancer.ReloadError
	if errors.As(err, &reloadErr) || client.IgnoreNotFound(err) == nil || container.IsNotFound(err) {
		return &PermanentError{Err: err}
	}
	return err
}

// PermanentError is a failure that waiting does not fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// launcher returns the Launcher for c's container. On a cluster's overlay,
// which spans engines, it reads what every engine holds, and what the
// cluster's machines recorded for the engines that do not answer.
func (p *Provider) launcher(ctx context.Context, c *Claim, at Placement) (*nodeaddr.Launcher, error) {
	spans, err := engines.Spanning(p.Engines, c.ContainerCluster)
	if err != nil || len(spans) == 0 {
		return &nodeaddr.Launcher{Runtime: at.Runtime}, err
	}
	machines := &infrav1.ContainerMachineList{}
	if err := p.Client.List(ctx, machines, client.InNamespace(c.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: c.Cluster.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(c.Cluster), err)
	}
	var recorded []netip.Addr
	for _, m := range machines.Items {
		for _, a := range m.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == clusterv1.MachineInternalIP {
				recorded = append(recorded, ip)
			}
		}
	}
	return &nodeaddr.Launcher{Runtime: at.Runtime, Spans: spans, Recorded: recorded}, nil
}
