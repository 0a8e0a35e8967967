package machineprovider

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// clusterOn returns a ContainerCluster on the given engines, its
// EnginesReady condition True unless notReady.
func clusterOn(notReady bool, list ...infrav1.ClusterEngine) *infrav1.ContainerCluster {
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: infrav1.ContainerClusterSpec{Engines: list}}
	status := metav1.ConditionTrue
	if notReady {
		status = metav1.ConditionFalse
	}
	if len(list) > 0 {
		cc.Status.Conditions = []metav1.Condition{{Type: infrav1.EnginesReadyCondition, Status: status, Reason: "R", Message: "engine-b is away"}}
	}
	return cc
}

// awayFrom returns cc with its EnginesReady condition saying an engine
// does not answer, as the ContainerCluster controller says it.
func awayFrom(cc *infrav1.ContainerCluster) *infrav1.ContainerCluster {
	cc.Status.Conditions = []metav1.Condition{{Type: infrav1.EnginesReadyCondition, Status: metav1.ConditionFalse,
		Reason: infrav1.EngineUnreachableReason, Message: "ContainerEngine a does not answer"}}
	return cc
}

func TestPlaceMachine(t *testing.T) {
	a, b, c := infrav1.ClusterEngine{Name: "a"}, infrav1.ClusterEngine{Name: "b"}, infrav1.ClusterEngine{Name: "c"}
	workersOnly := infrav1.ClusterEngine{Name: "a", ControlPlane: ptr.To(false)}
	tests := []struct {
		name          string
		cc            *infrav1.ContainerCluster
		failureDomain string
		controlPlane  bool
		perEngine     map[string]int
		away          []string // engines that do not answer
		want          string
		wantReason    string
	}{
		{name: "a cluster on the manager's own engine", cc: clusterOn(false), failureDomain: "fd1", want: engines.Local},
		{name: "the failure domain names the engine", cc: clusterOn(false, a, b), failureDomain: "b", perEngine: map[string]int{"a": 0, "b": 5}, want: "b"},
		{name: "a failure domain that is no engine of the cluster", cc: clusterOn(false, a, b), failureDomain: "z", wantReason: infrav1.FailureDomainNotFoundReason},
		{name: "the engine with the fewest machines", cc: clusterOn(false, a, b, c), perEngine: map[string]int{"a": 2, "b": 1, "c": 1}, want: "b"},
		{name: "the first listed on a tie", cc: clusterOn(false, a, b), perEngine: map[string]int{"a": 1, "b": 1}, want: "a"},
		{name: "no machines yet", cc: clusterOn(false, b, a), want: "b"},
		{name: "a control-plane machine skips workers-only engines", cc: clusterOn(false, workersOnly, b), controlPlane: true, perEngine: map[string]int{"b": 3}, want: "b"},
		{name: "a worker may use workers-only engines", cc: clusterOn(false, workersOnly, b), perEngine: map[string]int{"b": 3}, want: "a"},
		{name: "no engine takes control-plane machines", cc: clusterOn(false, workersOnly), controlPlane: true, wantReason: infrav1.FailureDomainNotFoundReason},
		{name: "the cluster's engines are not ready", cc: clusterOn(true, a), wantReason: infrav1.WaitingForClusterInfrastructureReason},
		{name: "an engine away: the machine goes to one that answers", cc: awayFrom(clusterOn(false, a, b)), away: []string{"a"},
			perEngine: map[string]int{"a": 0, "b": 3}, want: "b"},
		{name: "every engine that may run it is away", cc: awayFrom(clusterOn(false, workersOnly, b)), controlPlane: true, away: []string{"b"},
			wantReason: infrav1.WaitingForClusterInfrastructureReason},
		{name: "a failure domain on an engine that is away is kept", cc: awayFrom(clusterOn(false, a, b)), away: []string{"a"}, failureDomain: "a", want: "a"},
		{name: "the cluster's engines were never checked", cc: &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{a}}},
			wantReason: infrav1.WaitingForClusterInfrastructureReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answers := map[string]bool{}
			for _, e := range tt.cc.Spec.Engines {
				answers[e.Name] = !slices.Contains(tt.away, e.Name)
			}
			got, err := PlaceMachine(tt.cc, tt.failureDomain, tt.controlPlane, tt.perEngine, answers)
			var unplaced *WaitError
			switch {
			case tt.wantReason != "" && !errors.As(err, &unplaced):
				t.Fatalf("PlaceMachine() = %q, %v; want a WaitError with reason %s", got, err, tt.wantReason)
			case tt.wantReason != "" && unplaced.Reason != tt.wantReason:
				t.Fatalf("PlaceMachine() reason = %s (%s), want %s", unplaced.Reason, unplaced.Message, tt.wantReason)
			case tt.wantReason == "" && (err != nil || got != tt.want):
				t.Fatalf("PlaceMachine() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestRecordedEngine(t *testing.T) {
	machine := func(providerID string, annotations map[string]string) *infrav1.ContainerMachine {
		return &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: infrav1.ContainerMachineSpec{ProviderID: providerID}}
	}
	deleting := func(cm *infrav1.ContainerMachine) *infrav1.ContainerMachine {
		cm.DeletionTimestamp = ptr.To(metav1.Now())
		return cm
	}
	onEngine := func(e string) map[string]string { return map[string]string{infrav1.EngineAnnotation: e} }
	a, b := infrav1.ClusterEngine{Name: "a"}, infrav1.ClusterEngine{Name: "b"}
	tests := []struct {
		name         string
		cm           *infrav1.ContainerMachine
		cc           *infrav1.ContainerCluster
		want         string
		wantRecorded bool
		wantErr      bool
	}{
		{name: "recorded on a listed engine", cm: machine("", onEngine("b")), cc: clusterOn(false, a, b), want: "b", wantRecorded: true},
		{name: "a new machine of a cluster on engines", cm: machine("", nil), cc: clusterOn(false, a, b)},
		{name: "launched before placement: the first engine", cm: machine("container:///x", nil), cc: clusterOn(false, a, b), want: "a", wantRecorded: true},
		{name: "a cluster on the manager's own engine", cm: machine("", nil), cc: clusterOn(false), want: engines.Local, wantRecorded: true},
		{name: "an engine the cluster does not list", cm: machine("", onEngine("z")), cc: clusterOn(false, a), wantErr: true},
		{name: "an engine the cluster no longer lists, while deleting", cm: deleting(machine("container:///x", onEngine("z"))), cc: clusterOn(false, a),
			want: "z", wantRecorded: true},
		{name: "an engine on a cluster that lists none", cm: machine("", onEngine("a")), cc: clusterOn(false), wantErr: true},
		{name: "no ContainerCluster: the annotation", cm: machine("", onEngine("b")), want: "b", wantRecorded: true},
		{name: "no ContainerCluster and no annotation: the manager's own", cm: machine("", nil), want: engines.Local, wantRecorded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, recorded, err := RecordedEngine(tt.cm, tt.cc)
			if (err != nil) != tt.wantErr || got != tt.want || recorded != tt.wantRecorded {
				t.Fatalf("RecordedEngine() = %q, %v, %v; want %q, %v, error %v", got, recorded, err, tt.want, tt.wantRecorded, tt.wantErr)
			}
		})
	}
}
