package containermachinepool

import (
	"fmt"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/capacity"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// Reasons of the pool's Ready condition.
const (
	// ScalingUpReason: fewer up-to-date machines than desired.
	ScalingUpReason = "ScalingUp"
	// ScalingDownReason: more machines than desired.
	ScalingDownReason = "ScalingDown"
	// RollingUpdateReason: outdated machines are being replaced.
	RollingUpdateReason = "RollingUpdate"
	// WaitingForMachinesReason: the count is right, some are not provisioned.
	WaitingForMachinesReason = "WaitingForMachines"
	// ReplacingFailedMachinesReason: machines failed for good and are
	// being replaced.
	ReplacingFailedMachinesReason = "ReplacingFailedMachines"
)

// summary is what the status of the pool is derived from.
type summary struct {
	desired int
	members []member
	// warm are the pool's warm machines (warm.go).
	warm        []member
	cluster     *clusterv1.Cluster
	deleting    bool
	generation  int64
	machineKind string
}

// setStatus writes the pool's contract fields from its members. It is a
// pure function of its inputs (ordering included), so that a reconcile in
// steady state produces an identical object and the patch helper sends
// nothing.
func setStatus(pool *expinfrav1.ContainerMachinePool, s summary, now time.Time) {
	pool.Status.InfrastructureMachineKind = s.machineKind

	var ids []string
	instances := make([]expinfrav1.ContainerMachinePoolInstance, 0, len(s.members))
	provisioned, outdated, active, failed := 0, 0, 0, 0
	for _, m := range s.members {
		if id := m.cm.Spec.ProviderID; id != "" {
			ids = append(ids, id)
		}
		if !m.deleting() {
			active++
			if m.outdated {
				outdated++
			}
			if m.failed != "" {
				failed++
			}
		}
		if m.available() {
			provisioned++
		}
		instances = append(instances, instance(s.cluster, m))
	}
	sort.Strings(ids)
	ids = slices.Compact(ids)
	sort.Slice(instances, func(i, j int) bool { return instances[i].InstanceName < instances[j].InstanceName })
	pool.Spec.ProviderIDList = ids
	if len(instances) == 0 {
		instances = nil
	}
	pool.Status.Instances = instances
	pool.Status.Replicas = int32(len(s.members))
	pool.Status.WarmReplicas = int32(warmReady(s.warm))

	ready := !s.deleting && len(s.members) == s.desired && provisioned == s.desired && outdated == 0 && failed == 0
	pool.Status.Ready = ready
	pool.Status.Initialization.Provisioned = ptr.To(ready)
	pool.Status.ObservedGeneration = s.generation
	// What Cluster API's autoscaler reads to scale the pool up from zero.
	pool.Status.Capacity = capacity.Of(pool.Spec.Template.Resources)
	pool.Status.NodeInfo = capacity.NodeInfo()

	setReadyCondition(pool, now, s, readyState{ready: ready, active: active, outdated: outdated, provisioned: provisioned, failed: failed})
}

// readyState counts the pool's machines; provisioned counts only those
// that have not failed (member.available).
type readyState struct {
	ready                                 bool
	active, outdated, provisioned, failed int
}

// setReadyCondition summarises the pool in its Ready condition.
func setReadyCondition(pool *expinfrav1.ContainerMachinePool, now time.Time, s summary, r readyState) {
	status, reason, msg := metav1.ConditionTrue, infrav1.SucceededReason, ""
	switch {
	case s.deleting:
		status, reason, msg = metav1.ConditionFalse, infrav1.DeletingReason, fmt.Sprintf("Deleting %d machines", len(s.members))
	case r.ready:
	case r.failed > 0:
		status, reason, msg = metav1.ConditionFalse, ReplacingFailedMachinesReason, fmt.Sprintf("%d of %d machines failed and are being replaced", r.failed, r.active)
	case r.outdated > 0:
		status, reason, msg = metav1.ConditionFalse, RollingUpdateReason, fmt.Sprintf("%d of %d machines are outdated", r.outdated, r.active)
	case len(s.members) < s.desired:
		status, reason, msg = metav1.ConditionFalse, ScalingUpReason, fmt.Sprintf("%d of %d machines exist", len(s.members), s.desired)
	case len(s.members) > s.desired:
		status, reason, msg = metav1.ConditionFalse, ScalingDownReason, fmt.Sprintf("%d machines exist, %d desired", len(s.members), s.desired)
	default:
		status, reason, msg = metav1.ConditionFalse, WaitingForMachinesReason, fmt.Sprintf("%d of %d machines are provisioned", r.provisioned, s.desired)
	}
	conditions.Set(pool, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             status,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: s.generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// instance describes one machine for status.instances.
func instance(cluster *clusterv1.Cluster, m member) expinfrav1.ContainerMachinePoolInstance {
	name := m.cm.Name
	if cluster != nil {
		name = naming.ContainerName(m.cm.Namespace, cluster.Name, m.cm.Name)
	}
	version := m.cm.Annotations[VersionAnnotation]
	if m.machine != nil && m.machine.Spec.Version != "" {
		version = m.machine.Spec.Version
	}
	var addresses []clusterv1.MachineAddress
	if len(m.cm.Status.Addresses) > 0 {
		addresses = slices.Clone(m.cm.Status.Addresses)
	}
	return expinfrav1.ContainerMachinePoolInstance{
		InstanceName: name,
		ProviderID:   m.cm.Spec.ProviderID,
		Addresses:    addresses,
		Version:      version,
		Ready:        m.available(),
	}
}
