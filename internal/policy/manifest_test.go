package policy_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/policy"
	"github.com/capct/cluster-api-provider-container/internal/policy/policytest"
)

// shippedPolicy is the policy of a manager installed by `clusterctl init`
// with no variable set (policytest.Shipped); it fails the test unless the
// manifest sets every policy flag, so that clusterctl users can set each.
func shippedPolicy(t *testing.T) policy.Policy {
	t.Helper()
	p, args, err := policytest.Shipped("../../config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{policy.FlagAllowedHostPathPrefixes, policy.FlagAllowedImagePrefixes, policy.FlagAllowedNetworks, policy.FlagMaxMachinesPerCluster,
		policy.FlagAllowedHostListenAddresses, policy.FlagMinHostPort} {
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--"+flag+"=") }) {
			t.Fatalf("the manifest does not set --%s: clusterctl users cannot", flag)
		}
	}
	return p
}

// TestTheShippedPolicyKeepsTheHostOutOfTenantsReach installs the manager's
// manifest with its defaults and applies a ContainerMachineTemplate's spec
// that mounts the host's root, its configuration and the engine's socket,
// preloads another team's image, and publishes ports on the host's
// interfaces or its privileged ports: each is refused. What the project's
// own flows use is allowed.
func TestTheShippedPolicyKeepsTheHostOutOfTenantsReach(t *testing.T) {
	p := shippedPolicy(t)

	hostile := []string{"/", "/etc", "/var/run/docker.sock", "/run/podman/podman.sock", "/var/run", "/var/lib/docker",
		"/proc", "/sys", "/dev", "/root", "/boot", "/home", "/srv", "/srv/capct/../../etc"}
	spec := &infrav1.ContainerMachineSpec{Image: "capct/node:v1.35.4", PreLoadImages: []string{"ghcr.io/other-team/payroll:v1", "other-team/tools:v1"}}
	var want []string
	for i, h := range hostile {
		spec.ExtraMounts = append(spec.ExtraMounts, infrav1.Mount{HostPath: h, ContainerPath: "/mnt/x" + strings.Repeat("x", i)})
		want = append(want, field.NewPath("spec", "extraMounts").Index(i).Child("hostPath").String())
	}
	want = append(want, "spec.preLoadImages[0]", "spec.preLoadImages[1]")
	// Ports on every interface, on an interface's address, and on the
	// host's privileged ports.
	spec.ExtraPortMappings = []infrav1.PortMapping{
		{ListenAddress: "0.0.0.0", HostPort: 8080, ContainerPort: 30080},
		{ListenAddress: "::", HostPort: 8081, ContainerPort: 30080},
		{ListenAddress: "192.168.1.10", HostPort: 8082, ContainerPort: 30080},
		{ListenAddress: "127.0.0.1", HostPort: 22, ContainerPort: 30080},
	}
	want = append(want, "spec.extraPortMappings[0].listenAddress", "spec.extraPortMappings[1].listenAddress",
		"spec.extraPortMappings[2].listenAddress", "spec.extraPortMappings[3].hostPort")
	errs := p.MachineSpec(field.NewPath("spec"), spec, nil)
	for _, f := range want {
		if !slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Field == f && e.Type == field.ErrorTypeForbidden }) {
			t.Errorf("the shipped policy allows %s; errors: %v", f, errs)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d: %v", len(errs), len(want), errs)
	}

	own := &infrav1.ContainerMachineSpec{Image: "capct/node:v1.35.4", PreLoadImages: []string{"kindest/node:v1.35.0", "docker.io/capct/manager:v0.1.0"},
		ExtraMounts:       []infrav1.Mount{{HostPath: "/srv/capct/cache", ContainerPath: "/mnt/cache"}},
		ExtraPortMappings: []infrav1.PortMapping{{HostPort: 30080, ContainerPort: 30080}, {ListenAddress: "::1", HostPort: 8443, ContainerPort: 30443}}}
	if errs := p.MachineSpec(field.NewPath("spec"), own, nil); len(errs) > 0 {
		t.Errorf("the shipped policy refuses what the project's flows use: %v", errs)
	}
	for _, lb := range []string{"kindest/haproxy:v20230606-42a2262b", "capct/haproxy:2.6"} {
		cluster := &infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lb},
			Network: infrav1.NetworkSpec{Name: "capct-mgmt", Mode: infrav1.NetworkUnmanaged}}
		if errs := p.ClusterSpec(field.NewPath("spec"), cluster, nil); len(errs) > 0 {
			t.Errorf("the shipped policy refuses the quickstart's cluster: %v", errs)
		}
	}
	if p.MinHostPort != policy.DefaultMinHostPort || !slices.Equal(p.HostListenAddresses, policy.DefaultHostListenAddresses) {
		t.Errorf("shipped: min host port %d, listen addresses %v; want %d and %v",
			p.MinHostPort, p.HostListenAddresses, policy.DefaultMinHostPort, policy.DefaultHostListenAddresses)
	}
	if p.MaxMachinesPerCluster != policy.DefaultMaxMachinesPerCluster || p.LocalEngineNamespaces != nil {
		t.Errorf("shipped: max machines %d, local engine %+v; want %d and every namespace",
			p.MaxMachinesPerCluster, p.LocalEngineNamespaces, policy.DefaultMaxMachinesPerCluster)
	}
}
