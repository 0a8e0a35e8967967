package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// This test needs no engine: it runs without the engine build tag.

func TestUnreachableEngineIsTypedAndBounded(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent.sock")
	rt, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	owner := container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id"}
	checks := map[string]func() error{
		"Inspect": func() error { _, err := rt.Inspect(ctx, "c1-cp-0"); return err },
		"EnsureNetwork": func() error {
			_, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: "c1", Owner: owner})
			return err
		},
		"Exec": func() error {
			_, err := rt.Exec(ctx, "c1-cp-0", owner.ForMachine("cp-0"), container.ExecInput{Cmd: []string{"true"}})
			return err
		},
		"Events": func() error { _, err := rt.Events(ctx, nil); return err },
	}
	for name, f := range checks {
		err := f()
		if !container.IsUnreachable(err) {
			t.Fatalf("%s: want an unreachable error, got %v", name, err)
		}
		if !strings.Contains(err.Error(), "failed to") {
			t.Fatalf("%s: unreadable error %q", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s, past the context deadline", d)
	}
}
