package containermachinepool

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
	"github.com/capct/cluster-api-provider-container/internal/diagnostics"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

const (
	// DiagnosticsSecretType is the type of the Secrets that keep the
	// diagnostics of the pool's failed machines.
	DiagnosticsSecretType corev1.SecretType = "containermachinepool.infrastructure.cluster.x-k8s.io/diagnostics"
	// DiagnosticsMachineUIDLabel names, on such a Secret, the UID of the
	// ContainerMachine it is about (a name may be longer than a label
	// value); DiagnosticsMachineAnnotation names the machine.
	DiagnosticsMachineUIDLabel   = "containermachinepool.infrastructure.cluster.x-k8s.io/machine-uid"
	DiagnosticsMachineAnnotation = "containermachinepool.infrastructure.cluster.x-k8s.io/machine"
	// keptDiagnostics is how many records a pool keeps at most: a record
	// goes into one of that many Secrets, chosen by the machine's UID, and
	// replaces the one there. A template that fails every machine replaces
	// them one after another, each record holds up to ~64 KiB in etcd, and
	// the manager needs neither list nor delete on Secrets to bound them.
	keptDiagnostics = 5
	// eventMessageLimit bounds the failure quoted in an event: the
	// beginning of a lifecycle message is CAPCT's own words, and the event
	// names the Secret that holds the rest.
	eventMessageLimit = 300

	// ReplacingFailedMachineEvent is the reason of the Warning event on the
	// pool that names a failed machine about to be replaced.
	ReplacingFailedMachineEvent = "ReplacingFailedMachine"
	// RemediationMachineDeletingReason is the reason of OwnerRemediated on a
	// Machine that the pool deletes on a MachineHealthCheck's request.
	RemediationMachineDeletingReason = "MachineDeleting"
)

// diagnosticsName is the name of the Secret that a machine's diagnostics
// go into: <pool>-diagnostics-<slot>, the slot derived from the
// ContainerMachine's UID.
func diagnosticsName(pool *expinfrav1.ContainerMachinePool, cm *infrav1.ContainerMachine) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(cm.UID))
	suffix := fmt.Sprintf("-diagnostics-%d", h.Sum32()%keptDiagnostics)
	name := pool.Name
	if limit := 253 - len(suffix); len(name) > limit {
		name = strings.TrimRight(name[:limit], "-.")
	}
	return name + suffix
}

// keepDiagnostics keeps what a failed machine's node still tells (the end
// of its journal, its last bootstrap attempt's marks: diagnostics.
// CollectNodeLogs) in a Secret owned by the pool, and says so in a Warning
// event on the pool naming the machine, why it failed and the Secret. A
// Secret because node logs are not vetted text: who may read the cluster's
// objects may not read its Secrets. The Secret is one of the pool's
// keptDiagnostics slots (diagnosticsName) and its label holds the machine's
// UID, so that a retry (a failed delete, a manager restart) finds it kept
// and sends no second event. Only then may the machine be deleted.
func (r *Reconciler) keepDiagnostics(ctx context.Context, s *scope, m member) error {
	key := client.ObjectKey{Namespace: m.cm.Namespace, Name: diagnosticsName(s.pool, m.cm)}
	existing := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, existing)
	switch {
	case err == nil && existing.Labels[DiagnosticsMachineUIDLabel] == string(m.cm.UID):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	found := err == nil

	logs := r.nodeLogs(ctx, s, m)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace,
			Name:      key.Name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel:     s.clusterName(),
				clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.machinePoolName),
				DiagnosticsMachineUIDLabel:     string(m.cm.UID),
			},
			Annotations: map[string]string{DiagnosticsMachineAnnotation: m.cm.Name},
			// Kept as long as the pool is, not the machine: the machine is
			// about to go.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: expinfrav1.GroupVersion.String(),
				Kind:       "ContainerMachinePool",
				Name:       s.pool.Name,
				UID:        s.pool.UID,
			}},
		},
		Type: DiagnosticsSecretType,
		Data: logs.Data(r.summary(s, m)),
	}
	if found {
		// Another machine of the pool left it in this slot: this
		// machine's record replaces it.
		secret.ResourceVersion = existing.ResourceVersion
		err = r.Client.Update(ctx, secret)
	} else {
		err = r.Client.Create(ctx, secret)
	}
	if err != nil {
		return fmt.Errorf("failed to keep the diagnostics of ContainerMachine %s in Secret %s: %w", klog.KObj(m.cm), key.Name, err)
	}
	r.Recorder.Eventf(s.pool, corev1.EventTypeWarning, ReplacingFailedMachineEvent,
		"Replacing ContainerMachine %s: %s. Its diagnostics are in Secret %s", m.cm.Name, shorten(m.failed, eventMessageLimit), key.Name)
	ctrl.LoggerFrom(ctx).Info("Kept the diagnostics of a failed pool machine", "ContainerMachine", klog.KObj(m.cm),
		"Secret", key.Name, "failure", m.failed, "notes", logs.Notes)
	return nil
}

// nodeLogs collects what the machine's container still holds; what stands
// in the way (no ContainerCluster, no engine) is a note.
func (r *Reconciler) nodeLogs(ctx context.Context, s *scope, m member) diagnostics.NodeLogs {
	cc, err := clusters.ContainerCluster(ctx, r.Client, s.cluster)
	if err != nil || cc == nil {
		return diagnostics.NodeLogs{Notes: []string{fmt.Sprintf("the ContainerCluster of Cluster %s could not be read: %v", s.cluster.Name, err)}}
	}
	engine, placed, err := machineprovider.RecordedEngine(m.cm, cc)
	if err != nil || !placed {
		return diagnostics.NodeLogs{Notes: []string{fmt.Sprintf("the machine has no container on any engine (%v)", err)}}
	}
	rt, err := r.Engines.Get(engine)
	if err != nil {
		return diagnostics.NodeLogs{Notes: []string{fmt.Sprintf("the engine %q of the machine is not connected: %v", engine, err)}}
	}
	name := naming.ContainerName(m.cm.Namespace, s.cluster.Name, m.cm.Name)
	return diagnostics.CollectNodeLogs(ctx, rt, name, naming.ClusterOwner(s.cluster, cc).ForMachine(m.cm.Name))
}

// summary is the record's first key: which machine, and why it is
// replaced.
func (r *Reconciler) summary(s *scope, m member) string {
	machine := "(none yet)"
	if m.machine != nil {
		machine = m.machine.Name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ContainerMachinePool: %s\n", s.pool.Name)
	fmt.Fprintf(&b, "ContainerMachine: %s (uid %s)\n", m.cm.Name, m.cm.UID)
	fmt.Fprintf(&b, "Machine: %s\n", machine)
	fmt.Fprintf(&b, "Container: %s\n", naming.ContainerName(m.cm.Namespace, s.cluster.Name, m.cm.Name))
	if engine, ok := m.cm.Annotations[infrav1.EngineAnnotation]; ok {
		fmt.Fprintf(&b, "Engine: %s\n", engine)
	}
	fmt.Fprintf(&b, "Failed: %s\n", m.failed)
	fmt.Fprintf(&b, "Kept at: %s\n", r.Clock.Now().UTC().Format(time.RFC3339))
	return b.String()
}

// markRemediating tells, on a Machine a MachineHealthCheck asked its owner
// to remediate, that the pool deletes it; Cluster API's contract leaves the
// OwnerRemediated condition to the owner once the health check set it. The
// condition is written before the delete, so that a Machine whose delete
// fails still says what is under way.
func (r *Reconciler) markRemediating(ctx context.Context, machine *clusterv1.Machine) error {
	return r.patchOwnerRemediated(ctx, machine, func(m *clusterv1.Machine) {
		conditions.Set(m, metav1.Condition{
			Type:    clusterv1.MachineOwnerRemediatedCondition,
			Status:  metav1.ConditionFalse,
			Reason:  RemediationMachineDeletingReason,
			Message: "Machine is deleting: the ContainerMachinePool replaces it",
		})
	})
}

// clearRemediation removes OwnerRemediated from the pool's Machines that a
// MachineHealthCheck finds healthy again before the pool deleted them, as
// the contract asks of a Machine's owner; otherwise the condition would
// stay False on a healthy Machine.
func (r *Reconciler) clearRemediation(ctx context.Context, members []member) error {
	var errs []error
	for _, m := range members {
		if m.machine == nil || m.deleting() ||
			!conditions.IsTrue(m.machine, clusterv1.MachineHealthCheckSucceededCondition) ||
			!conditions.IsFalse(m.machine, clusterv1.MachineOwnerRemediatedCondition) {
			continue
		}
		if err := r.patchOwnerRemediated(ctx, m.machine, func(m *clusterv1.Machine) {
			conditions.Delete(m, clusterv1.MachineOwnerRemediatedCondition)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) patchOwnerRemediated(ctx context.Context, machine *clusterv1.Machine, change func(*clusterv1.Machine)) error {
	m := machine.DeepCopy()
	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return fmt.Errorf("failed to create a patch helper for Machine %s: %w", klog.KObj(m), err)
	}
	change(m)
	if err := helper.Patch(ctx, m, patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition}}); err != nil {
		return fmt.Errorf("failed to patch the OwnerRemediated condition of Machine %s: %w", klog.KObj(m), err)
	}
	return nil
}

// shorten cuts s to at most n bytes, on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
