package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/nodeaddr"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

const (
	// LaunchTimeout bounds the attempts to create and start a container once
	// everything it needs is there.
	LaunchTimeout = 5 * time.Minute
	// launchRetry is how soon a failed launch is tried again.
	launchRetry = 10 * time.Second
	// containerRecheck is how soon a machine whose container does not run,
	// or whose engine does not answer, looks again. The container's start
	// event usually wakes it sooner.
	containerRecheck = 10 * time.Second
	// capacityRecheck is how soon a machine waiting for host capacity
	// looks again, so that it carries on by itself once a limit is raised.
	capacityRecheck = 15 * time.Second
	// hostRecheck is how soon a machine waiting for an image or a host path
	// to appear on the host looks again: nothing on the host wakes it.
	hostRecheck = 30 * time.Second
)

// Launch creates and starts the machine's container once its Machine, the
// cluster's infrastructure and the bootstrap data are there. The container
// name is derived from the machine, so a launch interrupted by a crash is
// adopted, not repeated. Before creating it, it waits for room on the host
// (see HostCapacity). Afterwards it reports whether the container runs
// (ContainerRunning): a stopped or restarting container makes the machine
// not Ready without failing it, and only a container that is gone fails it
// for good. Such a machine is reported, not silently recreated, because
// recreating hid real failures from CAPD's users.
type Launch struct{ *Deps }

// Reconcile implements Phase.
func (l *Launch) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := l.Clock.Now()
	if c := conditions.Get(cm, infrav1.LaunchedCondition); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
		return ctrl.Result{}, nil
	}

	existing, err := s.Runtime.Inspect(ctx, s.ContainerName())
	switch {
	case err == nil:
		return l.observe(ctx, s, existing, now)
	case container.IsUnreachable(err):
		return l.engineAway(s, now, err)
	case !container.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("failed to inspect the container of ContainerMachine %s/%s: %w", cm.Namespace, cm.Name, err)
	}

	if conditions.IsTrue(cm, infrav1.LaunchedCondition) {
		msg := fmt.Sprintf("Container %s disappeared; CAPCT does not recreate it, delete the Machine to replace it", s.ContainerName())
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, msg)
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, msg)
		l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.ContainerMissingReason, msg)
		return ctrl.Result{}, nil
	}

	if reason, msg := waitingFor(s); reason != "" {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, reason, msg)
		return ctrl.Result{}, nil
	}
	switch waiting, err := l.waitForCapacity(ctx, s, now); {
	case container.IsUnreachable(err):
		return l.engineAway(s, now, err)
	case err != nil:
		return ctrl.Result{}, err
	case waiting:
		return ctrl.Result{RequeueAfter: capacityRecheck}, nil
	}
	image, err := s.Image()
	if err != nil {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.InvalidSpecReason, err.Error())
		l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.InvalidSpecReason, err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	// Before the launch is marked started, so that a machine that keeps
	// waiting for the host keeps its condition as it is.
	if err := l.checkHost(ctx, s, image); err != nil {
		return l.refused(s, now, nil, l.copyMissingImages(s, err))
	}
	was := conditions.Get(cm, infrav1.LaunchedCondition)
	if was != nil {
		was = was.DeepCopy()
	}
	if was == nil || was.Status != metav1.ConditionUnknown {
		// Unknown marks the start of the launch: its transition time is
		// what LaunchTimeout counts from.
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "Creating the container")
	}
	return l.create(ctx, s, now, image, was)
}

// waitingFor names what the launch still waits for, or returns "".
func waitingFor(s *MachineScope) (reason, message string) {
	switch {
	case s.Machine == nil:
		return infrav1.WaitingForOwnerReason, "Waiting for a Machine to own the ContainerMachine"
	case s.ContainerCluster == nil || s.ContainerCluster.Spec.ClusterID == "" ||
		s.Cluster.Status.Initialization.InfrastructureProvisioned == nil || !*s.Cluster.Status.Initialization.InfrastructureProvisioned:
		return infrav1.WaitingForClusterInfrastructureReason, "Waiting for the cluster's infrastructure"
	case s.BootstrapDataSecretName == nil:
		return infrav1.WaitingForBootstrapDataReason, "Waiting for the bootstrap provider to write the bootstrap data"
	}
	return "", ""
}

// waitForCapacity holds the launch, without failing it, while the host's
// limits leave no room for another node, and tells the ContainerCluster
// once. The launch timeout does not count while it waits: Launched is
// False, not Unknown.
//
// The gate reads the manager's own host: only machines on its engine wait
// for it. Another engine's host limits are not visible through its API.
func (l *Launch) waitForCapacity(ctx context.Context, s *MachineScope, now time.Time) (bool, error) {
	if l.HostCapacity == nil || s.Engine != engines.Local {
		return false, nil
	}
	cm := s.ContainerMachine
	d, err := l.HostCapacity.Admit(ctx, client.ObjectKeyFromObject(s.ContainerCluster), s.ContainerName(), s.Role())
	if err != nil {
		return false, fmt.Errorf("failed to check the host's capacity for ContainerMachine %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if d.Shortfall == nil {
		return false, nil
	}
	msg := d.Shortfall.Message()
	setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.WaitingForHostCapacityReason, msg)
	if d.Announce {
		l.Recorder.Event(s.ContainerCluster, corev1.EventTypeWarning, infrav1.WaitingForHostCapacityReason, msg)
	}
	return true, nil
}

// create creates and starts the container from image. was is the Launched
// condition from before this attempt was marked started.
func (l *Launch) create(ctx context.Context, s *MachineScope, now time.Time, image string, was *metav1.Condition) (ctrl.Result, error) {
	cm := s.ContainerMachine
	spec := container.MachineSpec{
		Name:        s.ContainerName(),
		Image:       image,
		Network:     naming.NetworkName(s.Cluster, s.ContainerCluster),
		Labels:      s.ContainerLabels(),
		Role:        s.Role(),
		KindNode:    true,
		IPFamily:    naming.IPFamily(s.Cluster, s.ContainerCluster),
		ExtraMounts: mounts(cm.Spec.ExtraMounts),
		Resources:   resources(cm.Spec.Resources),
	}
	// Control-plane nodes publish no host port: one the engine picks
	// changes at every restart, so nothing could rely on it, and clients
	// reach the API servers through the load balancer's fixed port.
	//
	// The container gets static addresses (nodeaddr), so that it comes
	// back on the address etcd and the API server advertise when the engine
	// restarts it.
	launcher, err := l.launcher(ctx, s)
	if container.IsUnreachable(err) {
		return l.engineAway(s, now, err)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	launched, err := launcher.Launch(ctx, spec)
	if path, ok := container.HostPathNotFound(err); ok {
		return l.refused(s, now, was, &hostPathNotFoundError{mounts: cm.Spec.ExtraMounts, path: path})
	}
	if err != nil {
		return l.failed(s, now, fmt.Errorf("failed to launch container %s for ContainerMachine %s/%s: %w", spec.Name, cm.Namespace, cm.Name, err))
	}
	if launched.StaticFallback {
		l.Recorder.Eventf(cm, corev1.EventTypeWarning, StaticAddressUnsupportedReason,
			"Network %s takes no static addresses (its subnet was not configured when it was created), so container %s may come back on another address after a restart", spec.Network, spec.Name)
	}
	l.Recorder.Eventf(cm, corev1.EventTypeNormal, "Launched", "Launched container %s from %s", spec.Name, image)
	return l.observe(ctx, s, launched.Machine, now)
}

// launcher returns the Launcher for s's container. On a cluster's overlay,
// which spans engines, it reads what every engine holds, and what the
// cluster's machines recorded for the engines that do not answer.
func (l *Launch) launcher(ctx context.Context, s *MachineScope) (*nodeaddr.Launcher, error) {
	spans, err := engines.Spanning(l.Engines, s.ContainerCluster)
	if err != nil || len(spans) == 0 {
		return &nodeaddr.Launcher{Runtime: s.Runtime}, err
	}
	machines := &infrav1.ContainerMachineList{}
	if err := l.Client.List(ctx, machines, client.InNamespace(s.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: s.Cluster.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of Cluster %s/%s: %w", s.Cluster.Namespace, s.Cluster.Name, err)
	}
	var recorded []netip.Addr
	for _, m := range machines.Items {
		for _, a := range m.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == clusterv1.MachineInternalIP {
				recorded = append(recorded, ip)
			}
		}
	}
	return &nodeaddr.Launcher{Runtime: s.Runtime, Spans: spans, Recorded: recorded}, nil
}

// checkHost checks, right before the container is created, what only the
// manager's policy and the host can judge: the policy flags (the webhooks
// checked them at admission, but may not have run, or the flags may have
// changed since) and the images, which CAPCT never pulls.
func (l *Launch) checkHost(ctx context.Context, s *MachineScope, image string) error {
	if err := l.Policy.CheckMachine(&s.ContainerMachine.Spec, image); err != nil {
		return err
	}
	return policy.MissingImages(ctx, s.Runtime.ImageExists, policy.MachineImages(&s.ContainerMachine.Spec, image))
}

// refused records a launch that the policy or the host refuses. None of
// these is final: Launched turns False, so that LaunchTimeout counts again
// from the next attempt, and the machine launches once the object, the
// manager's flags or the host change. A policy violation waits for such a
// change (a new spec or a restarted manager reconciles it); what is missing
// on the host is looked for again every hostRecheck.
//
// was is the Launched condition from before this attempt was marked
// started, nil when it was not. A refusal the machine already reported is
// put back as it was, transition time included, so that waiting writes
// nothing: a write would wake the machine at once, not after hostRecheck.
func (l *Launch) refused(s *MachineScope, now time.Time, was *metav1.Condition, err error) (ctrl.Result, error) {
	cm := s.ContainerMachine
	var (
		reason  string
		requeue time.Duration
		notOn   *policy.NotOnHostError
		copying *copyingImageError
		noPath  *hostPathNotFoundError
	)
	switch {
	case policy.IsViolation(err):
		reason = infrav1.RefusedByPolicyReason
	case errors.As(err, &copying):
		reason, requeue = infrav1.CopyingImageReason, hostRecheck
	case errors.As(err, &notOn):
		reason, requeue = infrav1.ImageNotOnHostReason, hostRecheck
	case errors.As(err, &noPath):
		reason, requeue = infrav1.HostPathNotFoundReason, hostRecheck
	case container.IsUnreachable(err):
		return l.engineAway(s, now, err)
	default:
		return l.failed(s, now, fmt.Errorf("failed to check what ContainerMachine %s/%s needs on the container host: %w", cm.Namespace, cm.Name, err))
	}
	msg := err.Error()
	if was == nil {
		was = conditions.Get(cm, infrav1.LaunchedCondition)
	}
	if was != nil && was.Status == metav1.ConditionFalse && was.Reason == reason && was.Message == msg {
		conditions.Set(cm, *was)
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	eventType := corev1.EventTypeWarning
	if reason == infrav1.CopyingImageReason {
		// Progress, not a problem.
		eventType = corev1.EventTypeNormal
	}
	l.Recorder.Event(cm, eventType, reason, msg)
	setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, reason, msg)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// copyMissingImages has the images that checkHost found missing (err, a
// *policy.NotOnHostError) copied to the machine's engine from another
// engine of its cluster, or the manager's own, that holds them
// (imagecopy.Copier); the manager's own engine gets no copies, since CAPCT
// never pulls and its admin loads what it runs. It returns a
// *copyingImageError while a copy runs, err with why a copy failed, or err
// as it is.
func (l *Launch) copyMissingImages(s *MachineScope, err error) error {
	var notOn *policy.NotOnHostError
	if l.Images == nil || s.Engine == engines.Local || !errors.As(err, &notOn) {
		return err
	}
	sources := imagecopy.Sources(s.ContainerCluster)
	key := client.ObjectKeyFromObject(s.ContainerMachine)
	var failed []string
	for _, m := range notOn.Missing {
		st := l.Images.Ensure(s.Engine, m.Value, sources, key)
		switch {
		case st.Copying:
			return &copyingImageError{missing: m, engine: s.Engine, status: st}
		case st.Err != nil:
			failed = append(failed, st.Err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w; CAPCT could not copy them from another engine: %s", err, strings.Join(failed, "; "))
	}
	return err
}

// copyingImageError is a launch waiting for an image being copied to the
// machine's engine.
type copyingImageError struct {
	missing policy.FieldValue
	engine  string
	status  imagecopy.Status
}

func (e *copyingImageError) Error() string {
	return e.status.Describe(e.missing.Value, e.missing.Field.String(), e.engine)
}

// hostPathNotFoundError names the extraMounts field whose host path the
// engine did not find.
type hostPathNotFoundError struct {
	mounts []infrav1.Mount
	path   string
}

func (e *hostPathNotFoundError) Error() string {
	fld := field.NewPath("spec", "extraMounts")
	for i, m := range e.mounts {
		if path.Clean(m.HostPath) == path.Clean(e.path) {
			fld = fld.Index(i).Child("hostPath")
			break
		}
	}
	return fmt.Sprintf("%s: host path %q does not exist on the container host; CAPCT does not create it: create it there or change the field", fld, e.path)
}

// StaticAddressUnsupportedReason is the reason of the warning event for a
// container that could not get a static address.
const StaticAddressUnsupportedReason = "StaticAddressUnsupported"

// LaunchRetriedReason is the reason of the warning event for a container
// that never started, removed to be launched again on other addresses.
const LaunchRetriedReason = "LaunchRetried"

// failed records a failed attempt; past LaunchTimeout the failure is final.
// An engine that is away is not the launch failing (see engineAway).
func (l *Launch) failed(s *MachineScope, now time.Time, err error) (ctrl.Result, error) {
	if container.IsUnreachable(err) {
		return l.engineAway(s, now, err)
	}
	cm := s.ContainerMachine
	l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.LaunchFailedReason, err.Error())
	if elapsed, ok := since(cm, now, infrav1.LaunchedCondition); ok && elapsed >= LaunchTimeout {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.LaunchFailedReason,
			fmt.Sprintf("Launch did not succeed within %s: %v", LaunchTimeout, err))
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason, err.Error())
	if errors.Is(err, context.Canceled) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: launchRetry}, nil
}

// engineAway records that the engine did not answer. That never fails the
// machine and never counts toward a timeout: a launch in progress turns
// Launched False, so that LaunchTimeout counts again from the next attempt
// (Launched Unknown) once the engine answers, and a launched machine turns
// ContainerRunning False until its container is seen running again. The
// machine looks again soon instead of returning the error, which would back
// off for minutes while the engine is away.
func (l *Launch) engineAway(s *MachineScope, now time.Time, err error) (ctrl.Result, error) {
	cm := s.ContainerMachine
	msg := fmt.Sprintf("The container engine does not answer: %v", err)
	if conditions.IsTrue(cm, infrav1.LaunchedCondition) {
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, msg)
	} else {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, msg)
	}
	return ctrl.Result{RequeueAfter: containerRecheck}, nil
}

// observe records a container that exists. A container that was created but
// never started (a crash between the two calls) is started. One that ran
// and stopped is reported, not started: the engine's restart policy or a
// person decides whether it runs again, and its start event brings the
// machine back here within seconds.
func (l *Launch) observe(ctx context.Context, s *MachineScope, m *container.Machine, now time.Time) (ctrl.Result, error) {
	cm := s.ContainerMachine
	if !s.Owner().Owns(m.Labels) {
		return l.failed(s, now, container.NotOwnedError("use", "container", m.Name, s.Owner(), m.Labels))
	}
	if m.State != container.StateRunning {
		if conditions.IsTrue(cm, infrav1.LaunchedCondition) {
			reason, msg := notRunning(m)
			if conditions.IsTrue(cm, infrav1.ContainerRunningCondition) {
				l.Recorder.Event(cm, corev1.EventTypeWarning, reason, msg)
			}
			setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, reason, msg)
			return ctrl.Result{RequeueAfter: containerRecheck}, nil
		}
		err := s.Runtime.Start(ctx, m.Name, s.Owner())
		if container.IsInUse(err) && m.State == container.StateCreated {
			// Its static address was taken since it was picked, or the
			// engine still holds it for nobody. It never ran, so nothing is
			// lost: it goes, and the next pass launches it again on
			// addresses picked anew, skipping the refused ones. Starting it again would
			// fail the same way until the launch timed out.
			nodeaddr.Refused(m.Network, m.StaticIPv4, m.StaticIPv6)
			if derr := s.Runtime.Delete(ctx, m.Name, s.Owner()); derr != nil {
				return l.failed(s, now, errors.Join(fmt.Errorf("failed to start container %s: %w", m.Name, err),
					fmt.Errorf("failed to remove it to launch it again: %w", derr)))
			}
			l.Recorder.Eventf(cm, corev1.EventTypeWarning, LaunchRetriedReason, "Container %s never started (%v); launching it again on new addresses", m.Name, err)
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if err != nil {
			return l.failed(s, now, fmt.Errorf("failed to start container %s: %w", m.Name, err))
		}
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	s.Container = m
	cm.Status.Addresses = Addresses(m)
	if !conditions.IsTrue(cm, infrav1.LaunchedCondition) {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
		launchDuration.Observe(now.Sub(cm.CreationTimestamp.Time).Seconds())
	}
	// Once the Node is initialized, whether the machine is back after a
	// stop also depends on the Node: Liveness decides then.
	if !conditions.IsTrue(cm, infrav1.InitializedCondition) {
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionTrue, infrav1.RunningReason, "")
	}
	return ctrl.Result{}, nil
}

// notRunning names the state of a container that exists but does not run.
func notRunning(m *container.Machine) (reason, message string) {
	if m.State == container.StateRestarting {
		return infrav1.RestartingReason, fmt.Sprintf("Container %s is restarting under its restart policy", m.Name)
	}
	return infrav1.StoppedReason, fmt.Sprintf("Container %s is %s; CAPCT does not start it again, its restart policy or a person does", m.Name, m.State)
}

// Addresses are a machine's addresses: its hostname and one InternalIP per
// family, published from launch on because the load balancer needs a
// control-plane machine's address before kubeadm init finishes.
func Addresses(m *container.Machine) []clusterv1.MachineAddress {
	addrs := []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: m.Name}}
	if m.IPv4.IsValid() {
		addrs = append(addrs, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: m.IPv4.String()})
	}
	if m.IPv6.IsValid() {
		addrs = append(addrs, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: m.IPv6.String()})
	}
	return addrs
}

func mounts(in []infrav1.Mount) []container.Mount {
	out := make([]container.Mount, 0, len(in))
	for _, m := range in {
		out = append(out, container.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return out
}

func resources(r *infrav1.MachineResources) container.Resources {
	var out container.Resources
	if r == nil {
		return out
	}
	if r.CPUs != nil {
		out.MilliCPUs = r.CPUs.MilliValue()
	}
	if r.Memory != nil {
		out.MemoryBytes = r.Memory.Value()
	}
	return out
}
