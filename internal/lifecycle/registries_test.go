package lifecycle

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/registryconfig"
)

// testRegistryCA returns a PEM CA certificate made for the test.
func testRegistryCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test registry CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// atKubeadm records, when kubeadm join runs in the fake runtime, which of
// paths the node holds and the commands that ran before it; kubeadm then
// succeeds as the data's `&& echo success` would.
type atKubeadm struct {
	mu     sync.Mutex
	files  map[string]string
	before []string
	ran    bool
}

func (e *env) recordAtKubeadm(paths ...string) *atKubeadm {
	k := &atKubeadm{files: map[string]string{}}
	var cmds []string
	e.runtime.SetExecHandler(func(ctx context.Context, m container.Machine, files map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		cmd := strings.Join(in.Cmd, " ")
		k.mu.Lock()
		defer k.mu.Unlock()
		if !strings.Contains(cmd, "kubeadm join") {
			cmds = append(cmds, cmd)
			return container.ExecResult{}, false
		}
		k.ran = true
		k.before = append([]string(nil), cmds...)
		for _, p := range paths {
			if b, ok := files[p]; ok {
				k.files[p] = string(b)
			}
		}
		// The sentinel, as `&& echo success > ...` would write it.
		return container.ExecResult{}, e.runtime.WriteFile(ctx, m.Name, container.OwnerOf(m.Labels), "/run/cluster-api/bootstrap-success.complete", []byte("success\n"), 0o644) == nil
	})
	return k
}

// TestBootstrapWritesRegistryMirrorsBeforeKubeadm: a node of a cluster with
// spec.registryMirrors holds containerd's hosts files, CA included, when
// its bootstrap data's kubeadm runs, so that every image kubeadm and the
// kubelet pull goes through the mirrors.
func TestBootstrapWritesRegistryMirrorsBeforeKubeadm(t *testing.T) {
	e := newEnv(t, joinData)
	hosts := registryconfig.HostsDir + "/docker.io/hosts.toml"
	caFile := registryconfig.HostsDir + "/registry.internal:5000/server.crt"
	k := e.recordAtKubeadm(hosts, caFile, registryconfig.ProxyEnvPath)
	s := e.scope()
	ca := testRegistryCA(t)
	s.ContainerCluster.Spec.RegistryMirrors = []infrav1.RegistryMirror{
		{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{URL: "http://172.18.0.2:5000"}}},
		{Registry: "registry.internal:5000", Server: &infrav1.RegistryEndpoint{URL: "https://registry.internal:5000", CABundle: ca}},
	}
	bootstrap(t, e, s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ran {
		t.Fatal("kubeadm did not run")
	}
	if got := k.files[hosts]; !strings.Contains(got, "[host.'http://172.18.0.2:5000']") {
		t.Fatalf("when kubeadm ran, %s held %q, want the mirror", hosts, got)
	}
	if got := k.files[caFile]; got != ca {
		t.Fatalf("when kubeadm ran, %s held %q, want the server's CA", caFile, got)
	}
	if _, ok := k.files[registryconfig.ProxyEnvPath]; ok {
		t.Fatal("the manager has no proxy, yet the node got a proxy environment")
	}
}

// TestBootstrapGivesNodesTheManagersProxy: with HTTP_PROXY in the
// manager's environment, the node's containerd and kubelet get it, with
// the cluster's own addresses in NO_PROXY, and containerd is restarted
// with it before kubeadm runs.
func TestBootstrapGivesNodesTheManagersProxy(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.recordAtKubeadm(registryconfig.ProxyEnvPath, registryconfig.ContainerdDropInPath, registryconfig.KubeletDropInPath)
	s := e.scope()
	s.Cluster.Spec.ClusterNetwork = clusterv1.ClusterNetwork{
		Services: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12"}},
		Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}},
	}
	s.ContainerCluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "172.30.0.9", Port: 6443}
	env := map[string]string{"HTTPS_PROXY": "http://user:s3cret@proxy.corp:3128", "no_proxy": "corp.example"}
	b := e.deps.bootstrap()
	b.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.waitForBootstrap(s)
	if _, err := b.Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)

	network, err := e.runtime.InspectNetwork(ctx, "capct-c1")
	if err != nil || !network.IPv4Subnet.IsValid() {
		t.Fatalf("the fixture's network has no subnet: %+v %v", network, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	got := k.files[registryconfig.ProxyEnvPath]
	wantNoProxy := "corp.example,localhost,127.0.0.1,::1,172.30.0.9,10.96.0.0/12,10.244.0.0/16," + network.IPv4Subnet.String() + ",.svc,.cluster.local"
	for _, want := range []string{`HTTPS_PROXY="http://user:s3cret@proxy.corp:3128"`, `https_proxy="http://user:s3cret@proxy.corp:3128"`, `NO_PROXY="` + wantNoProxy + `"`} {
		if !strings.Contains(got, want) {
			t.Errorf("when kubeadm ran, %s held\n%s\nwant a line %s", registryconfig.ProxyEnvPath, got, want)
		}
	}
	for _, p := range []string{registryconfig.ContainerdDropInPath, registryconfig.KubeletDropInPath} {
		if !strings.Contains(k.files[p], "EnvironmentFile="+registryconfig.ProxyEnvPath) {
			t.Errorf("when kubeadm ran, %s held %q, want the environment file", p, k.files[p])
		}
	}
	var restarted bool
	for _, c := range k.before {
		restarted = restarted || strings.Contains(c, "systemctl restart containerd.service")
	}
	if !restarted {
		t.Errorf("containerd was not restarted before kubeadm; commands before it: %q", k.before)
	}
	if c := condition(s, infrav1.BootstrappedCondition); strings.Contains(c.Message, "s3cret") {
		t.Fatalf("the condition names the proxy's password: %s", c.Message)
	}
}
