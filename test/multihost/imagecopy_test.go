//go:build engine

package multihost_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/test/images"
)

// TestImageCopiesToEngine2OverTLS copies the load balancer's image from
// this machine's engine to engine 2 as the controllers do: through the
// manager's Registry (engine 2 reached over TCP+TLS) and imagecopy.Copier,
// and logs how long it took. Engine 2 is removed with everything on it
// after the tests (engine.sh down).
func TestImageCopiesToEngine2OverTLS(t *testing.T) {
	ctx := runtimetest.Ctx(t)
	engine, data := engine2Spec(t)
	const namespace = "capct-system"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: engine.Spec.TLS.SecretRef.Name}, Data: data}
	one := dockertest.NewRuntime(t)
	local := container.WithCallTimeout(one, 30*time.Second)
	registry := engines.NewRegistry(local, docker.Connect, fake.NewClientBuilder().WithObjects(secret).Build(), namespace, 30*time.Second, nil)
	t.Cleanup(func() { registry.Forget(engine.Name) })
	two, err := registry.Ensure(ctx, engine)
	if err != nil {
		t.Fatal(err)
	}
	// CAPCT's own load balancer image, built (or found cached) here.
	image, err := images.LoadBalancer()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := two.ImageExists(ctx, image); err != nil || ok {
		t.Fatalf("engine 2 already holds %s (%v): the test needs an engine without it", image, err)
	}

	woken := make(chan types.NamespacedName, 1)
	copier := imagecopy.New(ctx, registry, 0, func(k types.NamespacedName) { woken <- k }, nil)
	lb := types.NamespacedName{Namespace: "ns", Name: "lb"}
	start := time.Now()
	if st := copier.Ensure(engine.Name, image, []string{engine.Name, engines.Local}, lb); !st.Copying {
		t.Fatalf("no copy started: %+v", st)
	}
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatalf("the copy did not end: %v", ctx.Err())
	}
	took := time.Since(start)
	if ok, err := two.ImageExists(ctx, image); err != nil || !ok {
		t.Fatalf("%s is not on engine 2 after the copy (%v)", image, err)
	}
	inspect, err := one.Client().ImageInspect(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %s (%d MiB) to engine 2 over TLS in %s", image, inspect.Size>>20, took.Round(time.Millisecond))
}
