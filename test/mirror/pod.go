package mirror

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PullFailed is true when the pod's first container waits on a pull that
// failed: ErrImagePull, or ImagePullBackOff while the kubelet waits to try
// again.
func PullFailed(pod *corev1.Pod) bool {
	w := waiting(pod)
	return w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff")
}

// Running is true when the pod's first container runs.
func Running(pod *corev1.Pod) bool {
	s := first(pod)
	return pod.Status.Phase == corev1.PodRunning && s != nil && s.State.Running != nil
}

// PodState is a pod's phase and its first container's state, with the
// reason it waits or ended, for a log line each time it changes; the
// message (a pull's error) is left out, as it changes on every retry.
func PodState(pod *corev1.Pod) string {
	phase := string(pod.Status.Phase)
	if phase == "" {
		phase = "Pending"
	}
	s := first(pod)
	switch {
	case s == nil:
		return phase + ", no container status"
	case s.State.Running != nil:
		return phase + ", running"
	case s.State.Waiting != nil:
		return fmt.Sprintf("%s, waiting (%s)", phase, s.State.Waiting.Reason)
	case s.State.Terminated != nil:
		return fmt.Sprintf("%s, terminated (%s, exit code %d)", phase, s.State.Terminated.Reason, s.State.Terminated.ExitCode)
	}
	return phase + ", container state unknown"
}

// PodDetail is PodState with the container's message, the image it runs
// and the pod's conditions that are not True, for a failure message.
func PodDetail(pod *corev1.Pod) string {
	parts := []string{PodState(pod)}
	if w := waiting(pod); w != nil && w.Message != "" {
		parts = append(parts, "message: "+strings.Join(strings.Fields(w.Message), " "))
	}
	if s := first(pod); s != nil && s.ImageID != "" {
		parts = append(parts, "image "+s.ImageID)
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

func first(pod *corev1.Pod) *corev1.ContainerStatus {
	if len(pod.Status.ContainerStatuses) == 0 {
		return nil
	}
	return &pod.Status.ContainerStatuses[0]
}

func waiting(pod *corev1.Pod) *corev1.ContainerStateWaiting {
	if s := first(pod); s != nil {
		return s.State.Waiting
	}
	return nil
}
