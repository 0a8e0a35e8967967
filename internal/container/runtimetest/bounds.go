package runtimetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// RunBounds checks that what a container returns costs the manager bounded
// memory, and that errors never repeat a command's arguments or stdin,
// which may hold bootstrap scripts and secrets. image is as for RunSuite.
func RunBounds(t *testing.T, rt Runtime, image string) {
	e := NewEnv(t, rt, image, container.IPv4)
	spec := e.Spec("bounds")
	// A node's spec, for its tmpfs /run, which files are read from by exec.
	spec.KindNode = true
	ctx := Ctx(t)
	if _, err := rt.CreateMachine(ctx, spec); err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	if err := rt.Start(ctx, spec.Name, e.Owns("bounds")); err != nil {
		t.Fatalf("Start: %v", err)
	}
	counting := func(n int) []byte {
		var b bytes.Buffer
		for i := 0; b.Len() < n; i++ {
			b.WriteString(strings.Repeat(string(rune('a'+i%26)), 7) + "\n")
		}
		return b.Bytes()[:n]
	}

	t.Run("exec keeps the tail of an output over its bound", func(t *testing.T) {
		in := counting(10_000)
		res, err := rt.Exec(Ctx(t), spec.Name, e.Owns("bounds"), container.ExecInput{Cmd: []string{"cat"}, Stdin: bytes.NewReader(in), MaxOutput: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Truncated || !bytes.Equal(res.Stdout, in[len(in)-1000:]) {
			t.Fatalf("want the last 1000 bytes and Truncated, got %d bytes, Truncated=%v", len(res.Stdout), res.Truncated)
		}
	})
	t.Run("exec returns an output within its bound whole", func(t *testing.T) {
		in := counting(1000)
		res, err := rt.Exec(Ctx(t), spec.Name, e.Owns("bounds"), container.ExecInput{Cmd: []string{"cat"}, Stdin: bytes.NewReader(in), MaxOutput: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if res.Truncated || !bytes.Equal(res.Stdout, in) {
			t.Fatalf("want all 1000 bytes, got %d bytes, Truncated=%v", len(res.Stdout), res.Truncated)
		}
	})
	t.Run("exec bounds output by MaxExecOutput by default", func(t *testing.T) {
		in := counting(container.MaxExecOutput + 4096)
		res, err := rt.Exec(Ctx(t), spec.Name, e.Owns("bounds"), container.ExecInput{Cmd: []string{"cat"}, Stdin: bytes.NewReader(in)})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Truncated || len(res.Stdout) != container.MaxExecOutput {
			t.Fatalf("want %d bytes and Truncated, got %d bytes, Truncated=%v", container.MaxExecOutput, len(res.Stdout), res.Truncated)
		}
	})
	for _, p := range []string{"/etc/capct/big", "/run/capct/big"} {
		t.Run("ReadFile refuses a file over MaxFileSize at "+p, func(t *testing.T) {
			ctx := Ctx(t)
			if err := rt.WriteFile(ctx, spec.Name, e.Owns("bounds"), p, counting(container.MaxFileSize+1), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := rt.ReadFile(ctx, spec.Name, e.Owns("bounds"), p); !container.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %d bytes and %v", len(b), err)
			}
		})
	}

	secret := "capct-secret-" + RandomSuffix()
	stopped := e.Spec("stopped")
	if _, err := rt.CreateMachine(ctx, stopped); err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	for _, tc := range []struct{ name, container, machine string }{
		{name: "a missing container", container: e.Prefix + "-missing", machine: "missing"},
		{name: "a container that is not running", container: stopped.Name, machine: "stopped"},
	} {
		t.Run("a failed exec in "+tc.name+" names no argument and no stdin", func(t *testing.T) {
			_, err := rt.Exec(Ctx(t), tc.container, e.Owns(tc.machine), container.ExecInput{
				Cmd: []string{"sh", "-c", "echo " + secret}, Stdin: strings.NewReader(secret),
			})
			if err == nil {
				t.Fatal("want an error")
			}
			if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), `"sh"`) {
				t.Fatalf("want an error naming the program sh and not the script: %v", err)
			}
		})
	}
}
