package nodeipam_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
)

func TestNodeHoldsRecord(t *testing.T) {
	for _, tc := range []struct {
		name      string
		record    string // the annotation; "-" for none
		podCIDR   string
		podCIDRs  []string
		wantHolds bool
	}{
		{name: "the same CIDR", record: "10.244.1.0/24", podCIDRs: []string{"10.244.1.0/24"}, wantHolds: true},
		{name: "both families in another order", record: "fd00::/64,10.244.1.0/24", podCIDRs: []string{"10.244.1.0/24", "fd00::/64"}, wantHolds: true},
		{name: "only the legacy podCIDR field", record: "10.244.1.0/24", podCIDR: "10.244.1.0/24", wantHolds: true},
		{name: "another CIDR", record: "10.244.1.0/24", podCIDRs: []string{"10.244.2.0/24"}},
		{name: "one family of two", record: "10.244.1.0/24,fd00::/64", podCIDRs: []string{"10.244.1.0/24"}},
		{name: "a Node without CIDRs", record: "10.244.1.0/24"},
		{name: "no record", record: "-", podCIDRs: []string{"10.244.1.0/24"}},
		{name: "an empty record and an empty Node", record: ""},
		{name: "a bad record", record: "10.244.1.0/33", podCIDRs: []string{"10.244.1.0/24"}},
		{name: "a bad Node CIDR", record: "10.244.1.0/24", podCIDRs: []string{"10.244.1.0/24", "bogus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			if tc.record != "-" {
				cm.Annotations = map[string]string{infrav1.PodCIDRsAnnotation: tc.record}
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{PodCIDR: tc.podCIDR, PodCIDRs: tc.podCIDRs}}
			if got := nodeipam.NodeHoldsRecord(node, cm); got != tc.wantHolds {
				t.Fatalf("NodeHoldsRecord = %v, want %v", got, tc.wantHolds)
			}
		})
	}
}
