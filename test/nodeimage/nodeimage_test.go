//go:build engine

// Package nodeimage tests the offline node and load-balancer images that
// images/node and images/haproxy build (docs/node-image.md) with the
// configurations CAPCT gives real clusters (rendered_test.go says where each
// comes from): the load balancer starts with its built-in configuration and
// is reloaded with CAPCT's, a node container bootstrapped by CAPCT's
// bootstrap with the default cluster template's kubeadm settings becomes a
// Ready control plane with every kube-system pod Running behind that load
// balancer, HAProxy reloads on SIGHUP without dropping a connection, and a
// second node joins through the load balancer. The tests drive the docker
// CLI; they need a reachable Docker engine and fail (never skip) without
// one.
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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
)

const testLabel = "io.capct.test=nodeimage"

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

// testDir is this package's folder.
func testDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// buildImage runs the (cached) build script of images/<name> and returns
// the image it printed.
func buildImage(name string) (string, error) {
	script := filepath.Join(repoRoot(), "images", name, "build.sh")
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
	out, err := dockerRaw(nil, args...)
	return strings.TrimSpace(out), err
}

// dockerRaw runs the docker CLI with stdin and returns its stdout as it is.
func dockerRaw(stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
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

// writeFileMode writes a file into a container, creating its folder.
func writeFileMode(t *testing.T, container, path, content string, mode os.FileMode) {
	t.Helper()
	if _, err := dockerRaw(strings.NewReader(content), "exec", "-i", container, "sh", "-c",
		fmt.Sprintf("mkdir -p %q && cat > %q && chmod %o %q", filepath.Dir(path), path, mode.Perm(), path)); err != nil {
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
	// Only the CNI plugins a kindest/node image has, so that every cluster
	// here shows CAPCT's pod network needs no other (the image keeps bridge
	// for older CAPCT releases' nodes).
	must(t, "exec", name, "sh", "-c", `cd /opt/cni/bin && for f in *; do case " $0 " in *" $f "*) ;; *) rm -f "$f" ;; esac; done`,
		strings.Join(podnetwork.NodeCNIPlugins(), " "))
	return started
}

// kubernetesVersion is the node image's: its tag, as make node-image names it.
func kubernetesVersion() string {
	if i := strings.LastIndex(nodeImage, ":"); i >= 0 {
		if v := nodeImage[i+1:]; strings.HasPrefix(v, "v") {
			return v
		}
	}
	if v := os.Getenv("KUBERNETES_VERSION"); v != "" {
		return v
	}
	return "v1.35.4"
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
	prefix := "capct-nodeimage-" + runID
	f := loadFlavor(t, "nodeimage-"+runID, kubernetesVersion())
	pods := newPodNetwork(t, f)

	// --- the load balancer first, as CAPCT creates it before any machine;
	// its address is the cluster's control-plane endpoint ---
	lb := startLB(t, network, prefix+"-lb")

	// --- the first control-plane machine, bootstrapped behind it ---
	cp := prefix + "-cp"
	started := runNode(t, network, cp)
	cpIP := containerIP(t, cp, network)
	lb.reload(t, loadbalancer.Backend{Name: cp, Address: cpIP, Weight: 100})
	f.cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: lb.ip, Port: loadbalancer.APIServerPort}
	initStart := time.Now()
	bootstrap(t, cp, f.initData(t))
	t.Logf("bootstrap (kubeadm init) took %.0fs", time.Since(initStart).Seconds())
	pods.add(t, cp, cpIP)
	eventually(t, 3*time.Minute, cp+" Ready", func() error { return nodeReady(cp, cp) })
	t.Logf("docker run -> Node Ready: %.1fs", time.Since(started).Seconds())
	// apiserver, controller-manager, scheduler, etcd, kube-proxy, 2x coredns
	eventually(t, 3*time.Minute, "kube-system pods Running and Ready", func() error { return systemPodsReady(cp, 7) })
	t.Logf("docker run -> all kube-system pods Running and Ready: %.1fs", time.Since(started).Seconds())

	// CoreDNS got Ready by talking to the API through the kubernetes Service
	// (pod -> Service); now reach CoreDNS through the kube-dns Service from the node.
	kubernetesIP, dnsIP := f.serviceIP(t, 1), f.serviceIP(t, 10)
	eventually(t, time.Minute, "kube-dns Service answers on TCP 53", func() error {
		_, err := docker("exec", cp, "bash", "-c", "timeout 3 bash -c '</dev/tcp/"+dnsIP+"/53'")
		return err
	})

	// A DNS query (UDP) through the kube-dns Service VIP, from the node with a
	// resolv.conf that names only the cluster DNS.
	eventually(t, time.Minute, "cluster DNS resolves kubernetes.default", func() error {
		out, err := docker("exec", cp, "unshare", "-m", "bash", "-c",
			"echo 'nameserver "+dnsIP+"' > /tmp/resolv.conf && mount --bind /tmp/resolv.conf /etc/resolv.conf && "+
				"getent ahostsv4 kubernetes.default.svc."+f.cluster.Spec.ClusterNetwork.ServiceDomain)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, kubernetesIP+" ") {
			return fmt.Errorf("kubernetes.default resolved to %q, want %s", out, kubernetesIP)
		}
		return nil
	})

	t.Run("lb", func(t *testing.T) { testLB(t, lb, cp, cpIP) })

	t.Run("join", func(t *testing.T) {
		worker := prefix + "-w"
		wStarted := runNode(t, network, worker)
		token, caCertHash := joinCredentials(t, cp)
		joinStart := time.Now()
		bootstrap(t, worker, f.joinData(t, token, caCertHash))
		t.Logf("bootstrap (kubeadm join) took %.0fs", time.Since(joinStart).Seconds())
		pods.add(t, worker, containerIP(t, worker, network))
		eventually(t, 3*time.Minute, worker+" Ready", func() error { return nodeReady(cp, worker) })
		t.Logf("docker run -> joined Node Ready: %.1fs", time.Since(wStarted).Seconds())
		if err := nodeReady(cp, cp); err != nil {
			t.Fatal(err)
		}
		// kube-proxy runs on both nodes
		eventually(t, 2*time.Minute, "kube-system pods on both nodes", func() error { return systemPodsReady(cp, 8) })
	})
}

// joinCredentials asks the control plane for a bootstrap token and the hash
// of its CA, the discovery the bootstrap provider gives a joining machine.
func joinCredentials(t *testing.T, cp string) (token, caCertHash string) {
	t.Helper()
	fields := strings.Fields(nodeExec(t, cp, "kubeadm token create --print-join-command"))
	for i := 0; i+1 < len(fields); i++ {
		switch fields[i] {
		case "--token":
			token = fields[i+1]
		case "--discovery-token-ca-cert-hash":
			caCertHash = fields[i+1]
		}
	}
	if token == "" || caCertHash == "" {
		t.Fatalf("kubeadm printed no token or CA hash: %q", strings.Join(fields, " "))
	}
	return token, caCertHash
}

// haproxy is the load balancer container as the workload cluster's clients see it.
type haproxy struct {
	name, ip string
	// hostPort is the API port published on 127.0.0.1, as CAPCT publishes it.
	hostPort string
}

// startLB runs the LB image with its built-in configuration and checks
// that it is what CAPCT renders for a cluster with no control-plane
// machine, and that it serves it: the statistics list its marker and
// :8404 answers health checks.
func startLB(t *testing.T, network, name string) *haproxy {
	t.Helper()
	must(t, "run", "-d", "--name", name, "--label", testLabel, "--network", network,
		"-p", "127.0.0.1::6443", lbImage)
	removeOnCleanup(t, name, false)
	lb := &haproxy{name: name, ip: containerIP(t, name, network)}
	lb.hostPort = strings.Split(must(t, "port", name, "6443/tcp"), "\n")[0]
	want, marker, err := loadbalancer.Configuration("", loadbalancer.Config{FrontendPort: loadbalancer.APIServerPort, BackendPort: loadbalancer.APIServerPort})
	if err != nil {
		t.Fatal(err)
	}
	if have, err := dockerRaw(nil, "exec", name, "cat", loadbalancer.ConfigPath); err != nil || have != string(want) {
		t.Fatalf("%s starts with a configuration that is not CAPCT's for an empty cluster (%v); rebuild it with make lb-image:\n%s", lbImage, err, have)
	}
	lb.waitFor(t, marker)
	return lb
}

// reload writes what CAPCT writes for these control-plane machines, signals
// HAProxy as CAPCT does, and waits until it runs it and still answers
// health checks.
func (lb *haproxy) reload(t *testing.T, backends ...loadbalancer.Backend) {
	t.Helper()
	config, marker, err := loadbalancer.Configuration("", loadbalancer.Config{
		FrontendPort: loadbalancer.APIServerPort, BackendPort: loadbalancer.APIServerPort, Backends: backends})
	if err != nil {
		t.Fatal(err)
	}
	writeFileMode(t, lb.name, loadbalancer.ConfigPath, string(config), 0o644)
	must(t, "kill", "-s", "HUP", lb.name)
	lb.waitFor(t, marker)
}

// waitFor waits until HAProxy's statistics list the configuration's marker,
// as CAPCT confirms a reload, and checks GET /healthz on the stats port.
func (lb *haproxy) waitFor(t *testing.T, marker string) {
	t.Helper()
	m := &container.Machine{Name: lb.name, IPv4: netip.MustParseAddr(lb.ip)}
	eventually(t, 30*time.Second, lb.name+" running configuration "+marker, func() error {
		csv, err := loadbalancer.HTTPStats(context.Background(), m)
		if err != nil {
			return err
		}
		if !strings.Contains(string(csv), "\n"+marker+",BACKEND,") {
			return fmt.Errorf("the statistics do not list %s", marker)
		}
		return nil
	})
	url := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(lb.ip, strconv.Itoa(loadbalancer.StatsPort)))
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET %s: %s %q", url, resp.Status, body)
	}
}

func testLB(t *testing.T, lb *haproxy, cp, cpIP string) {
	t.Logf("LB published at %s", lb.hostPort)
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
		resp, err := client.Get("https://" + lb.hostPort + path)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
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

	// reload with a changed configuration while the connection stays open:
	// a second member at weight 0, as a control-plane machine being deleted
	// is kept while its connections drain
	lb.reload(t, loadbalancer.Backend{Name: cp, Address: cpIP, Weight: 100},
		loadbalancer.Backend{Name: cp + "-leaving", Address: cpIP, Weight: 0})
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
	if state := must(t, "inspect", "-f", "{{.State.Running}} {{.RestartCount}}", lb.name); state != "true 0" {
		t.Fatalf("haproxy state after reload: %s", state)
	}
}

// TestTheDefaultLoadBalancerImageIsTheOneBuilt ties CAPCT's default load
// balancer image (naming.DefaultLoadBalancerImage, what a ContainerCluster
// that names none runs) to what make lb-image builds by default. CAPCT never
// pulls, so a default the build does not produce would leave such clusters
// at ImageNotOnHost.
func TestTheDefaultLoadBalancerImageIsTheOneBuilt(t *testing.T) {
	if tag := os.Getenv("LB_IMAGE"); tag != "" {
		t.Skipf("LB_IMAGE=%s overrides the tag the build derives; run without it to compare the default", tag)
	}
	if lbImage != naming.DefaultLoadBalancerImage {
		t.Fatalf("images/haproxy/build.sh built %s by default, but CAPCT's default load balancer image is %s: change naming.DefaultLoadBalancerImage with the build", lbImage, naming.DefaultLoadBalancerImage)
	}
}
