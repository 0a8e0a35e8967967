//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// containerLogCollector is the framework.ClusterLogCollector for CAPCT's
// machines: the framework calls it for every Machine and MachinePool of a
// spec's cluster when it dumps the spec's resources, and it writes each node
// container's journal, kubelet and containerd logs, its containers and the
// node's pods into <outputPath>. The machines are containers of the host's
// engine, so `docker exec` reaches them from the host the suite runs on.
type containerLogCollector struct{}

// nodeLogs: file name, then the command run in the node container.
var nodeLogs = [][]string{
	{"journal.log", "journalctl", "--no-pager", "--output=short-precise"},
	{"kubelet.log", "journalctl", "--no-pager", "--output=short-precise", "-u", "kubelet"},
	{"containerd.log", "journalctl", "--no-pager", "--output=short-precise", "-u", "containerd"},
	// The bootstrap run's marks (internal/provisioning), not its staged
	// files: those hold the bootstrap data's secrets.
	{"bootstrap-marks.txt", "sh", "-c", "ls -la --time-style=full-iso /var/lib/capct/bootstrap /run/capct 2>&1"},
	// The node image has containerd's ctr, not crictl: the kubelet's
	// containers (their images), then their tasks' state.
	{"containers.txt", "sh", "-c", "ctr --namespace=k8s.io containers list; echo; ctr --namespace=k8s.io tasks list"},
	// The kubelet's own credentials: the node authorizer lets a node list
	// the pods bound to it.
	{"pods.txt", "sh", "-c", `kubectl --kubeconfig /etc/kubernetes/kubelet.conf get pods -A -o wide --field-selector spec.nodeName="$(hostname)"`},
}

func (containerLogCollector) CollectMachineLog(ctx context.Context, _ client.Client, m *clusterv1.Machine, outputPath string) error {
	name := strings.TrimPrefix(m.Spec.ProviderID, infrav1.ProviderIDPrefix)
	if name == "" {
		return nil // never provisioned: no container to read
	}
	return collectNode(ctx, name, outputPath)
}

func (containerLogCollector) CollectMachinePoolLog(ctx context.Context, _ client.Client, mp *clusterv1.MachinePool, outputPath string) error {
	var errs []error
	for _, id := range mp.Spec.ProviderIDList {
		name := strings.TrimPrefix(id, infrav1.ProviderIDPrefix)
		errs = append(errs, collectNode(ctx, name, filepath.Join(outputPath, name)))
	}
	return errors.Join(errs...)
}

// CollectInfrastructureLogs writes the cluster's containers as the engine
// sees them, and the load balancer's log.
func (containerLogCollector) CollectInfrastructureLogs(ctx context.Context, _ client.Client, c *clusterv1.Cluster, outputPath string) error {
	if err := os.MkdirAll(outputPath, 0o750); err != nil {
		return err
	}
	label := "label=io.x-k8s.capct.cluster=" + c.Name
	errs := []error{
		run(ctx, filepath.Join(outputPath, "containers.txt"), "docker", "ps", "-a", "--filter", label),
	}
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", label, "--filter", "label=io.x-k8s.capct.role=load-balancer").Output()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, id := range strings.Fields(string(out)) {
		errs = append(errs, run(ctx, filepath.Join(outputPath, "load-balancer-"+id+".log"), "docker", "logs", id))
	}
	return errors.Join(errs...)
}

func collectNode(ctx context.Context, container, outputPath string) error {
	if err := os.MkdirAll(outputPath, 0o750); err != nil {
		return err
	}
	var errs []error
	for _, l := range nodeLogs {
		args := append([]string{"exec", container}, l[1:]...)
		errs = append(errs, run(ctx, filepath.Join(outputPath, l[0]), "docker", args...))
	}
	return errors.Join(errs...)
}

// run writes the command's output, and its error if any, into file.
func run(ctx context.Context, file, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		out = fmt.Appendf(out, "\n%s %s: %v\n", name, strings.Join(args, " "), err)
	}
	if werr := os.WriteFile(file, out, 0o600); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("%s in %s: %w", strings.Join(args, " "), file, err)
	}
	return nil
}
