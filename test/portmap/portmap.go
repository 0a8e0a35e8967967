//go:build realcluster

package portmap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// The probe's objects in the workload cluster.
const (
	// DefaultNamespace holds them unless Probe.Namespace says otherwise.
	DefaultNamespace = "capct-portmap"
	name             = "portmap-probe"
	// token starts the page the pod serves, so that an answer from
	// anything else on the port is not taken for the pod's.
	token = "capct-portmap"
	// httpPort is where the pod's server listens.
	httpPort = 8080
)

// DefaultImage is the probe pod's image: the quickstart's busybox, which
// hack/quickstart loads into the nodes it runs its probe pods on. Nodes
// pull nothing: the image must be in the machine's node already.
const DefaultImage = "capct/busybox:quickstart"

// Probe runs a busybox HTTP server behind a NodePort Service in the
// workload cluster, its node port the containerPort of a ContainerMachine's
// port mapping, on that machine's Node.
type Probe struct {
	// Mgmt reads the ContainerMachine.
	Mgmt client.Client
	// Workload is the workload cluster.
	Workload kubernetes.Interface
	// Machine is the ContainerMachine with the mapping.
	Machine types.NamespacedName
	// Image is the pod's image (DefaultImage when empty); it must hold
	// busybox at /bin/busybox and be on the machine's node.
	Image string
	// Namespace holds the probe's objects (DefaultNamespace when empty).
	Namespace string
}

// Target is where a probe answers on the container host.
type Target struct {
	// URL is http://<host address>:<host port>/.
	URL string
	// Mapping is the ContainerMachine's mapping it goes through.
	Mapping infrav1.PortMapping
	// Node runs the pod: the machine's Node.
	Node string
	// PodUID is the pod's, to tell the same pod after a restart.
	PodUID types.UID
}

// Start finds the machine's first TCP mapping whose containerPort is a
// node port, and the machine's Node, and creates the pod and the Service
// there anew; it returns once the pod is Ready.
func (p *Probe) Start(ctx context.Context) (Target, error) {
	cm := &infrav1.ContainerMachine{}
	if err := p.Mgmt.Get(ctx, p.Machine, cm); err != nil {
		return Target{}, fmt.Errorf("failed to get ContainerMachine %s: %w", p.Machine, err)
	}
	mapping, err := nodePortMapping(cm)
	if err != nil {
		return Target{}, err
	}
	node, err := p.node(ctx, cm)
	if err != nil {
		return Target{}, err
	}
	if err := p.Cleanup(ctx); err != nil {
		return Target{}, err
	}
	ns := p.namespace()
	if _, err := p.Workload.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return Target{}, fmt.Errorf("failed to create namespace %s: %w", ns, err)
	}
	if _, err := p.Workload.CoreV1().Pods(ns).Create(ctx, p.pod(node), metav1.CreateOptions{}); err != nil {
		return Target{}, fmt.Errorf("failed to create the probe pod: %w", err)
	}
	if _, err := p.Workload.CoreV1().Services(ns).Create(ctx, service(mapping.ContainerPort), metav1.CreateOptions{}); err != nil {
		return Target{}, fmt.Errorf("failed to create the probe Service with node port %d: %w", mapping.ContainerPort, err)
	}
	uid, err := p.ready(ctx, 2*time.Minute)
	if err != nil {
		return Target{}, err
	}
	return Target{URL: "http://" + net.JoinHostPort(reachable(mapping.EffectiveListenAddress()), strconv.Itoa(int(mapping.HostPort))) + "/",
		Mapping: mapping, Node: node, PodUID: uid}, nil
}

// Cleanup removes the probe's pod and Service; missing ones are fine.
func (p *Probe) Cleanup(ctx context.Context) error {
	ns := p.namespace()
	if err := p.Workload.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the probe Service: %w", err)
	}
	err := p.Workload.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the probe pod: %w", err)
	}
	// A new pod of the same name waits for the old one to be gone.
	return wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := p.Workload.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// PodUID returns the probe pod's UID now, so that a caller can tell
// whether the pod after a restart is the one from before.
func (p *Probe) PodUID(ctx context.Context) (types.UID, error) {
	pod, err := p.Workload.CoreV1().Pods(p.namespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to get the probe pod: %w", err)
	}
	return pod.UID, nil
}

// Answer fetches t.URL from the container host until the probe pod's page
// comes back, for up to timeout, and returns the page; the error says what
// the last attempt got.
func Answer(ctx context.Context, t Target, timeout time.Duration) (string, error) {
	httpClient := &http.Client{Timeout: 5 * time.Second}
	var last error
	var page string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		page, last = get(ctx, httpClient, t.URL)
		return last == nil, nil
	})
	if err != nil {
		return "", fmt.Errorf("no answer from the probe on %s (host port %s of node %s, node port %d) within %s: %w",
			t.URL, describe(t.Mapping), t.Node, t.Mapping.ContainerPort, timeout, errors.Join(last, err))
	}
	return page, nil
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("failed to build the request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("failed to fetch %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("failed to read the answer of %s: %w", url, err)
	}
	page := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(page, token) {
		return "", fmt.Errorf("%s answered %d %q, not the probe's page", url, resp.StatusCode, page)
	}
	return page, nil
}

// nodePortMapping is cm's first TCP mapping whose containerPort is in
// Kubernetes' default node port range.
func nodePortMapping(cm *infrav1.ContainerMachine) (infrav1.PortMapping, error) {
	for _, m := range cm.Spec.ExtraPortMappings {
		if m.EffectiveProtocol() == infrav1.ProtocolTCP && m.ContainerPort >= 30000 && m.ContainerPort <= 32767 {
			return m, nil
		}
	}
	return infrav1.PortMapping{}, fmt.Errorf("ContainerMachine %s/%s has no TCP extraPortMapping whose containerPort is a node port (30000-32767): %+v",
		cm.Namespace, cm.Name, cm.Spec.ExtraPortMappings)
}

// node finds the Node of cm by its provider ID.
func (p *Probe) node(ctx context.Context, cm *infrav1.ContainerMachine) (string, error) {
	if cm.Spec.ProviderID == "" {
		return "", fmt.Errorf("ContainerMachine %s/%s has no provider ID yet", cm.Namespace, cm.Name)
	}
	nodes, err := p.Workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to list the workload cluster's Nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == cm.Spec.ProviderID {
			return n.Name, nil
		}
	}
	return "", fmt.Errorf("no Node has provider ID %s of ContainerMachine %s/%s", cm.Spec.ProviderID, cm.Namespace, cm.Name)
}

func (p *Probe) namespace() string {
	if p.Namespace == "" {
		return DefaultNamespace
	}
	return p.Namespace
}

// pod serves token and its node's name on httpPort, on node.
func (p *Probe) pod(node string) *corev1.Pod {
	image := p.Image
	if image == "" {
		image = DefaultImage
	}
	script := fmt.Sprintf(`mkdir -p /www && echo "%s on %s" > /www/index.html && exec busybox httpd -f -p %d -h /www`, token, node, httpPort)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "httpd", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:        []string{"/bin/busybox", "sh", "-c", script},
				Ports:          []corev1.ContainerPort{{ContainerPort: httpPort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(httpPort)}}},
			}},
		},
	}
}

// service is the NodePort Service in front of the pod on nodePort.
func service(nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(httpPort), NodePort: nodePort}},
		},
	}
}

// ready waits for the pod to be Ready and returns its UID.
func (p *Probe) ready(ctx context.Context, timeout time.Duration) (types.UID, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		// An error is looked at again: the API server may not answer for a
		// moment, and the timeout says so when it lasts.
		got, gerr := p.Workload.CoreV1().Pods(p.namespace()).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return false, nil
		}
		pod = got
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		phase := "not found"
		if pod != nil {
			phase = string(pod.Status.Phase)
		}
		return "", fmt.Errorf("the probe pod is not Ready within %s (phase %s; its image must be on the node, nodes pull nothing): %w", timeout, phase, err)
	}
	return pod.UID, nil
}

// reachable is the address to reach a port published on addr from the
// host: the loopback of its family for an unspecified address.
func reachable(addr string) string {
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil || !a.IsUnspecified():
		return addr
	case a.Is4():
		return "127.0.0.1"
	}
	return "::1"
}

func describe(m infrav1.PortMapping) string {
	return net.JoinHostPort(m.EffectiveListenAddress(), strconv.Itoa(int(m.HostPort))) + "/" + string(m.EffectiveProtocol())
}
