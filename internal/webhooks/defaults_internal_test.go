package webhooks

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// TestTheDefaultNetworkIsOnlyForNewClustersThatNameNone: with the
// manager's --default-network, a ContainerCluster created with neither a
// network name nor a mode joins it, Unmanaged; one that says anything
// about its network, an update, or a manager without the flag leave the
// network as it is.
func TestTheDefaultNetworkIsOnlyForNewClustersThatNameNone(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		operation admissionv1.Operation
		network   infrav1.NetworkSpec
		want      infrav1.NetworkSpec
	}{
		{name: "spec {} on create", flag: "capct-mgmt", operation: admissionv1.Create,
			want: infrav1.NetworkSpec{Name: "capct-mgmt", Mode: infrav1.NetworkUnmanaged}},
		{name: "only an IP family on create", flag: "capct-mgmt", operation: admissionv1.Create,
			network: infrav1.NetworkSpec{IPFamily: infrav1.DualStackFamily},
			want:    infrav1.NetworkSpec{Name: "capct-mgmt", Mode: infrav1.NetworkUnmanaged, IPFamily: infrav1.DualStackFamily}},
		{name: "Managed asked for", flag: "capct-mgmt", operation: admissionv1.Create,
			network: infrav1.NetworkSpec{Mode: infrav1.NetworkManaged}, want: infrav1.NetworkSpec{Mode: infrav1.NetworkManaged}},
		{name: "a name of its own", flag: "capct-mgmt", operation: admissionv1.Create,
			network: infrav1.NetworkSpec{Name: "mine"}, want: infrav1.NetworkSpec{Name: "mine"}},
		{name: "an update keeps the derived network", flag: "capct-mgmt", operation: admissionv1.Update},
		{name: "no default network", operation: admissionv1.Create},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Network: tc.network}}
			ctx := admission.NewContextWithRequest(context.Background(),
				admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tc.operation}})
			if err := (&containerClusterDefaulter{network: tc.flag}).Default(ctx, c); err != nil {
				t.Fatal(err)
			}
			if c.Spec.Network != tc.want {
				t.Errorf("network = %+v, want %+v", c.Spec.Network, tc.want)
			}
		})
	}
}
