package machineprovider

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
)

// portClaim is a worker of cluster ns/c1 on the manager's own engine that
// publishes ports.
func portClaim(mappings ...infrav1.PortMapping) *Claim {
	return &Claim{
		Cluster:          &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}},
		ContainerCluster: &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}, Spec: infrav1.ContainerClusterSpec{ClusterID: "id-1"}},
		ContainerMachine: &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-0",
			Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}, Spec: infrav1.ContainerMachineSpec{ExtraPortMappings: mappings}},
		Version: "v1.35.4",
	}
}

// TestContainerSpecPublishesExtraPortMappings: each mapping is published on
// its fixed host port, its address and protocol defaulted as the API
// defaults them, in the engine's words.
func TestContainerSpecPublishesExtraPortMappings(t *testing.T) {
	testCases := []struct {
		name string
		in   []infrav1.PortMapping
		want []container.PortMapping
	}{
		{name: "none", want: []container.PortMapping{}},
		{name: "as the API server stores them",
			in:   []infrav1.PortMapping{{ListenAddress: "127.0.0.1", HostPort: 8080, ContainerPort: 30080, Protocol: infrav1.ProtocolTCP}},
			want: []container.PortMapping{{HostIP: "127.0.0.1", HostPort: 8080, ContainerPort: 30080, Protocol: "tcp"}}},
		{name: "defaults left out",
			in:   []infrav1.PortMapping{{HostPort: 8443, ContainerPort: 30443}},
			want: []container.PortMapping{{HostIP: "127.0.0.1", HostPort: 8443, ContainerPort: 30443, Protocol: "tcp"}}},
		{name: "IPv6, UDP and SCTP",
			in: []infrav1.PortMapping{
				{ListenAddress: "::1", HostPort: 5353, ContainerPort: 30053, Protocol: infrav1.ProtocolUDP},
				{ListenAddress: "192.0.2.10", HostPort: 3868, ContainerPort: 30868, Protocol: infrav1.ProtocolSCTP},
			},
			want: []container.PortMapping{
				{HostIP: "::1", HostPort: 5353, ContainerPort: 30053, Protocol: "udp"},
				{HostIP: "192.0.2.10", HostPort: 3868, ContainerPort: 30868, Protocol: "sctp"},
			}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got := portClaim(tc.in...).containerSpec("capct/node:v1.35.4").PortMappings
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAHostPortInUseIsAWaitNamingTheField: when the engine refuses to start
// the machine's container because another container holds one of its host
// ports, the launch waits, not fails, naming the mapping; any other error
// is left alone.
func TestAHostPortInUseIsAWaitNamingTheField(t *testing.T) {
	ctx := context.Background()
	rt := fakeruntime.New(nil)
	claim := portClaim(
		infrav1.PortMapping{HostPort: 8080, ContainerPort: 30080},
		infrav1.PortMapping{ListenAddress: "127.0.0.1", HostPort: 8443, ContainerPort: 30443, Protocol: infrav1.ProtocolTCP},
	)
	spec := claim.containerSpec("capct/node:v1.35.4")
	if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: spec.Network, Owner: claim.Owner().ForMachine("")}); err != nil {
		t.Fatal(err)
	}
	holder := portClaim(infrav1.PortMapping{ListenAddress: "0.0.0.0", HostPort: 8443, ContainerPort: 443})
	holder.ContainerMachine.Name = "other"
	for i, c := range []*Claim{holder, claim} {
		if _, err := rt.CreateMachine(ctx, c.containerSpec("capct/node:v1.35.4")); err != nil {
			t.Fatal(err)
		}
		err := rt.Start(ctx, c.ContainerName(), c.Owner())
		if i == 0 {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		wait, ok := AsWait(claim.hostPortInUse(err))
		if !ok || wait.Reason != infrav1.HostPortInUseReason || wait.RequeueAfter != hostRecheck ||
			!strings.HasPrefix(wait.Message, "spec.extraPortMappings[1]: host port 127.0.0.1:8443/TCP is in use") {
			t.Fatalf("want a HostPortInUse wait naming spec.extraPortMappings[1], got %+v from %v", wait, err)
		}
	}

	unknown := container.NewError("start", "container", claim.ContainerName(), container.KindHostPortInUse,
		&container.HostPortInUseError{HostIP: "127.0.0.1", HostPort: 9999, Err: errors.New("Bind for 127.0.0.1:9999 failed: port is already allocated")})
	if wait, ok := AsWait(claim.hostPortInUse(unknown)); !ok || !strings.HasPrefix(wait.Message, "spec.extraPortMappings: host port 127.0.0.1:9999 is in use") {
		t.Fatalf("a port the machine does not name: %+v", wait)
	}
	for _, err := range []error{nil, errors.New("boom"), container.NewError("start", "container", "x", container.KindInUse, errors.New("Address already in use"))} {
		if got := claim.hostPortInUse(err); got != nil {
			t.Fatalf("hostPortInUse(%v) = %v, want nil", err, got)
		}
	}
}
