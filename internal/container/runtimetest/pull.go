package runtimetest

import (
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// PullFixture is what the pull behaviours pull: images a registry serves,
// which the engine does not hold yet. The Docker runtime's fixture is a
// real registry on the loopback (internal/test/registry); the fake's is its
// in-memory one.
type PullFixture struct {
	// Open is served to anyone.
	Open string
	// Private is served only to a pull that presents Auth.
	Private string
	Auth    container.RegistryAuth
	// Missing is a reference the registry of Open does not serve.
	Missing string
}

// RunPullSuite runs the pull behaviours against rt. Each image of f is
// pulled once, so the cases run in order.
func RunPullSuite(t *testing.T, rt container.Runtime, f PullFixture) {
	t.Run("PullsAnImageItLacks", func(t *testing.T) { pullsAnImageItLacks(t, rt, f) })
	t.Run("RefusedCredentialsAreUnauthorizedAndNotShown", func(t *testing.T) { refusedCredentialsAreUnauthorized(t, rt, f) })
	t.Run("PullsWithCredentials", func(t *testing.T) { pullsWithCredentials(t, rt, f) })
	t.Run("AnImageTheRegistryLacksIsNotFound", func(t *testing.T) { anImageTheRegistryLacksIsNotFound(t, rt, f) })
}

func pullsAnImageItLacks(t *testing.T, rt container.Runtime, f PullFixture) {
	ctx := Ctx(t)
	if ok, err := rt.ImageExists(ctx, f.Open); err != nil || ok {
		t.Fatalf("before the pull ImageExists(%s) = %v, %v; want false", f.Open, ok, err)
	}
	if err := rt.PullImage(ctx, f.Open, container.PullOptions{}); err != nil {
		t.Fatalf("PullImage(%s) = %v", f.Open, err)
	}
	if ok, err := rt.ImageExists(ctx, f.Open); err != nil || !ok {
		t.Fatalf("after the pull ImageExists(%s) = %v, %v; want true", f.Open, ok, err)
	}
	// Pulling what the engine holds is no error.
	if err := rt.PullImage(ctx, f.Open, container.PullOptions{}); err != nil {
		t.Fatalf("second PullImage(%s) = %v", f.Open, err)
	}
}

func refusedCredentialsAreUnauthorized(t *testing.T, rt container.Runtime, f PullFixture) {
	ctx := Ctx(t)
	wrong := f.Auth
	wrong.Password = "not-" + f.Auth.Password
	for name, auth := range map[string]*container.RegistryAuth{"none": nil, "wrong": &wrong} {
		err := rt.PullImage(ctx, f.Private, container.PullOptions{Auth: auth})
		if !container.IsUnauthorized(err) {
			t.Fatalf("PullImage(%s) with %s credentials = %v; want an Unauthorized error", f.Private, name, err)
		}
		if !strings.Contains(err.Error(), f.Private) {
			t.Errorf("the refusal does not name the image %s: %v", f.Private, err)
		}
		if strings.Contains(err.Error(), wrong.Password) || strings.Contains(err.Error(), f.Auth.Password) {
			t.Errorf("the refusal shows a password: %v", err)
		}
		if container.IsUnreachable(err) {
			t.Errorf("a registry's refusal marks the engine unreachable: %v", err)
		}
	}
	if ok, err := rt.ImageExists(ctx, f.Private); err != nil || ok {
		t.Fatalf("after refused pulls ImageExists(%s) = %v, %v; want false", f.Private, ok, err)
	}
}

func pullsWithCredentials(t *testing.T, rt container.Runtime, f PullFixture) {
	ctx := Ctx(t)
	auth := f.Auth
	var progressed int64
	if err := rt.PullImage(ctx, f.Private, container.PullOptions{Auth: &auth, Progress: func(n int64) {
		if n < progressed {
			t.Errorf("progress went back from %d to %d bytes", progressed, n)
		}
		progressed = n
	}}); err != nil {
		t.Fatalf("PullImage(%s) with its credentials = %v", f.Private, err)
	}
	if ok, err := rt.ImageExists(ctx, f.Private); err != nil || !ok {
		t.Fatalf("after the pull ImageExists(%s) = %v, %v; want true", f.Private, ok, err)
	}
}

func anImageTheRegistryLacksIsNotFound(t *testing.T, rt container.Runtime, f PullFixture) {
	err := rt.PullImage(Ctx(t), f.Missing, container.PullOptions{})
	if !container.IsNotFound(err) || !strings.Contains(err.Error(), f.Missing) {
		t.Fatalf("PullImage(%s) = %v; want a NotFound error naming the image", f.Missing, err)
	}
}
