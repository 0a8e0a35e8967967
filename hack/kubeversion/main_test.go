package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string
		wantStderr string
	}{
		{"images", []string{"images", "v1.36.3"}, 0, "registry.k8s.io/kube-apiserver:v1.36.3\n" +
			"registry.k8s.io/kube-controller-manager:v1.36.3\n" +
			"registry.k8s.io/kube-scheduler:v1.36.3\n" +
			"registry.k8s.io/kube-proxy:v1.36.3\n" +
			"registry.k8s.io/coredns/coredns:v1.14.2\n" +
			"registry.k8s.io/pause:3.10.2\n" +
			"registry.k8s.io/etcd:3.6.8-0\n", ""},
		{"pause image", []string{"pause-image", "v1.35.4"}, 0, "registry.k8s.io/pause:3.10.1\n", ""},
		{"pause tag", []string{"pause", "v1.37.2"}, 0, "3.10.2\n", ""},
		{"etcd", []string{"etcd", "v1.36.3"}, 0, "3.6.8-0\n", ""},
		{"coredns", []string{"coredns", "v1.36.3"}, 0, "v1.14.2\n", ""},
		{"minor", []string{"minor", "v1.36.3"}, 0, "36\n", ""},
		{"staging", []string{"staging", "v1.34.4"}, 0, "v0.34.4\n", ""},
		{"kubeadm API", []string{"kubeadm-api", "v1.35.4"}, 0, "kubeadm.k8s.io/v1beta4\n", ""},
		{"kubelet configuration", []string{"kubelet-config", "v1.35.4"}, 0,
			"cgroupDriver: systemd\ncgroupRoot: /kubelet\nfailSwapOn: false\nfailCgroupV1: false\n", ""},
		{"no arguments", nil, 2, "", "usage: "},
		{"no version", []string{"images"}, 2, "", "usage: "},
		{"too many", []string{"images", "v1.36.3", "v1.35.4"}, 2, "", "usage: "},
		{"unknown question", []string{"kernel", "v1.36.3"}, 2, "", `unknown question "kernel"`},
		{"unknown minor", []string{"images", "v1.38.0"}, 2, "", "outside the Kubernetes releases CAPCT knows (1.34 to 1.37)"},
		{"not a version", []string{"minor", "latest"}, 2, "", "failed to parse Kubernetes version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if code != tc.wantCode || out.String() != tc.wantOut || !strings.Contains(errOut.String(), tc.wantStderr) {
				t.Fatalf("run(%q) = %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
					tc.args, code, out.String(), errOut.String(), tc.wantCode, tc.wantOut, tc.wantStderr)
			}
		})
	}
}
