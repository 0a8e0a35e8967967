package containerengine_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containerengine"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// managerNamespace holds the engines' Secrets, as the manager's own
// namespace does.
const managerNamespace = "capct-system"

var (
	env *envtest.Environment
	// registry is the engines' clients, as the manager's Registry.
	registry *engines.Registry
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.Background())
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
			return err
		}
		registry = engines.NewRegistry(nil, docker.Connect, env.Manager.GetAPIReader(), managerNamespace, 5*time.Second, nil)
		return (&containerengine.Reconciler{Client: env.Manager.GetClient(), Engines: registry}).
			SetupWithManager(ctx, env.Manager, controller.Options{})
	}, nil))
}

func available(ctx context.Context, g Gomega, name string) *metav1.Condition {
	engine := &infrav1.ContainerEngine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, engine)).To(Succeed())
	c := conditions.Get(engine, infrav1.EngineAvailableCondition)
	g.Expect(c).NotTo(BeNil(), "ContainerEngine %s has no Available condition", name)
	return c
}

func createEngine(ctx context.Context, g Gomega, t *testing.T, name string, spec infrav1.ContainerEngineSpec) *infrav1.ContainerEngine {
	engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	g.Expect(env.Client.Create(ctx, engine)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })
	return engine
}
