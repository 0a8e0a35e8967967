package capacity_test

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/capacity"
)

// TestOf: cpu and memory come from the container's limits, each only when
// set, and serialise as the contract's map of resource names to quantity
// strings, which is what the cluster autoscaler parses.
func TestOf(t *testing.T) {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	tests := map[string]struct {
		resources *infrav1.MachineResources
		want      corev1.ResourceList
		wantJSON  string
	}{
		"no resources: the host is no node's own": {
			resources: nil, want: nil, wantJSON: "null",
		},
		"empty resources": {
			resources: &infrav1.MachineResources{}, want: nil, wantJSON: "null",
		},
		"cpus and memory": {
			resources: &infrav1.MachineResources{CPUs: q("2"), Memory: q("4Gi")},
			want:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			wantJSON:  `{"cpu":"2","memory":"4Gi"}`,
		},
		"a fraction of a CPU, memory in another unit": {
			resources: &infrav1.MachineResources{CPUs: q("1.5"), Memory: q("2048Mi")},
			want:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("2Gi")},
			wantJSON:  `{"cpu":"1500m","memory":"2Gi"}`,
		},
		"cpus only": {
			resources: &infrav1.MachineResources{CPUs: q("500m")},
			want:      corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			wantJSON:  `{"cpu":"500m"}`,
		},
		"memory only": {
			resources: &infrav1.MachineResources{Memory: q("512Mi")},
			want:      corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			wantJSON:  `{"memory":"512Mi"}`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := capacity.Of(tt.resources)
			if len(got) != len(tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("Of() = %v, want %v", got, tt.want)
			}
			for k, want := range tt.want {
				if g, ok := got[k]; !ok || g.Cmp(want) != 0 {
					t.Errorf("Of()[%s] = %v, want %v", k, got[k], want.String())
				}
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.wantJSON {
				t.Errorf("Of() serialises as %s, want %s", b, tt.wantJSON)
			}
		})
	}
}

// TestNodeInfo: every node is Linux; the architecture is not guessed.
func TestNodeInfo(t *testing.T) {
	got := capacity.NodeInfo()
	if got == nil || got.OperatingSystem != "linux" || got.Architecture != "" {
		t.Fatalf("NodeInfo() = %+v, want operatingSystem linux and no architecture", got)
	}
}
