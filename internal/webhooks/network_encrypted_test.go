package webhooks_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func encrypted(c *infrav1.ContainerCluster) *infrav1.ContainerCluster {
	c.Spec.Network.Encrypted = true
	return c
}

// TestNetworkEncryptionIsValidated checks spec.network.encrypted against
// the API server: it is for the overlay of a cluster on several engines
// only, and fixed at creation, since an overlay cannot change its
// encryption under running nodes.
func TestNetworkEncryptionIsValidated(t *testing.T) {
	ctx := context.Background()
	valid := encrypted(clusterOnEngines("encrypted-overlay", "engine-a", "engine-b"))
	if err := env.Client.Create(ctx, valid); err != nil {
		t.Fatalf("an encrypted overlay across two engines was refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, valid) })

	unmanaged := encrypted(clusterOnEngines("enc-unmanaged", "engine-a", "engine-b"))
	unmanaged.Spec.Network.Mode, unmanaged.Spec.Network.Name = infrav1.NetworkUnmanaged, "shared"
	testCases := []struct {
		name   string
		before *infrav1.ContainerCluster // created first; obj is then an update of it
		obj    *infrav1.ContainerCluster
		want   string
	}{
		{name: "on one engine", obj: encrypted(clusterOnEngines("enc-one", "engine-a")), want: "network.encrypted needs a cluster on several engines"},
		{name: "on the manager's own engine", obj: encrypted(validCluster("enc-own")), want: "network.encrypted needs a cluster on several engines"},
		{name: "on an Unmanaged network", obj: unmanaged, want: "encrypted needs mode Managed"},
		{name: "turned on after creation", before: clusterOnEngines("enc-on", "engine-a", "engine-b"),
			obj: encrypted(clusterOnEngines("enc-on", "engine-a", "engine-b")), want: "network.encrypted is immutable"},
		{name: "turned off after creation", before: encrypted(clusterOnEngines("enc-off", "engine-a", "engine-b")),
			obj: clusterOnEngines("enc-off", "engine-a", "engine-b"), want: "network.encrypted is immutable"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.before != nil {
				if err := env.Client.Create(ctx, tc.before); err != nil {
					t.Fatalf("failed to create the valid object before the update: %v", err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.before) })
				tc.obj.SetResourceVersion(tc.before.GetResourceVersion())
				err = env.Client.Update(ctx, tc.obj)
			} else if err = env.Client.Create(ctx, tc.obj); err == nil {
				t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.obj) })
			}
			if err == nil {
				t.Fatal("the API server accepted it")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an Invalid error saying %q, got %v", tc.want, err)
			}
		})
	}
}
