//go:build engine

package docker_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

func TestBounds(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	runtimetest.RunBounds(t, rt, testImage(t, rt))
}

// TestExecStderrIsBounded covers the stream the shared suite cannot: the
// fake has no shell to write to stderr.
func TestExecStderrIsBounded(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	m := e.Running(t, "stderr")
	in := bytes.Repeat([]byte("0123456789"), 1000)
	res, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{
		Cmd: []string{"sh", "-c", "cat >&2; echo done"}, Stdin: bytes.NewReader(in), MaxOutput: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || !bytes.Equal(res.Stderr, in[len(in)-100:]) || string(res.Stdout) != "done\n" {
		t.Fatalf("stderr %d bytes, stdout %q, Truncated=%v", len(res.Stderr), res.Stdout, res.Truncated)
	}
}

// TestExecTimeoutNamesNoScript: a script that outlives its timeout fails in
// transport, and the error must not repeat the script.
func TestExecTimeoutNamesNoScript(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	m := e.Running(t, "timeout")
	secret := "capct-secret-" + runtimetest.RandomSuffix()
	_, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{
		Cmd: []string{"sh", "-c", "sleep 30 # " + secret}, Stdin: strings.NewReader(secret), Timeout: 300 * time.Millisecond,
	})
	if !container.IsTimeout(err) || strings.Contains(err.Error(), secret) {
		t.Fatalf("want a timeout that does not name the script, got %v", err)
	}
}
