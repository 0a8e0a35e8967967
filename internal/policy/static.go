package policy

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// nodePaths hold what a node container needs from its image or from CAPCT
// (the tmpfs on /run and /tmp, the volume on /var, the host's /lib/modules).
// A mount onto one of them, or onto a directory above one, hides it.
var nodePaths = []string{
	"/", "/bin", "/dev", "/etc", "/kind", "/lib", "/lib/modules", "/proc", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var",
}

// nodeSubtrees are refused below as well: the kernel's interfaces, kind's
// files, and the state of kubeadm, the kubelet and containerd. A mount on
// /run/cluster-api could also fake the bootstrap sentinel.
var nodeSubtrees = []string{
	"/etc/kubernetes", "/kind", "/proc", "/run/cluster-api", "/sys", "/var/lib/containerd", "/var/lib/kubelet",
}

// MountPath refuses a mount path the engine would misread: a ':' splits a
// bind into source, target and options, so "/a:/etc" would mount onto /etc
// and "/data:Z" would relabel the host directory.
func MountPath(fld *field.Path, p string) *field.Error {
	if !strings.HasPrefix(p, "/") {
		return field.Invalid(fld, p, "must be an absolute path")
	}
	if strings.ContainsAny(p, ":\x00\n") {
		return field.Invalid(fld, p, "must not contain ':', NUL or a newline: the engine would read them as bind options")
	}
	return nil
}

// ContainerPath refuses a mount target that would hide what the node image
// needs: one of nodePaths or a directory above one, or anything in
// nodeSubtrees.
func ContainerPath(fld *field.Path, p string) *field.Error {
	if err := MountPath(fld, p); err != nil {
		return err
	}
	clean := path.Clean(p)
	for _, reserved := range nodePaths {
		if under(reserved, clean) {
			return field.Forbidden(fld, fmt.Sprintf("mounting onto %s would hide %s, which the node needs", clean, reserved))
		}
	}
	for _, reserved := range nodeSubtrees {
		if under(clean, reserved) {
			return field.Forbidden(fld, fmt.Sprintf("mounting onto %s would replace part of %s, which the node needs", clean, reserved))
		}
	}
	return nil
}

// PodCIDRs refuses pod CIDRs that overlap a subnet of the node network
// called network: pods and nodes would share addresses and routes. fld is
// the Cluster's spec.clusterNetwork.pods.cidrBlocks; unparsable CIDRs are
// Cluster API's to refuse and are skipped.
func PodCIDRs(fld *field.Path, cidrs []string, network string, nodeSubnets ...netip.Prefix) field.ErrorList {
	var errs field.ErrorList
	for i, cidr := range cidrs {
		pods, err := netip.ParsePrefix(cidr)
		if err != nil {
			continue
		}
		for _, nodes := range nodeSubnets {
			if nodes.IsValid() && pods.Overlaps(nodes) {
				errs = append(errs, field.Invalid(fld.Index(i), cidr,
					fmt.Sprintf("overlaps %s, the subnet of the node network %q: pods and nodes would share addresses", nodes, network)))
			}
		}
	}
	return errs
}
