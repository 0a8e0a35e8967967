package realcluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// NodeCounts counts a workload cluster's Nodes as the quickstart names
// them: <cluster>-md-0-... for the MachineDeployment's, <cluster>-mp-0-...
// for the MachinePool's.
type NodeCounts struct {
	Ready, Total, MachineDeployment, MachinePool int
}

// CountNodes counts nodes.
func CountNodes(nodes []corev1.Node) NodeCounts {
	var n NodeCounts
	for i := range nodes {
		n.Total++
		if NodeReady(&nodes[i]) {
			n.Ready++
		}
		switch name := nodes[i].Name; {
		case strings.Contains(name, "-md-0-"):
			n.MachineDeployment++
		case strings.Contains(name, "-mp-0-"):
			n.MachinePool++
		}
	}
	return n
}

// Are is true when the cluster has exactly one control plane, md
// MachineDeployment and mp MachinePool Nodes, every one Ready.
func (n NodeCounts) Are(md, mp int) bool {
	return n == NodeCounts{Ready: 1 + md + mp, Total: 1 + md + mp, MachineDeployment: md, MachinePool: mp}
}

func (n NodeCounts) String() string {
	return fmt.Sprintf("%d of %d Ready (%d MachineDeployment, %d MachinePool)", n.Ready, n.Total, n.MachineDeployment, n.MachinePool)
}

// NodeReady is true when node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	c := nodeCondition(node, corev1.NodeReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady is true when pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// StaleNodes says, one line per Node, which are not Ready or whose Ready
// was last posted before since: a status from before an engine restart
// says nothing about the Node after it.
func StaleNodes(nodes []corev1.Node, since time.Time) []string {
	var out []string
	for i := range nodes {
		c := nodeCondition(&nodes[i], corev1.NodeReady)
		switch {
		case c == nil:
			out = append(out, nodes[i].Name+" has no Ready condition")
		case c.Status != corev1.ConditionTrue || c.LastHeartbeatTime.Time.Before(since):
			out = append(out, fmt.Sprintf("%s Ready=%s (%s), last heartbeat %s", nodes[i].Name, c.Status, c.Reason,
				c.LastHeartbeatTime.UTC().Format(time.RFC3339)))
		}
	}
	return out
}

// RestartedPod says what is wrong with pod after an engine restart: it
// must be the pod of before (uid), its first container must have started
// at or after since, and it must be Ready.
func RestartedPod(pod *corev1.Pod, uid string, since time.Time) []string {
	var out []string
	if string(pod.UID) != uid {
		out = append(out, pod.Name+" is not the pod of before")
	}
	statuses := pod.Status.ContainerStatuses
	if len(statuses) == 0 || statuses[0].State.Running == nil || statuses[0].State.Running.StartedAt.Time.Before(since) {
		out = append(out, pod.Name+" has not run again since the restart")
	}
	if !PodReady(pod) {
		out = append(out, pod.Name+" is not Ready")
	}
	return out
}

// lifecyclePhases are the ContainerMachine conditions in the order a
// machine passes them.
var lifecyclePhases = []string{
	infrav1.LaunchedCondition, infrav1.BootstrappedCondition, infrav1.RegisteredCondition, infrav1.InitializedCondition,
}

// MachinePhase is the phase the quickstart prints for a ContainerMachine:
// Deleting, Failed with its Ready message, else the last lifecycle
// condition that is True, else Pending.
func MachinePhase(m *infrav1.ContainerMachine) string {
	switch {
	case m.DeletionTimestamp != nil:
		return "Deleting"
	case m.Status.Phase == infrav1.MachinePhaseFailed:
		msg := ""
		for _, c := range m.Status.Conditions {
			if c.Type == clusterv1.ReadyCondition {
				msg = strings.Join(strings.Fields(c.Message), " ")
				break
			}
		}
		if len(msg) > 300 {
			msg = msg[:300]
		}
		return "Failed: " + msg
	}
	phase := "Pending"
	for _, t := range lifecyclePhases {
		for _, c := range m.Status.Conditions {
			if c.Type == t && c.Status == metav1.ConditionTrue {
				phase = t
			}
		}
	}
	return phase
}

// clusterAvailability are the Cluster's conditions a state shows.
var clusterAvailability = []string{
	clusterv1.AvailableCondition, clusterv1.ClusterRemoteConnectionProbeCondition,
	clusterv1.ClusterControlPlaneAvailableCondition, clusterv1.ClusterWorkersAvailableCondition,
}

// ObjectState is one line of an object's state for a timeline: its phase,
// then for a Cluster its availability conditions, for the others Ready
// and every condition that is not True, except Paused and Deleting, which
// are False when all is well. A condition not True carries its reason.
func ObjectState(kind, phase string, conditions []metav1.Condition) string {
	var parts []string
	if phase != "" {
		parts = append(parts, phase)
	}
	for _, c := range conditions {
		show := c.Type == clusterv1.ReadyCondition ||
			(c.Status != metav1.ConditionTrue && c.Type != clusterv1.PausedCondition && c.Type != clusterv1.DeletingCondition)
		if kind == "Cluster" {
			show = slices.Contains(clusterAvailability, c.Type)
		}
		if !show {
			continue
		}
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Status != metav1.ConditionTrue {
			s += "(" + c.Reason + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// NodeState is a Node's state for a timeline: Ready, with its reason.
func NodeState(node *corev1.Node) string {
	c := nodeCondition(node, corev1.NodeReady)
	if c == nil {
		return ""
	}
	return readyState(string(c.Status), c.Reason)
}

// PodState is a pod's state for a timeline: Ready with its reason, its
// phase and its first container's restarts.
func PodState(pod *corev1.Pod) string {
	var parts []string
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			parts = append(parts, readyState(string(c.Status), c.Reason))
		}
	}
	restarts := int32(0)
	if len(pod.Status.ContainerStatuses) > 0 {
		restarts = pod.Status.ContainerStatuses[0].RestartCount
	}
	return strings.Join(append(parts, string(pod.Status.Phase), fmt.Sprintf("restarts=%d", restarts)), " ")
}

func readyState(status, reason string) string {
	if reason == "" {
		return "Ready=" + status
	}
	return fmt.Sprintf("Ready=%s(%s)", status, reason)
}

// Tally counts values: "2 a, 1 b", in the values' order.
func Tally(values []string) string {
	counts := map[string]int{}
	for _, v := range values {
		counts[v]++
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
	}
	return strings.Join(parts, ", ")
}

// DuplicateCIDRs says, one line per CIDR, which CIDRs more than one owner
// holds at once: owners maps an owner (a Node, a ContainerMachine's
// record) to the CIDRs it holds. Empty strings are ignored; a CIDR held
// twice by one owner is not a duplicate.
func DuplicateCIDRs(owners map[string][]string) []string {
	holders := map[string][]string{}
	for _, owner := range slices.Sorted(maps.Keys(owners)) {
		for _, cidr := range owners[owner] {
			if cidr != "" && !slices.Contains(holders[cidr], owner) {
				holders[cidr] = append(holders[cidr], owner)
			}
		}
	}
	var out []string
	for _, cidr := range slices.Sorted(maps.Keys(holders)) {
		if len(holders[cidr]) > 1 {
			out = append(out, fmt.Sprintf("%s held by %s", cidr, strings.Join(holders[cidr], ", ")))
		}
	}
	return out
}
