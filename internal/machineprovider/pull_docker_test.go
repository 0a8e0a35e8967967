//go:build engine

package machineprovider

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/test/registry"
)

// countingPulls is an engine that counts the pulls it is asked for.
type countingPulls struct {
	container.Runtime
	pulls atomic.Int32
}

func (c *countingPulls) PullImage(ctx context.Context, ref string, opts container.PullOptions) error {
	c.pulls.Add(1)
	return c.Runtime.PullImage(ctx, ref, opts)
}

// TestPullsFromARealRegistry has the local Docker engine pull machines'
// images from registries built from source (internal/test/registry), with
// the credentials of the cluster's pull Secret, as a launch does.
func TestPullsFromARealRegistry(t *testing.T) {
	docker := dockertest.NewRuntime(t)
	open := registry.Start(t, docker, registry.Options{})
	password := "s3cret-" + runtimetest.RandomSuffix()
	private := registry.Start(t, docker, registry.Options{Username: "capct", Password: password})
	present, err := dockertest.BusyboxImage(context.Background(), docker)
	if err != nil {
		t.Fatal(err)
	}

	// pulled checks the machine's image until it is there, through a pull.
	pulled := func(t *testing.T, e *pullEnv, rt *countingPulls, image string) {
		t.Helper()
		wantWait(t, e.check(t, image), infrav1.PullingImageReason, image)
		e.waitWoken(t)
		if err := e.check(t, image); err != nil {
			t.Fatalf("after the pull the host check = %v; want none", err)
		}
		if ok, err := rt.ImageExists(context.Background(), image); err != nil || !ok {
			t.Fatalf("after the pull ImageExists(%s) = %v, %v", image, ok, err)
		}
		if n := rt.pulls.Load(); n != 1 {
			t.Fatalf("%d pulls; want 1", n)
		}
	}
	newEnv := func(t *testing.T, username, password string, policy infrav1.ImagePullPolicy) (*pullEnv, *countingPulls) {
		rt := &countingPulls{Runtime: container.WithCallTimeout(docker, 30*time.Second)}
		secret := dockerConfigSecret("ns", "pull-secret", private.Host, username, password)
		e := newPullEnv(t, rt, secret)
		e.claim.ContainerMachine.Spec.ImagePullPolicy = policy
		return e, rt
	}

	t.Run("a pull", func(t *testing.T) {
		e, rt := newEnv(t, "capct", password, "")
		pulled(t, e, rt, open.Push(t, "capct-test/open", "v1"))
	})
	t.Run("a pull with credentials", func(t *testing.T) {
		e, rt := newEnv(t, "capct", password, infrav1.ImagePullIfNotPresent)
		pulled(t, e, rt, private.Push(t, "capct-test/private", "v1"))
	})
	t.Run("a pull that is refused", func(t *testing.T) {
		e, rt := newEnv(t, "capct", "wrong-"+password, infrav1.ImagePullIfNotPresent)
		image := private.Push(t, "capct-test/refused", "v1")
		wantWait(t, e.check(t, image), infrav1.PullingImageReason, image)
		e.waitWoken(t)
		msg := wantWait(t, e.check(t, image), infrav1.ImagePullFailedReason,
			`spec.image: the manager's engine could not pull image "`+image+`"`, "401 Unauthorized", "unauthorized")
		t.Logf("Launched: ImagePullFailed: %s", msg)
		if strings.Contains(msg, password) {
			t.Fatalf("the message shows the password: %s", msg)
		}
		if ok, _ := rt.ImageExists(context.Background(), image); ok {
			t.Fatalf("the engine holds %s after a refused pull", image)
		}
	})
	t.Run("IfNotPresent does not pull a present image", func(t *testing.T) {
		e, rt := newEnv(t, "capct", password, infrav1.ImagePullIfNotPresent)
		if err := e.check(t, present); err != nil {
			t.Fatalf("the host check of a present image = %v; want none", err)
		}
		if n := rt.pulls.Load(); n != 0 {
			t.Fatalf("%d pulls of a present image; want none", n)
		}
	})
	t.Run("Never does not pull", func(t *testing.T) {
		e, rt := newEnv(t, "capct", password, infrav1.ImagePullNever)
		image := open.Push(t, "capct-test/never", "v1")
		wantWait(t, e.check(t, image), infrav1.ImageNotOnHostReason, image, "spec.imagePullPolicy is Never")
		if n := rt.pulls.Load(); n != 0 {
			t.Fatalf("%d pulls under Never; want none", n)
		}
		if ok, _ := rt.ImageExists(context.Background(), image); ok {
			t.Fatalf("the engine holds %s under Never", image)
		}
	})
}
