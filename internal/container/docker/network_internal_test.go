package docker

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// TestCreateOptionsEncryptOnlyWhenAsked checks what EnsureNetwork asks the
// engine for: an overlay asked to be encrypted gets the overlay driver's
// "encrypted" option, and nothing else does.
func TestCreateOptionsEncryptOnlyWhenAsked(t *testing.T) {
	owner := container.Owner{Namespace: "ns", Cluster: "c", ClusterID: "id"}
	v4, v6 := netip.MustParsePrefix("172.30.0.0/24"), netip.MustParsePrefix("fd00:1::/64")
	tests := []struct {
		name        string
		spec        container.NetworkSpec
		wantDriver  string
		wantOptions map[string]string
	}{
		{"bridge", container.NetworkSpec{Name: "n", Owner: owner},
			"bridge", map[string]string{"com.docker.network.bridge.enable_ip_masquerade": "true"}},
		{"overlay", container.NetworkSpec{Name: "n", Owner: owner, Overlay: true}, "overlay", nil},
		{"encrypted overlay", container.NetworkSpec{Name: "n", Owner: owner, Overlay: true, Encrypted: true},
			"overlay", map[string]string{"encrypted": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := createOptions(tc.spec, container.IPv4, v4, v6)
			if opts.Driver != tc.wantDriver || !maps.Equal(opts.Options, tc.wantOptions) {
				t.Fatalf("driver %q options %v, want %q %v", opts.Driver, opts.Options, tc.wantDriver, tc.wantOptions)
			}
			if tc.spec.Overlay != opts.Attachable {
				t.Fatalf("attachable %v for overlay %v", opts.Attachable, tc.spec.Overlay)
			}
		})
	}
}
