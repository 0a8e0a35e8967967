//go:build engine

package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// sentinelOnly is bootstrap data that only reports success.
const sentinelOnly = `#cloud-config
runcmd:
- echo success > /run/cluster-api/bootstrap-success.complete
`

// preloadBusybox makes the machine preload the busybox test image it would
// otherwise run.
func preloadBusybox(s *MachineScope) {
	s.ContainerMachine.Spec.PreLoadImages = []string{s.ContainerMachine.Spec.Image}
}

// TestDockerPreloadIntoTheNodeImage runs a machine of the real node image
// (CAPCT's default for the machine's version, which make test-go builds
// first with make node-image) that preloads the busybox test image: its
// first bootstrap attempt waits for systemd, imports the image from the
// engine into the node's containerd, in the namespace the kubelet uses,
// and then runs the bootstrap data. The node image is built from Debian
// packages and Kubernetes sources, so the test image can only be in its
// containerd by the preload.
func TestDockerPreloadIntoTheNodeImage(t *testing.T) {
	node, err := naming.DefaultNodeImage(newScope().Version)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dockertest.NewRuntime(t).ImageExists(context.Background(), node); err != nil || !ok {
		t.Fatalf("the node image %s is not on the engine (%v): build it with make node-image; make test-go does", node, err)
	}
	e := newDockerEnvWith(t, sentinelOnly, nil, func(s *MachineScope) {
		preloadBusybox(s)
		s.ContainerMachine.Spec.Image = ""
	})
	if e.s.Container.Image != node {
		t.Fatalf("the machine runs %s, not the default node image %s", e.s.Container.Image, node)
	}
	preloaded := e.s.ContainerMachine.Spec.PreLoadImages[0]
	e.untilBootstrapDoneWithin(5 * time.Minute)
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)

	named, err := reference.ParseNormalizedNamed(preloaded)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.rt.Exec(context.Background(), e.s.ContainerName(), e.s.Owner(),
		container.ExecInput{Cmd: []string{"ctr", "--namespace=k8s.io", "images", "ls", "-q"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ctr images ls: %v, exit code %d: %s", err, res.ExitCode, res.Stderr)
	}
	if !strings.Contains("\n"+string(res.Stdout), "\n"+named.String()+"\n") {
		t.Fatalf("%s is not in the node's containerd (namespace k8s.io); it has:\n%s", named, res.Stdout)
	}
}

// TestDockerPreloadFailsOnANodeWithoutSystemd: preloading needs the node's
// init system to start containerd. On an image without systemctl (the
// busybox test image) the attempt fails, saying so, before anything of the
// bootstrap is staged, rather than going on as if the node had booted.
func TestDockerPreloadFailsOnANodeWithoutSystemd(t *testing.T) {
	e := newDockerEnvWith(t, sentinelOnly, nil, preloadBusybox)
	e.reconcileBootstrap(e.s)
	select {
	case <-e.finished:
	case <-time.After(time.Minute):
		t.Fatal("the first attempt's launch did not end")
	}
	_, err := e.deps.bootstrap().Reconcile(context.Background(), e.s)
	if err == nil || !strings.Contains(err.Error(), "the node image has no systemctl") {
		t.Fatalf("want the missing systemctl named, got %v", err)
	}
	if _, err := e.rt.ReadFile(context.Background(), e.s.ContainerName(), e.s.Owner(), provisioning.AttemptPath); !container.IsNotFound(err) {
		t.Fatalf("an attempt was staged on a node that cannot preload: %v", err)
	}
	if c := condition(e.s, infrav1.BootstrappedCondition); c.Status == metav1.ConditionTrue {
		t.Fatalf("Bootstrapped is %s/%s", c.Status, c.Reason)
	}
}
