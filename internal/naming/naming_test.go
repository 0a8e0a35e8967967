package naming

import (
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

var hostname = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

func TestNamesAreReadableValidAndKeepClustersApart(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, tc := range []struct {
		name, namespace, cluster, machine string
		wantPrefix                        string
	}{
		{"machine led by its cluster", "default", "demo", "demo-md-0-abcde", "demo-md-0-abcde-"},
		{"machine without the cluster's name", "default", "demo", "cp-0", "demo-cp-0-"},
		{"long names are cut", "default", long, long + "-md-0-abcde-fghij", "aaaa"},
		{"dots become dashes", "default", "demo", "demo.md.0", "demo-demo-md-0-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ContainerName(tc.namespace, tc.cluster, tc.machine)
			if len(got) > MaxNameLength || !hostname.MatchString(got) {
				t.Fatalf("%q is not a valid hostname label", got)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Fatalf("%q does not start with %q", got, tc.wantPrefix)
			}
			if !strings.HasSuffix(got, "-"+ClusterHash(tc.namespace, tc.cluster)) {
				t.Fatalf("%q does not end in the cluster hash", got)
			}
			if again := ContainerName(tc.namespace, tc.cluster, tc.machine); again != got {
				t.Fatalf("not deterministic: %q then %q", got, again)
			}
		})
	}
}

// TestNoTwoOwnersShareAName derives the names of many clusters and machines
// whose readable parts collide, and expects every name to be unique.
func TestNoTwoOwnersShareAName(t *testing.T) {
	seen := map[string]string{}
	add := func(kind, name, who string) {
		t.Helper()
		if len(name) > MaxNameLength || !hostname.MatchString(name) {
			t.Fatalf("%s %q of %s is not a valid hostname label", kind, name, who)
		}
		if other, ok := seen[name]; ok {
			t.Fatalf("%s of %s and %s share the name %q", kind, who, other, name)
		}
		seen[name] = who
	}
	long := strings.Repeat("x", 70)
	for _, ns := range []string{"default", "other", "a", "a-b", long} {
		for _, cluster := range []string{"demo", "b-c", "c", "demo-md", long, long + "y"} {
			who := ns + "/" + cluster
			add("network", DefaultNetworkName(ns, cluster), who)
			add("load balancer", LoadBalancerName(ns, cluster), who)
			for _, machine := range []string{"md-0", "demo-md-0", "lb", cluster + "-lb", "x.y", "x-y", long + "-1", long + "-2"} {
				add("container", ContainerName(ns, cluster, machine), who+" machine "+machine)
			}
		}
	}
}

func TestNetworkNameAndOwner(t *testing.T) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "demo", UID: "uid-1"}}
	cc := &infrav1.ContainerCluster{}
	if got := NetworkName(cluster, cc); got != DefaultNetworkName("team-a", "demo") || !strings.HasPrefix(got, "capct-demo-") {
		t.Fatalf("default network name %q", got)
	}
	cc.Spec.Network.Name = "kind"
	if got := NetworkName(cluster, cc); got != "kind" {
		t.Fatalf("spec.network.name must win, got %q", got)
	}
	if ClusterOwner(cluster, cc).Valid() {
		t.Fatal("an owner without a cluster ID must be invalid")
	}
	cc.Spec.ClusterID = "id-1"
	want := container.Owner{Namespace: "team-a", Cluster: "demo", ClusterID: "id-1"}
	if got := ClusterOwner(cluster, cc); got != want {
		t.Fatalf("owner %+v, want %+v", got, want)
	}
}

func TestIPFamilyAndImage(t *testing.T) {
	for _, tc := range []struct {
		pods   []string
		family infrav1.IPFamily
		want   container.IPFamily
	}{
		{nil, "", container.IPv4},
		{[]string{"fd00::/48"}, "", container.IPv6},
		{[]string{"10.244.0.0/16", "fd00::/48"}, "", container.DualStack},
		{[]string{"10.244.0.0/16"}, infrav1.IPv6Family, container.IPv6},
	} {
		cluster := &clusterv1.Cluster{}
		cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = tc.pods
		cc := &infrav1.ContainerCluster{}
		cc.Spec.Network.IPFamily = tc.family
		if got := IPFamily(cluster, cc); got != tc.want {
			t.Errorf("pods %v family %q: got %s, want %s", tc.pods, tc.family, got, tc.want)
		}
	}
	if img, err := DefaultNodeImage("1.35.4"); err != nil || img != "capct/node:v1.35.4" {
		t.Errorf("DefaultNodeImage: %q %v", img, err)
	}
	if _, err := DefaultNodeImage("latest"); err == nil {
		t.Error("an unparseable version must be an error")
	}
}
