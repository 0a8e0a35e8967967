// Package nodeimage tests the offline node and load-balancer images that
// images/node and images/haproxy build (docs/node-image.md): a node
// container boots, `kubeadm init` makes it a Ready control plane with every
// kube-system pod Running, a second node joins, and the HAProxy image
// forwards to the API server and reloads on SIGHUP without dropping a
// connection. The tests drive the docker CLI; they need a reachable Docker
// engine and fail (never skip) without one.
package nodeimage

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const (
	testLabel = "io.capct.test=nodeimage"
	podSubnet = "10.244.0.0/16"
)

var (
	nodeImage string
	lbImage   string
	runID     string
)

func TestMain(m *testing.M) {
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: Docker is unreachable (run hack/ensure-docker.sh): %v\n%s\n", err, out)
		os.Exit(1)
	}
	var err error
	if nodeImage, err = buildImage("node"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the node image: %v\n", err)
		os.Exit(1)
	}
	if lbImage, err = buildImage("haproxy"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the LB image: %v\n", err)
		os.Exit(1)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	runID = hex.EncodeToString(b)
	os.Exit(m.Run())
}

// buildImage runs the (cached) build script of images/<name> and returns
// the image it printed.
func buildImage(name string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "images", name, "build.sh")
	cmd := exec.Command("bash", script)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	lines := strings.Fields(strings.TrimSpace(stdout.String()))
	if len(lines) == 0 {
		return "", fmt.Errorf("%s printed no image name", script)
	}
	return lines[len(lines)-1], nil
}

// docker runs the docker CLI and returns its trimmed stdout.
func docker(args ...string) (string, error) {
	return dockerIn(nil, args...)
}

func dockerIn(stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return strings.TrimSpace(stdout.String()), fmt.Errorf("docker %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

func must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeExec runs a shell command in a node.
func nodeExec(t *testing.T, node, script string) string {
	t.Helper()
	return must(t, "exec", node, "bash", "-c", script)
}

func writeFile(t *testing.T, container, path, content string) {
	t.Helper()
	if _, err := dockerIn(strings.NewReader(content), "exec", "-i", container, "sh", "-c",
		fmt.Sprintf("mkdir -p %q && cat > %q", filepath.Dir(path), path)); err != nil {
		t.Fatal(err)
	}
}

// eventually polls check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}

// createNetwork creates the test's bridge network, removed at cleanup.
func createNetwork(t *testing.T) string {
	t.Helper()
	name := "capct-nodeimage-" + runID
	must(t, "network", "create", "--driver", "bridge", "--label", testLabel, name)
	t.Cleanup(func() {
		if _, err := docker("network", "rm", name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return name
}

// removeOnCleanup removes a container and its anonymous volumes at cleanup,
// first logging what helps to debug a failure.
func removeOnCleanup(t *testing.T, name string, isNode bool) {
	t.Cleanup(func() {
		if t.Failed() {
			if isNode {
				out, _ := docker("exec", name, "bash", "-c",
					"kubectl --kubeconfig=/etc/kubernetes/admin.conf get nodes,pods -A -o wide 2>&1; "+
						"journalctl -u kubelet --no-pager 2>&1 | tail -n 40; journalctl -u containerd --no-pager 2>&1 | tail -n 20")
				t.Logf("%s:\n%s", name, out)
			} else {
				out, _ := docker("logs", "--tail", "40", name)
				t.Logf("%s logs:\n%s", name, out)
			}
		}
		if _, err := docker("rm", "-f", "-v", name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// runNode starts a node container with the run flags CAPCT uses
// (docs/node-image.md) and returns when containerd answers.
func runNode(t *testing.T, network, name string) time.Time {
	t.Helper()
	started := time.Now()
	must(t, "run", "-d", "--name", name, "--hostname", name,
		"--label", testLabel, "--network", network,
		"--privileged",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--tmpfs", "/tmp", "--tmpfs", "/run",
		// an anonymous volume, labelled, removed with the container (rm -v)
		"--mount", "type=volume,dst=/var,volume-label="+testLabel,
		"--volume", "/lib/modules:/lib/modules:ro",
		"--cgroupns", "private",
		nodeImage)
	removeOnCleanup(t, name, true)
	eventually(t, time.Minute, name+"'s containerd", func() error {
		_, err := docker("exec", name, "ctr", "-n", "k8s.io", "version")
		return err
	})
	return started
}

// kubeadmConfig renders the settings CAPCT applies to a node.
func kubeadmConfig(nodeIP, name string) string {
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %[1]s
  bindPort: 6443
nodeRegistration:
  name: %[2]s
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
  - name: node-ip
    value: %[1]s
  ignorePreflightErrors:
  - SystemVerification
  - Swap
  - FileContent--proc-sys-net-bridge-bridge-nf-call-iptables
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %[3]s
clusterName: capct-nodeimage
controlPlaneEndpoint: %[1]s:6443
apiServer:
  certSANs: [localhost, 127.0.0.1]
networking:
  podSubnet: %[4]s
  serviceSubnet: 10.96.0.0/16
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupRoot: /kubelet
failSwapOn: false
failCgroupV1: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
`, nodeIP, name, kubernetesVersion(), podSubnet)
}

func kubernetesVersion() string {
	if i := strings.LastIndex(nodeImage, ":"); i >= 0 {
		if v := nodeImage[i+1:]; strings.HasPrefix(v, "v") {
			return v
		}
	}
	if v := os.Getenv("NODE_KUBERNETES_VERSION"); v != "" {
		return v
	}
	return "v1.35.4"
}

// cniConfig is a bridge + host-local network for one node's pod CIDR. In a
// real cluster CAPCT writes the node's CNI config; the image ships plugins only.
func cniConfig(nodeCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "capct-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, nodeCIDR)
}

func containerIP(t *testing.T, name, network string) string {
	t.Helper()
	return must(t, "inspect", "-f", fmt.Sprintf("{{ (index .NetworkSettings.Networks %q).IPAddress }}", network), name)
}

const kubectl = "kubectl --kubeconfig=/etc/kubernetes/admin.conf "

func nodeReady(node, name string) error {
	out, err := docker("exec", node, "bash", "-c",
		kubectl+"get node "+name+` -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'`)
	if err != nil {
		return err
	}
	if out != "True" {
		return fmt.Errorf("node %s Ready=%q", name, out)
	}
	return nil
}

// systemPodsReady checks that every kube-system pod is Running and Ready.
func systemPodsReady(node string, want int) error {
	out, err := docker("exec", node, "bash", "-c",
		kubectl+`get pods -n kube-system -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[*].ready}{"\n"}{end}'`)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < want {
		return fmt.Errorf("%d kube-system pods, want at least %d:\n%s", len(lines), want, out)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 || f[1] != "Running" {
			return fmt.Errorf("not running: %q\n%s", l, out)
		}
		for _, r := range f[2:] {
			if r != "true" {
				return fmt.Errorf("not ready: %q\n%s", l, out)
			}
		}
	}
	return nil
}

func TestNodeImage(t *testing.T) {
	network := createNetwork(t)
	cp := "capct-nodeimage-" + runID + "-cp"

	// --- kubeadm init on the first node ---
	started := runNode(t, network, cp)
	cpIP := containerIP(t, cp, network)
	writeFile(t, cp, "/kind/kubeadm.conf", kubeadmConfig(cpIP, cp))
	writeFile(t, cp, "/etc/cni/net.d/10-capct.conflist", cniConfig("10.244.0.0/24"))
	initStart := time.Now()
	if out, err := docker("exec", cp, "kubeadm", "init", "--config=/kind/kubeadm.conf", "--skip-token-print", "--v=1"); err != nil {
		t.Fatalf("kubeadm init: %v\n%s", err, out)
	}
	t.Logf("kubeadm init took %.0fs", time.Since(initStart).Seconds())
	eventually(t, 3*time.Minute, cp+" Ready", func() error { return nodeReady(cp, cp) })
	ready := time.Since(started)
	t.Logf("docker run -> Node Ready: %.1fs", ready.Seconds())
	// apiserver, controller-manager, scheduler, etcd, kube-proxy, 2x coredns
	eventually(t, 3*time.Minute, "kube-system pods Running and Ready", func() error { return systemPodsReady(cp, 7) })
	t.Logf("docker run -> all kube-system pods Running and Ready: %.1fs", time.Since(started).Seconds())

	// CoreDNS got Ready by talking to the API through the kubernetes Service
	// (pod -> Service); now reach CoreDNS through the kube-dns Service from the node.
	eventually(t, time.Minute, "kube-dns Service answers on TCP 53", func() error {
		_, err := docker("exec", cp, "bash", "-c", "timeout 3 bash -c '</dev/tcp/10.96.0.10/53'")
		return err
	})

	// A DNS query (UDP) through the kube-dns Service VIP, from the node with a
	// resolv.conf that names only the cluster DNS.
	eventually(t, time.Minute, "cluster DNS resolves kubernetes.default", func() error {
		out, err := docker("exec", cp, "unshare", "-m", "bash", "-c",
			"echo 'nameserver 10.96.0.10' > /tmp/resolv.conf && mount --bind /tmp/resolv.conf /etc/resolv.conf && "+
				"getent ahostsv4 kubernetes.default.svc.cluster.local")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "10.96.0.1 ") {
			return fmt.Errorf("kubernetes.default.svc.cluster.local resolved to %q", out)
		}
		return nil
	})

	t.Run("lb", func(t *testing.T) { testLB(t, network, cpIP) })

	t.Run("join", func(t *testing.T) {
		worker := "capct-nodeimage-" + runID + "-w"
		wStarted := runNode(t, network, worker)
		writeFile(t, worker, "/etc/cni/net.d/10-capct.conflist", cniConfig("10.244.1.0/24"))
		join := nodeExec(t, cp, "kubeadm token create --print-join-command")
		joinStart := time.Now()
		if out, err := docker("exec", worker, "bash", "-c", join+
			" --ignore-preflight-errors=SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"); err != nil {
			t.Fatalf("kubeadm join: %v\n%s", err, out)
		}
		t.Logf("kubeadm join took %.0fs", time.Since(joinStart).Seconds())
		eventually(t, 3*time.Minute, worker+" Ready", func() error { return nodeReady(cp, worker) })
		t.Logf("docker run -> joined Node Ready: %.1fs", time.Since(wStarted).Seconds())
		if err := nodeReady(cp, cp); err != nil {
			t.Fatal(err)
		}
		// kube-proxy runs on both nodes
		eventually(t, 2*time.Minute, "kube-system pods on both nodes", func() error { return systemPodsReady(cp, 8) })
	})
}

// haproxyConfig renders the configuration CAPCT would write for one API server.
func haproxyConfig(backend string, extra string) string {
	return fmt.Sprintf(`global
  log stdout format raw local0 info
  stats socket /var/run/haproxy.sock mode 600 level admin expose-fd listeners

defaults
  log global
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h

frontend control-plane
  bind *:6443
  default_backend kube-apiservers

backend kube-apiservers
  option httpchk GET /healthz
  http-check expect status 200
  server cp %s:6443 check check-ssl verify none inter 2s
%s`, backend, extra)
}

func testLB(t *testing.T, network, apiserverIP string) {
	name := "capct-nodeimage-" + runID + "-lb"

	// the image starts with its default configuration
	must(t, "run", "-d", "--name", name, "--label", testLabel, "--network", network,
		"-p", "127.0.0.1::6443", lbImage)
	removeOnCleanup(t, name, false)
	eventually(t, 30*time.Second, "haproxy with its default config", func() error {
		state, err := docker("inspect", "-f", "{{.State.Running}}", name)
		if err != nil || state != "true" {
			return fmt.Errorf("running=%q %v", state, err)
		}
		_, err = docker("exec", name, "bash", "-c", "timeout 2 bash -c '</dev/tcp/127.0.0.1/8404'")
		return err
	})

	// render CAPCT's configuration and reload
	writeFile(t, name, "/usr/local/etc/haproxy/haproxy.cfg", haproxyConfig(apiserverIP, ""))
	must(t, "kill", "-s", "HUP", name)
	hostPort := must(t, "port", name, "6443/tcp")
	hostPort = strings.Split(hostPort, "\n")[0]
	t.Logf("LB published at %s", hostPort)

	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the test only checks forwarding
		MaxIdleConnsPerHost: 1,
	}
	defer tr.CloseIdleConnections()
	var conns int
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns++
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path string) error {
		resp, err := client.Get("https://" + hostPort + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s %s", path, resp.Status, body)
		}
		return nil
	}
	eventually(t, time.Minute, "GET /healthz through the LB", func() error { return get("/healthz") })
	if err := get("/version"); err != nil {
		t.Fatal(err)
	}
	before := conns

	// reload with a changed configuration while the connection stays open
	writeFile(t, name, "/usr/local/etc/haproxy/haproxy.cfg", haproxyConfig(apiserverIP,
		"\nfrontend stats\n  mode http\n  bind *:8405\n  http-request return status 200 content-type text/plain string ok\n"))
	must(t, "kill", "-s", "HUP", name)
	eventually(t, 30*time.Second, "the reloaded haproxy on :8405", func() error {
		_, err := docker("exec", name, "bash", "-c", "timeout 2 bash -c '</dev/tcp/127.0.0.1/8405'")
		return err
	})
	if err := get("/version"); err != nil {
		t.Fatalf("kept-open connection after SIGHUP: %v", err)
	}
	if conns != before {
		t.Fatalf("the connection was dropped by the reload: %d dials before, %d after", before, conns)
	}
	// new connections reach the API server through the new worker
	tr.CloseIdleConnections()
	if err := get("/healthz"); err != nil {
		t.Fatalf("new connection after SIGHUP: %v", err)
	}
	if state := must(t, "inspect", "-f", "{{.State.Running}} {{.RestartCount}}", name); state != "true 0" {
		t.Fatalf("haproxy state after reload: %s", state)
	}
}
