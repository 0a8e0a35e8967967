package containermachine

import (
	"testing"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestBootstrapDataChanged(t *testing.T) {
	pool := func(secret *string, replicas int32) *clusterv1.MachinePool {
		mp := &clusterv1.MachinePool{Spec: clusterv1.MachinePoolSpec{Replicas: ptr.To(replicas)}}
		mp.Spec.Template.Spec.Bootstrap.DataSecretName = secret
		return mp
	}
	tests := []struct {
		name     string
		old, new *clusterv1.MachinePool
		want     bool
	}{
		{"data arrives", pool(nil, 2), pool(ptr.To("mp-0"), 2), true},
		{"data from empty", pool(ptr.To(""), 2), pool(ptr.To("mp-0"), 2), true},
		{"data rotated", pool(ptr.To("mp-0"), 2), pool(ptr.To("mp-0-new"), 2), true},
		{"only replicas", pool(ptr.To("mp-0"), 2), pool(ptr.To("mp-0"), 3), false},
		{"still none", pool(nil, 2), pool(nil, 2), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bootstrapDataChanged.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
				t.Errorf("Update = %v, want %v", got, tt.want)
			}
		})
	}
	if !bootstrapDataChanged.Create(event.CreateEvent{Object: pool(nil, 1)}) {
		t.Error("a new MachinePool must pass: its machines may already wait for it")
	}
}
