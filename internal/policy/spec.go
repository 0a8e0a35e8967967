package policy

import (
	"errors"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// MachineSpec checks what a machine spec at fld asks of the host: its image
// and preloaded images, its mounts' targets and host paths, and the host
// addresses and ports of its extraPortMappings. old is the
// spec before an update, nil on create; values that did not change are not
// checked again, so that a policy tightened later never blocks the updates
// Cluster API and CAPCT make to objects admitted before. The launch path
// checks everything again (CheckMachine).
func (p Policy) MachineSpec(fld *field.Path, spec, old *infrav1.ContainerMachineSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.Image != "" && (old == nil || old.Image != spec.Image) {
		errs = add(errs, p.Image(fld.Child("image"), spec.Image))
	}
	for i, m := range spec.ExtraMounts {
		if old != nil && slices.Contains(old.ExtraMounts, m) {
			continue
		}
		mount := fld.Child("extraMounts").Index(i)
		errs = add(errs, ContainerPath(mount.Child("containerPath"), m.ContainerPath))
		if err := MountPath(mount.Child("hostPath"), m.HostPath); err != nil {
			errs = append(errs, err)
		} else {
			errs = add(errs, p.HostPath(mount.Child("hostPath"), m.HostPath))
		}
	}
	for i, ref := range spec.PreLoadImages {
		if old != nil && slices.Contains(old.PreLoadImages, ref) {
			continue
		}
		errs = add(errs, p.Image(fld.Child("preLoadImages").Index(i), ref))
	}
	return append(errs, p.portMappings(fld.Child("extraPortMappings"), spec.ExtraPortMappings, old)...)
}

// portMappings checks the host side of a machine's extraPortMappings at fld:
// the address and the port of each that old lacks, and that no two take
// the same host port.
func (p Policy) portMappings(fld *field.Path, mappings []infrav1.PortMapping, old *infrav1.ContainerMachineSpec) field.ErrorList {
	var errs field.ErrorList
	for i, m := range mappings {
		if old != nil && slices.Contains(old.ExtraPortMappings, m) {
			continue
		}
		errs = add(errs, p.HostListenAddress(fld.Index(i).Child("listenAddress"), m.EffectiveListenAddress()))
		errs = add(errs, p.HostPort(fld.Index(i).Child("hostPort"), m.HostPort))
	}
	return append(errs, PortMappings(fld, mappings)...)
}

// ClusterSpec checks what a cluster spec at fld asks of the host: the
// network it joins, its load balancer's image and the host address the load
// balancer publishes its port on. old is as in MachineSpec.
func (p Policy) ClusterSpec(fld *field.Path, spec, old *infrav1.ContainerClusterSpec) field.ErrorList {
	var errs field.ErrorList
	n := spec.Network
	if n.Name != "" && (old == nil || old.Network.Name != n.Name || old.Network.Mode != n.Mode) {
		errs = add(errs, p.Network(fld.Child("network", "name"), n.Name, n.Mode == infrav1.NetworkUnmanaged))
	}
	if img := spec.LoadBalancer.Image; img != "" && (old == nil || old.LoadBalancer.Image != img) {
		errs = add(errs, p.Image(fld.Child("loadBalancer", "image"), img))
	}
	if addr := spec.LoadBalancer.ListenAddress; addr != "" && (old == nil || old.LoadBalancer.ListenAddress != addr) {
		errs = add(errs, p.loadBalancerListenAddress(fld.Child("loadBalancer", "listenAddress"), addr))
	}
	return errs
}

// loadBalancerListenAddress decides the address a load balancer publishes
// its API port on. The default, 127.0.0.1, is always allowed, however it is
// written: every load balancer CAPCT made published its port there, and an
// admin who forbids machines' port mappings (an empty
// --allowed-host-listen-addresses) must not lose every cluster with them.
func (p Policy) loadBalancerListenAddress(fld *field.Path, addr string) *field.Error {
	a, err := ListenAddress(fld, addr)
	if err != nil {
		return err
	}
	if a == netip.MustParseAddr(infrav1.DefaultListenAddress) {
		return nil
	}
	return p.HostListenAddress(fld, addr)
}

// Violation is the error of the launch-time checks: the object asks for
// something the policy refuses. Its message names each field and, where a
// flag decides, the flag an administrator would change. Retrying does not
// help until the object or the manager's flags change.
type Violation struct {
	Errors field.ErrorList
}

func (v *Violation) Error() string { return v.Errors.ToAggregate().Error() }

// IsViolation reports whether err is, or wraps, a *Violation.
func IsViolation(err error) bool {
	var v *Violation
	return errors.As(err, &v)
}

// CheckMachine checks a ContainerMachine's spec in full right before its
// container is created. image is the node image the container will run:
// spec.image, or the default CAPCT picked when it is empty. It returns a
// *Violation or nil.
func (p Policy) CheckMachine(spec *infrav1.ContainerMachineSpec, image string) error {
	errs := p.MachineSpec(field.NewPath("spec"), spec, nil)
	if spec.Image == "" {
		errs = add(errs, defaulted(p.Image(field.NewPath("spec", "image"), image)))
	}
	return violation(errs)
}

// CheckCluster checks a ContainerCluster's spec in full right before its
// network and load balancer are made. lbImage is the load balancer's image:
// spec.loadBalancer.image, or the default when it is empty. It returns a
// *Violation or nil.
func (p Policy) CheckCluster(spec *infrav1.ContainerClusterSpec, lbImage string) error {
	errs := p.ClusterSpec(field.NewPath("spec"), spec, nil)
	if spec.LoadBalancer.Image == "" {
		errs = add(errs, defaulted(p.Image(field.NewPath("spec", "loadBalancer", "image"), lbImage)))
	}
	return violation(errs)
}

// CheckPodCIDRs is PodCIDRs for a Cluster whose node network exists: the
// node network's subnets are only known once the engine made or showed it.
// It returns a *Violation or nil.
func CheckPodCIDRs(podCIDRs []string, network string, nodeSubnets ...netip.Prefix) error {
	return violation(PodCIDRs(field.NewPath("spec", "clusterNetwork", "pods", "cidrBlocks"), podCIDRs, network, nodeSubnets...))
}

// defaulted says that the refused value is CAPCT's default for an empty
// field, so that users are not puzzled by a value they never wrote.
func defaulted(err *field.Error) *field.Error {
	if err != nil {
		err.Detail = "the field is empty and its default is refused: " + err.Detail
	}
	return err
}

func violation(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &Violation{Errors: errs}
}

func add(errs field.ErrorList, err *field.Error) field.ErrorList {
	if err == nil {
		return errs
	}
	return append(errs, err)
}
