package lifecycle

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// TestAWarmMachineBootsAndWaitsForItsPromotion runs every phase for a warm
// machine of a pool: no Machine, no bootstrap data. Its container is
// created, labelled with its pool, and runs; it bootstraps nothing and
// looks for no Node. Promoted (the pool's label, a Machine, the pool's
// bootstrap data), it bootstraps in the container it booted in.
func TestAWarmMachineBootsAndWaitsForItsPromotion(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	lifecycle := NewMachine(e.deps.config())
	warm := func() *MachineScope {
		s := e.scope()
		cm := s.ContainerMachine
		cm.Labels = map[string]string{clusterv1.ClusterNameLabel: "c1", infrav1.WarmPoolLabel: "workers"}
		s.Machine, s.BootstrapDataSecretName = nil, nil
		return s
	}
	s := warm()
	if _, err := lifecycle.Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WarmReason)
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WarmReason)
	booted, err := e.runtime.Inspect(ctx, s.ContainerName())
	if err != nil {
		t.Fatalf("no container for the warm machine: %v", err)
	}
	if booted.Labels[container.LabelPool] != "workers" || booted.State != container.StateRunning {
		t.Fatalf("want a running container labelled with its pool, got %s with labels %v", booted.State, booted.Labels)
	}
	if execs := e.runtime.ExecCalls(); len(execs) != 0 {
		t.Fatalf("a warm machine ran %v in its container; it must run nothing before its promotion", execs)
	}

	// Its pool promotes it: the pool's label instead of the warm one, then
	// a Machine and the pool's bootstrap data.
	promoted := e.scope()
	promoted.ContainerMachine = s.ContainerMachine
	promoted.ContainerMachine.Labels = map[string]string{clusterv1.ClusterNameLabel: "c1", clusterv1.MachinePoolNameLabel: "workers"}
	promoted.BootstrapDataSecretName = ptr.To("bootstrap")
	if _, err := lifecycle.Reconcile(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if c := condition(promoted, infrav1.BootstrappedCondition); c.Reason == infrav1.WarmReason || c.Status == metav1.ConditionFalse {
		t.Fatalf("the promoted machine did not start its bootstrap: %s/%s %s", c.Status, c.Reason, c.Message)
	}
	if promoted.Container == nil || promoted.Container.ID != booted.ID {
		t.Fatalf("the promoted machine bootstraps in container %+v, not the one it booted in (%s)", promoted.Container, booted.ID)
	}
}
