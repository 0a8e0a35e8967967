//go:build realcluster

package portmap_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/test/portmap"
)

// TestNodePortAnswersOnTheMappedHostPort runs a pod behind a NodePort
// Service on a real workload cluster, its node port the containerPort of a
// ContainerMachine's port mapping, and fetches its page on the container
// host at the mapping's host port. It runs on the container host, with
//
//	PORTMAP_MGMT_KUBECONFIG      the management cluster's kubeconfig
//	PORTMAP_WORKLOAD_KUBECONFIG  the workload cluster's kubeconfig
//	PORTMAP_MACHINE              <namespace>/<name> of the ContainerMachine,
//	                             whose first TCP mapping has a node port
//	                             (30000-32767) as containerPort
//	PORTMAP_IMAGE                the pod's image, on the machine's node
//	                             (default capct/busybox:quickstart)
//
// and fails without them (make test-restart runs the same probe around an
// engine restart):
//
//	go test -tags realcluster ./test/portmap -run TestNodePortAnswersOnTheMappedHostPort -v
func TestNodePortAnswersOnTheMappedHostPort(t *testing.T) {
	mgmtPath, workloadPath, machine := os.Getenv("PORTMAP_MGMT_KUBECONFIG"), os.Getenv("PORTMAP_WORKLOAD_KUBECONFIG"), os.Getenv("PORTMAP_MACHINE")
	if mgmtPath == "" || workloadPath == "" || machine == "" {
		t.Fatal("PORTMAP_MGMT_KUBECONFIG, PORTMAP_WORKLOAD_KUBECONFIG and PORTMAP_MACHINE must name the cluster and the machine")
	}
	namespace, name, ok := strings.Cut(machine, "/")
	if !ok {
		t.Fatalf("PORTMAP_MACHINE=%q is not <namespace>/<name>", machine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	probe := &portmap.Probe{
		Mgmt:     mgmtClient(t, mgmtPath),
		Workload: workloadClient(t, workloadPath),
		Machine:  types.NamespacedName{Namespace: namespace, Name: name},
		Image:    os.Getenv("PORTMAP_IMAGE"),
	}
	target, err := probe.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := probe.Cleanup(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	page, err := portmap.Answer(ctx, target, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answered %q", target.URL, page)
}

func mgmtClient(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("failed to read %s: %v", kubeconfig, err)
	}
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("failed to build the management cluster's client: %v", err)
	}
	return c
}

func workloadClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("failed to read %s: %v", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("failed to build the workload cluster's client: %v", err)
	}
	return cs
}
