package lifecycle

import (
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// criMissing is kubeadm's preflight error when containerd runs without its
// CRI plugin, as issue #13 saw it.
const criMissing = `[preflight] Running pre-flight checks
error execution phase preflight: [preflight] Some fatal errors occurred:
	[ERROR CRI]: container runtime is not running: output: time="2026-12-01T10:00:00Z" level=fatal msg="validate service connection: validate CRI v1 runtime API for endpoint \"unix:///run/containerd/containerd.sock\": rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService"
, error: exit status 1
[preflight] If you know what you are doing, you can make a check non-fatal with --ignore-preflight-errors=...`

// containerdJournal is what the node's diagnostics hold when the host ran
// out of inotify instances.
const containerdJournal = `== inotify limits (max_user_instances max_user_watches)
128
65536
== ctr plugins ls
io.containerd.grpc.v1           cri                      linux/amd64    error
== journalctl -u containerd
time="2026-12-01T10:00:00Z" level=warning msg="failed to load plugin io.containerd.grpc.v1.cri" error="failed to create CRI service: failed to create cni conf monitor for default: failed to create fsnotify watcher: too many open files"
`

func TestDiagnose(t *testing.T) {
	testCases := []struct {
		name        string
		output      string
		diagnostics string
		want        string
	}{
		{"the CRI plugin failed to load for want of inotify instances", criMissing, containerdJournal,
			"containerd's CRI plugin failed to load: too many open files (raise fs.inotify.max_user_instances)"},
		{"the CRI plugin failed to load for another reason", criMissing,
			`level=warning msg="failed to load plugin io.containerd.grpc.v1.cri" error="invalid plugin config: no such snapshotter"`,
			"containerd's CRI plugin failed to load: invalid plugin config: no such snapshotter"},
		{"inotify watches exhausted in the kubelet", "error execution phase kubelet-start: timed out waiting for the condition",
			"E1201 10:00:00.000000 1 manager.go:1] inotify_add_watch /sys/fs/cgroup/cpu: no space left on device",
			"inotify watches are exhausted: no space left on device (raise fs.inotify.max_user_watches)"},
		{"inotify instances exhausted in the kubelet", "", "E1201 kubelet.go:1] failed to create fsnotify watcher: too many open files",
			"inotify instances are exhausted: too many open files (raise fs.inotify.max_user_instances)"},
		{"the kubelet failed to start", "", `E1201 run.go:72] "command failed" err="failed to run Kubelet: running with swap on is not supported"`,
			`the kubelet failed to start: running with swap on is not supported"`},
		{"only kubeadm's symptom", criMissing, "", "containerd does not serve the CRI: its cri plugin is not loaded"},
		{"the API server refuses connections", `error execution phase preflight: couldn't validate the identity of the API Server: Get "https://172.18.0.3:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s": dial tcp 172.18.0.3:6443: connect: connection refused`,
			"E1201 reflector.go] dial tcp 172.18.0.9:6443: connect: connection refused",
			"172.18.0.3:6443 refused the connection (the API server or etcd is not serving yet)"},
		{"etcd is busy", "error execution phase control-plane-join/etcd: etcdserver: leader changed", "", "etcd was not ready: etcdserver: leader changed"},
		{"the API server hung up", `error execution phase kubelet-start: Post "https://172.18.0.3:6443/api/v1/nodes": EOF`, "",
			"the connection to the API server failed: EOF"},
		{"a preflight check", "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists", "",
			"kubeadm's preflight check FileAvailable--etc-kubernetes-kubelet.conf failed"},
		{"refused connections in the kubelet's journal only are normal", "some unrelated failure",
			"E1201 reflector.go] dial tcp 172.18.0.9:6443: connect: connection refused", ""},
		{"nothing recognised", "my script failed", "", ""},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := diagnose(attemptFailure{Output: tc.output, Diagnostics: tc.diagnostics}); got != tc.want {
				t.Fatalf("diagnose = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	step := func(code int) provisioning.Exit {
		return provisioning.Exit{Code: code, Where: provisioning.WhereStep, Step: 2, Label: "kubeadm join"}
	}
	testCases := []struct {
		name string
		f    attemptFailure
		want bool
	}{
		{"the runtime did not answer", attemptFailure{Exit: provisioning.Exit{Code: 1, Where: provisioning.WhereRuntime}}, true},
		{"the container restarted", attemptFailure{Exit: provisioning.Exit{Code: 1, Where: whereInterrupted}}, true},
		{"kubeadm reset failed", attemptFailure{Exit: provisioning.Exit{Code: 1, Where: provisioning.WhereReset}}, true},
		{"preflight on a node still starting", attemptFailure{Exit: step(1), Output: criMissing}, true},
		{"a host limit named only in the node's journal", attemptFailure{Exit: step(1), Output: "error execution phase wait-for-kubelet", Diagnostics: containerdJournal}, true},
		{"connection refused", attemptFailure{Exit: step(1), Output: "dial tcp 172.18.0.3:6443: connect: connection refused"}, true},
		{"EOF", attemptFailure{Exit: step(1), Output: `Post "https://172.18.0.3:6443/api": EOF`}, true},
		{"a timeout", attemptFailure{Exit: step(1), Output: "error execution phase kubelet-start: timed out waiting for the condition"}, true},
		{"etcd busy", attemptFailure{Exit: step(1), Output: "etcdserver: request timed out"}, true},
		{"a word that merely contains EOF", attemptFailure{Exit: step(1), Output: "GEOFFREY was here"}, false},
		{"a failure of the data", attemptFailure{Exit: step(3), Output: "my script failed"}, false},
		{"a command not found", attemptFailure{Exit: step(127), Output: "connection refused"}, false},
		{"not executable", attemptFailure{Exit: step(126)}, false},
		{"a file that cannot be written", attemptFailure{Exit: provisioning.Exit{Code: 1, Where: provisioning.WhereFile, Step: 1}}, false},
		{"no sentinel", attemptFailure{Exit: provisioning.Exit{Code: 1, Where: provisioning.WhereSentinel}}, false},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.f); got != tc.want {
				t.Fatalf("retryable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFailureSummaryHoldsNoBootstrapData(t *testing.T) {
	f := attemptFailure{
		Exit:        provisioning.Exit{Code: 1, Where: provisioning.WhereStep, Step: 4, Label: "kubeadm join"},
		Output:      strings.Repeat("x", 4096) + "\n" + criMissing,
		Diagnostics: containerdJournal,
	}
	got := f.summary(1, 3)
	want := "Bootstrap attempt 1 of 3 failed in step 4 (kubeadm join) with exit code 1: containerd's CRI plugin failed to load: too many open files (raise fs.inotify.max_user_instances). Output: …"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("summary = %q, want it to start with %q", got, want)
	}
	if len(got) > len(want)+1100 || strings.Count(got, "x") > 1024 {
		t.Fatalf("the output must be cut to its tail, got %d bytes", len(got))
	}
	if strings.Contains(got, "journalctl") || strings.Contains(got, "level=warning") {
		t.Fatalf("the diagnostics must be summarised, not copied: %q", got)
	}
}
