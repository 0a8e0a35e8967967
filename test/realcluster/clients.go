package realcluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// RequestTimeout bounds every API call of the checks, as the scripts'
// --request-timeout=5s did: after an engine restart an API server may not
// answer, and a check must say so rather than hang.
const RequestTimeout = 5 * time.Second

// Clusters are the clients of the management and the workload cluster.
type Clusters struct {
	// Env is where the clusters are.
	Env Env
	// Mgmt reads and writes Cluster API's and CAPCT's objects.
	Mgmt client.Client
	// MgmtConfig is the management cluster's REST configuration.
	MgmtConfig *rest.Config
	// Workload is the workload cluster's client-go clientset.
	Workload kubernetes.Interface
	// WorkloadConfig is the workload cluster's REST configuration, for a
	// client through another address (the load balancer's host port).
	WorkloadConfig *rest.Config
}

// Connect builds the clients of env's clusters from their kubeconfig
// files. It does not call either API server: after an engine restart they
// may not answer yet.
func Connect(t testing.TB, env Env) *Clusters {
	t.Helper()
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expinfrav1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatalf("failed to build the scheme: %v", err)
		}
	}
	mgmtConfig := restConfig(t, env.MgmtKubeconfig)
	mgmt, err := client.New(mgmtConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("failed to build the management cluster's client: %v", err)
	}
	wlConfig := restConfig(t, env.Kubeconfig)
	wl, err := kubernetes.NewForConfig(wlConfig)
	if err != nil {
		t.Fatalf("failed to build the workload cluster's client: %v", err)
	}
	return &Clusters{Env: env, Mgmt: mgmt, MgmtConfig: mgmtConfig, Workload: wl, WorkloadConfig: wlConfig}
}

func restConfig(t testing.TB, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("failed to read %s: %v", kubeconfig, err)
	}
	// A bound on any call, above the checks' own (RequestTimeout, by their
	// contexts): a management API server busy with ten nodes joining has
	// taken more than 5 s to answer a patch.
	cfg.Timeout = 30 * time.Second
	// The tests poll every few seconds; client-go's default of 5 QPS
	// would queue a sampler's burst behind the checks.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

// Readyz is nil when the API server of cfg answers /readyz.
func Readyz(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to build a client for %s: %w", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("failed to reach %s/readyz: %w", cfg.Host, err)
	}
	return nil
}

// Nodes lists the workload cluster's Nodes.
func (c *Clusters) Nodes(ctx context.Context) ([]corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	list, err := c.Workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to list the workload cluster's Nodes: %w", err)
	}
	return list.Items, nil
}

// ContainerMachines lists the cluster's ContainerMachines.
func (c *Clusters) ContainerMachines(ctx context.Context) ([]infrav1.ContainerMachine, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var list infrav1.ContainerMachineList
	if err := c.Mgmt.List(ctx, &list, client.InNamespace(c.Env.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: c.Env.Cluster}); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of %s: %w", c.Env.Cluster, err)
	}
	return list.Items, nil
}

// ContainerCluster reads the cluster's ContainerCluster (named as its
// Cluster, as every flavor names it).
func (c *Clusters) ContainerCluster(ctx context.Context) (*infrav1.ContainerCluster, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var cc infrav1.ContainerCluster
	if err := c.Mgmt.Get(ctx, client.ObjectKey{Namespace: c.Env.Namespace, Name: c.Env.Cluster}, &cc); err != nil {
		return nil, fmt.Errorf("failed to read ContainerCluster %s: %w", c.Env.Cluster, err)
	}
	return &cc, nil
}

// CAPICluster reads the Cluster.
func (c *Clusters) CAPICluster(ctx context.Context) (*clusterv1.Cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var cl clusterv1.Cluster
	if err := c.Mgmt.Get(ctx, client.ObjectKey{Namespace: c.Env.Namespace, Name: c.Env.Cluster}, &cl); err != nil {
		return nil, fmt.Errorf("failed to read Cluster %s: %w", c.Env.Cluster, err)
	}
	return &cl, nil
}

// Exec runs command in pod's first container through kubectl exec and
// returns its stdout.
func (c *Clusters) Exec(ctx context.Context, pod string, command ...string) (string, error) {
	args := append([]string{"--kubeconfig", c.Env.Kubeconfig, "exec", pod, "--"}, command...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Env.Kubectl, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("failed to exec %q in pod %s: %w: %s", command, pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// HTTPGet is the last line of the body of GET / from host:port, asked by
// pod through busybox nc: Debian's static busybox wget crashes in glibc's
// resolver.
func (c *Clusters) HTTPGet(ctx context.Context, pod, host string, port int) (string, error) {
	out, err := c.Exec(ctx, pod, "busybox", "sh", "-c",
		fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 5 %s %d`, host, port))
	if err != nil {
		return "", err
	}
	return LastLine(out), nil
}

// LastLine is s's last non-empty line without its carriage return.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n"), "\n")
	return strings.TrimRight(lines[len(lines)-1], "\r")
}

// WaitCoreDNS waits up to timeout for the workload cluster's CoreDNS
// Deployment to have every replica updated and available, as kubectl
// rollout status does.
func (c *Clusters) WaitCoreDNS(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
		d, err := c.Workload.AppsV1().Deployments("kube-system").Get(rctx, "coredns", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d of %d replicas updated, %d available", d.Status.UpdatedReplicas, want(d), d.Status.AvailableReplicas)
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want(d) &&
			d.Status.AvailableReplicas == want(d) && d.Status.Replicas == want(d), nil
	})
	if err != nil {
		return fmt.Errorf("CoreDNS not rolled out within %s (%s): %w", timeout, last, err)
	}
	return nil
}

func want(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// WaitPodsReady waits up to timeout for every pod named to be Ready.
func (c *Clusters) WaitPodsReady(ctx context.Context, timeout time.Duration, names ...string) error {
	notReady := names
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		notReady = nil
		for _, name := range names {
			rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
			pod, err := c.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(rctx, name, metav1.GetOptions{})
			cancel()
			if err != nil || !PodReady(pod) {
				notReady = append(notReady, name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods %s not Ready within %s: %w", strings.Join(notReady, ", "), timeout, err)
	}
	return nil
}
