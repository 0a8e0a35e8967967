package fake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

func TestBounds(t *testing.T) {
	runtimetest.RunBounds(t, fake.New(nil), "fake/busybox:test")
}

// TestExecHandlerOutputIsBounded shows that what a test's exec handler
// returns meets the same bound as the Docker runtime's output.
func TestExecHandlerOutputIsBounded(t *testing.T) {
	rt := fake.New(nil)
	e := runtimetest.NewEnv(t, rt, "img", container.IPv4)
	m := e.Running(t, "handler")
	rt.SetExecHandler(func(context.Context, container.Machine, map[string][]byte, container.ExecInput, []byte) (container.ExecResult, bool) {
		return container.ExecResult{Stdout: []byte(strings.Repeat("o", 300)), Stderr: []byte("short")}, true
	})
	res, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{Cmd: []string{"anything"}, MaxOutput: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 100 || string(res.Stderr) != "short" || !res.Truncated {
		t.Fatalf("got %d bytes of stdout, stderr %q, Truncated=%v", len(res.Stdout), res.Stderr, res.Truncated)
	}
}
