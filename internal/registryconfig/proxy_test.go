package registryconfig

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestProxyFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Proxy
	}{
		{name: "nothing set", env: map[string]string{}, want: Proxy{}},
		{
			name: "upper case",
			env:  map[string]string{"HTTP_PROXY": "http://proxy:3128", "HTTPS_PROXY": "http://proxy:3129", "NO_PROXY": "a.example, .corp,,10.0.0.0/8"},
			want: Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3129", NoProxy: []string{"a.example", ".corp", "10.0.0.0/8"}},
		},
		{
			name: "lower case when upper case is unset or empty",
			env:  map[string]string{"HTTP_PROXY": "", "http_proxy": "http://lower:3128", "https_proxy": "http://lower:3129", "no_proxy": "b.example"},
			want: Proxy{HTTPProxy: "http://lower:3128", HTTPSProxy: "http://lower:3129", NoProxy: []string{"b.example"}},
		},
		{
			name: "upper case wins",
			env:  map[string]string{"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"},
			want: Proxy{HTTPSProxy: "http://upper:1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ProxyFromEnvironment(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if !(Proxy{NoProxy: []string{"x"}}).IsZero() {
		t.Fatal("NO_PROXY alone is no proxy")
	}
}

func TestNoProxy(t *testing.T) {
	cluster := &clusterv1.Cluster{Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
		Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12", "fd00:10:96::/112"}},
		Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}},
		ServiceDomain: "example.local",
	}}}
	cc := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "172.18.0.3", Port: 6443}}}
	for _, tc := range []struct {
		name    string
		manager []string
		cluster *clusterv1.Cluster
		cc      *infrav1.ContainerCluster
		subnets []netip.Prefix
		want    []string
	}{
		{
			name:    "the manager's, then the cluster's own addresses",
			manager: []string{"corp.example", "10.244.0.0/16"},
			cluster: cluster, cc: cc,
			subnets: []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64"), {}},
			want: []string{"corp.example", "10.244.0.0/16", "localhost", "127.0.0.1", "::1", "172.18.0.3",
				"10.96.0.0/12", "fd00:10:96::/112", "172.18.0.0/16", "fc00:f853:ccd:e793::/64", ".svc", ".example.local"},
		},
		{
			name: "no endpoint yet, default service domain",
			cluster: &clusterv1.Cluster{Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
				Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
			}}},
			cc:      &infrav1.ContainerCluster{},
			subnets: []netip.Prefix{netip.MustParsePrefix("172.19.0.7/16")},
			want:    []string{"localhost", "127.0.0.1", "::1", "192.168.0.0/16", "172.19.0.0/16", ".svc", ".cluster.local"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NoProxy(tc.manager, tc.cluster, tc.cc, tc.subnets...); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestProxySteps renders the environment file, the drop-ins of containerd
// and the kubelet, and containerd's restart; a value an environment file
// cannot carry is refused, naming the variable and never the value.
func TestProxySteps(t *testing.T) {
	const dropIn = "# Written by CAPCT: the manager's proxy settings (docs/registries.md).\n[Service]\nEnvironmentFile=/etc/capct/proxy.env\n"
	const envHeader = "# Written by CAPCT from its manager's proxy settings when this node was made\n# (docs/registries.md).\n"
	for _, tc := range []struct {
		name    string
		proxy   Proxy
		noProxy []string
		wantEnv string
		wantErr string
	}{
		{name: "no proxy, no steps", proxy: Proxy{NoProxy: []string{"a"}}, noProxy: []string{"localhost"}},
		{
			name:    "both proxies, credentials percent-encoded",
			proxy:   Proxy{HTTPProxy: "http://user:p%40ss@proxy.corp:3128", HTTPSProxy: "http://proxy.corp:3129"},
			noProxy: []string{"localhost", "10.96.0.0/12", "fd00:10:96::/112", ".svc"},
			wantEnv: envHeader +
				"HTTP_PROXY=\"http://user:p%40ss@proxy.corp:3128\"\nhttp_proxy=\"http://user:p%40ss@proxy.corp:3128\"\n" +
				"HTTPS_PROXY=\"http://proxy.corp:3129\"\nhttps_proxy=\"http://proxy.corp:3129\"\n" +
				"NO_PROXY=\"localhost,10.96.0.0/12,fd00:10:96::/112,.svc\"\nno_proxy=\"localhost,10.96.0.0/12,fd00:10:96::/112,.svc\"\n",
		},
		{
			name:    "only HTTPS_PROXY",
			proxy:   Proxy{HTTPSProxy: "http://[fd00::1]:3128"},
			noProxy: []string{"localhost"},
			wantEnv: envHeader + "HTTPS_PROXY=\"http://[fd00::1]:3128\"\nhttps_proxy=\"http://[fd00::1]:3128\"\n" +
				"NO_PROXY=\"localhost\"\nno_proxy=\"localhost\"\n",
		},
		{name: "a quote", proxy: Proxy{HTTPProxy: `http://u:s3"cr3t@proxy:1`}, wantErr: "the manager's HTTP_PROXY holds a character"},
		{name: "a dollar", proxy: Proxy{HTTPSProxy: "http://u:s3$cr3t@proxy:1"}, wantErr: "the manager's HTTPS_PROXY holds a character"},
		{name: "a newline", proxy: Proxy{HTTPProxy: "http://u:s3cr3t\nLD_PRELOAD=x@proxy:1"}, wantErr: "the manager's HTTP_PROXY holds a character"},
		{name: "a space in NO_PROXY", proxy: Proxy{HTTPProxy: "http://proxy:1"}, noProxy: []string{"a b"}, wantErr: "the manager's NO_PROXY holds a character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := ProxySteps(tc.proxy, tc.noProxy)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an ErrInvalid error with %q, got %v", tc.wantErr, err)
				}
				if strings.Contains(err.Error(), "s3") || strings.Contains(err.Error(), "proxy:1") || strings.Contains(err.Error(), "a b") {
					t.Fatalf("the error names the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantEnv == "" {
				if len(steps) != 0 {
					t.Fatalf("want no steps, got %+v", steps)
				}
				return
			}
			if len(steps) != 4 {
				t.Fatalf("want 4 steps, got %+v", steps)
			}
			for i, want := range []struct {
				path, content string
				mode          uint32
			}{
				{ProxyEnvPath, tc.wantEnv, 0o600},
				{ContainerdDropInPath, dropIn, 0o644},
				{KubeletDropInPath, dropIn, 0o644},
			} {
				f := steps[i].File
				if f == nil || f.Path != want.path || string(f.Content) != want.content || uint32(f.Mode) != want.mode {
					t.Fatalf("step %d: got %+v, want %s %o:\n%s", i, steps[i], want.path, want.mode, want.content)
				}
			}
			if got := strings.Join(steps[3].Command, " "); got != "/bin/sh -c systemctl daemon-reload && systemctl restart containerd.service" {
				t.Fatalf("want containerd restarted last, got %q", got)
			}
			if strings.Contains(steps[3].Description, "proxy.corp") {
				t.Fatalf("the description names the proxy: %q", steps[3].Description)
			}
		})
	}
}
