package mirror_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/capct/cluster-api-provider-container/test/mirror"
)

func podWith(phase corev1.PodPhase, state *corev1.ContainerState, conditions ...corev1.PodCondition) *corev1.Pod {
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, Conditions: conditions}}
	if state != nil {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "busybox", State: *state}}
	}
	return pod
}

func waitingOn(reason, message string) *corev1.ContainerState {
	return &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}

func TestPodStates(t *testing.T) {
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	ended := &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 127}}
	notReady := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		pullFailed bool
		running    bool
		state      string
		detail     string
	}{
		{name: "new, no status", pod: podWith("", nil), state: "Pending, no container status", detail: "Pending, no container status"},
		{name: "creating", pod: podWith(corev1.PodPending, waitingOn("ContainerCreating", "")),
			state: "Pending, waiting (ContainerCreating)", detail: "Pending, waiting (ContainerCreating)"},
		{name: "pull failed", pod: podWith(corev1.PodPending, waitingOn("ErrImagePull", "failed to resolve\n  reference: no such host"), notReady),
			pullFailed: true, state: "Pending, waiting (ErrImagePull)",
			detail: "Pending, waiting (ErrImagePull); message: failed to resolve reference: no such host; Ready=False(ContainersNotReady)"},
		{name: "backing off", pod: podWith(corev1.PodPending, waitingOn("ImagePullBackOff", "Back-off pulling image")),
			pullFailed: true, state: "Pending, waiting (ImagePullBackOff)", detail: "Pending, waiting (ImagePullBackOff); message: Back-off pulling image"},
		{name: "running", pod: podWith(corev1.PodRunning, running), running: true, state: "Running, running", detail: "Running, running"},
		{name: "phase Running, container ended", pod: podWith(corev1.PodRunning, ended),
			state: "Running, terminated (Error, exit code 127)", detail: "Running, terminated (Error, exit code 127)"},
		{name: "crash loop is no pull failure", pod: podWith(corev1.PodRunning, waitingOn("CrashLoopBackOff", "")),
			state: "Running, waiting (CrashLoopBackOff)", detail: "Running, waiting (CrashLoopBackOff)"},
		{name: "empty container state", pod: podWith(corev1.PodPending, &corev1.ContainerState{}),
			state: "Pending, container state unknown", detail: "Pending, container state unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirror.PullFailed(tt.pod); got != tt.pullFailed {
				t.Errorf("PullFailed() = %v, want %v", got, tt.pullFailed)
			}
			if got := mirror.Running(tt.pod); got != tt.running {
				t.Errorf("Running() = %v, want %v", got, tt.running)
			}
			if got := mirror.PodState(tt.pod); got != tt.state {
				t.Errorf("PodState() = %q, want %q", got, tt.state)
			}
			if got := mirror.PodDetail(tt.pod); got != tt.detail {
				t.Errorf("PodDetail() = %q, want %q", got, tt.detail)
			}
		})
	}
}
