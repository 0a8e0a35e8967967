package kubeversion

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "v1.36.3", want: "v1.36.3"},
		{in: "1.36.3", want: "v1.36.3"},
		{in: " v1.35.4\n", want: "v1.35.4"},
		{in: "v1.34.0", want: "v1.34.0"},
		{in: "v1.37.99", want: "v1.37.99"},
		{in: "v1.33.9", wantErr: "outside the Kubernetes releases CAPCT knows (1.34 to 1.37)"},
		{in: "v1.38.0", wantErr: "outside the Kubernetes releases CAPCT knows (1.34 to 1.37)"},
		{in: "v2.36.0", wantErr: "outside the Kubernetes releases CAPCT knows"},
		{in: "v1.36.0-rc.1", wantErr: "is not a Kubernetes release"},
		{in: "v1.36.3+build", wantErr: "is not a Kubernetes release"},
		{in: "v1.36", wantErr: "failed to parse Kubernetes version"},
		{in: "vv1.36.3", wantErr: "failed to parse Kubernetes version"},
		{in: "", wantErr: "failed to parse Kubernetes version"},
		{in: "latest", wantErr: "failed to parse Kubernetes version"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want an error with %q", tc.in, r, err, tc.wantErr)
				}
				return
			}
			if err != nil || r.String() != tc.want {
				t.Fatalf("Parse(%q) = %v, %v; want %s", tc.in, r, err, tc.want)
			}
		})
	}
}

func TestReleaseFacts(t *testing.T) {
	for _, tc := range []struct {
		version                  string
		minor                    uint64
		staging, kubeadmAPI      string
		etcd, coreDNS, pause     string
		pauseImage, etcdImage    string
		apiServerImage, dnsImage string
	}{
		{"v1.34.0", 34, "v0.34.0", "kubeadm.k8s.io/v1beta4", "3.6.4-0", "v1.12.1", "3.10.1",
			"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.4-0", "registry.k8s.io/kube-apiserver:v1.34.0", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"v1.34.1", 34, "v0.34.1", "kubeadm.k8s.io/v1beta4", "3.6.4-0", "v1.12.1", "3.10.1",
			"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.4-0", "registry.k8s.io/kube-apiserver:v1.34.1", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"v1.34.2", 34, "v0.34.2", "kubeadm.k8s.io/v1beta4", "3.6.5-0", "v1.12.1", "3.10.1",
			"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.5-0", "registry.k8s.io/kube-apiserver:v1.34.2", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"v1.34.4", 34, "v0.34.4", "kubeadm.k8s.io/v1beta4", "3.6.5-0", "v1.12.1", "3.10.1",
			"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.5-0", "registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"v1.35.4", 35, "v0.35.4", "kubeadm.k8s.io/v1beta4", "3.6.6-0", "v1.13.1", "3.10.1",
			"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.6-0", "registry.k8s.io/kube-apiserver:v1.35.4", "registry.k8s.io/coredns/coredns:v1.13.1"},
		{"v1.36.1", 36, "v0.36.1", "kubeadm.k8s.io/v1beta4", "3.6.8-0", "v1.14.2", "3.10.2",
			"registry.k8s.io/pause:3.10.2", "registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.36.1", "registry.k8s.io/coredns/coredns:v1.14.2"},
		{"1.36.3", 36, "v0.36.3", "kubeadm.k8s.io/v1beta4", "3.6.8-0", "v1.14.2", "3.10.2",
			"registry.k8s.io/pause:3.10.2", "registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/coredns/coredns:v1.14.2"},
		{"v1.37.2", 37, "v0.37.2", "kubeadm.k8s.io/v1beta4", "3.7.0-0", "v1.14.6", "3.10.2",
			"registry.k8s.io/pause:3.10.2", "registry.k8s.io/etcd:3.7.0-0", "registry.k8s.io/kube-apiserver:v1.37.2", "registry.k8s.io/coredns/coredns:v1.14.6"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			r, err := Parse(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"Minor", r.Minor(), tc.minor},
				{"StagingVersion", r.StagingVersion(), tc.staging},
				{"KubeadmAPIVersion", r.KubeadmAPIVersion(), tc.kubeadmAPI},
				{"Etcd", r.Etcd(), tc.etcd},
				{"CoreDNS", r.CoreDNS(), tc.coreDNS},
				{"Pause", r.Pause(), tc.pause},
				{"PauseImage", r.PauseImage(), tc.pauseImage},
			} {
				if c.got != c.want {
					t.Errorf("%s() = %v, want %v", c.what, c.got, c.want)
				}
			}
			v := r.String()
			want := []string{
				tc.apiServerImage,
				"registry.k8s.io/kube-controller-manager:" + v,
				"registry.k8s.io/kube-scheduler:" + v,
				"registry.k8s.io/kube-proxy:" + v,
				tc.dnsImage,
				tc.pauseImage,
				tc.etcdImage,
			}
			if got := r.Images(); !slices.Equal(got, want) {
				t.Errorf("Images() = %q\nwant       %q", got, want)
			}
		})
	}
}

func TestKubeletConfiguration(t *testing.T) {
	want := []KubeletField{
		{Name: "cgroupDriver", Value: "systemd"},
		{Name: "cgroupRoot", Value: "/kubelet"},
		{Name: "failSwapOn", Value: "false"},
		{Name: "failCgroupV1", Value: "false"},
	}
	for _, version := range []string{"v1.34.0", "v1.35.4", "v1.36.3", "v1.37.2"} {
		t.Run(version, func(t *testing.T) {
			r, err := Parse(version)
			if err != nil {
				t.Fatal(err)
			}
			got := r.KubeletConfiguration()
			if !slices.Equal(got, want) {
				t.Fatalf("KubeletConfiguration() = %v, want %v", got, want)
			}
			// a caller's change to its copy must not reach the next caller
			got[0].Value = "cgroupfs"
			if again := r.KubeletConfiguration(); again[0].Value != "systemd" {
				t.Fatalf("KubeletConfiguration() returned the table itself: %v", again)
			}
		})
	}
}

// TestTableIsWellFormed keeps the table's rows usable: minors without a
// gap (Parse names the range as its lowest and highest), and each row's
// etcd tags starting at patch 0 in ascending patches.
func TestTableIsWellFormed(t *testing.T) {
	lo, hi := knownRange()
	for m := lo; m <= hi; m++ {
		f, ok := minors[m]
		if !ok {
			t.Errorf("minor %d is missing between 1.%d and 1.%d", m, lo, hi)
			continue
		}
		if f.kubeadmAPI == "" || f.coreDNS == "" || f.pause == "" || len(f.etcd) == 0 {
			t.Errorf("minor %d has an empty fact: %+v", m, f)
			continue
		}
		if f.etcd[0].patch != 0 {
			t.Errorf("minor %d: its first etcd tag starts at patch %d, not 0", m, f.etcd[0].patch)
		}
		for i := 1; i < len(f.etcd); i++ {
			if f.etcd[i].patch <= f.etcd[i-1].patch {
				t.Errorf("minor %d: etcd patches not ascending: %v", m, f.etcd)
			}
		}
	}
}
