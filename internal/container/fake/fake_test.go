package fake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

func TestSuite(t *testing.T) {
	rt := fake.New(nil)
	rt.AddImage("fake/busybox:test", []byte("busybox"))
	runtimetest.RunSuite(t, func(*testing.T) runtimetest.Runtime { return rt }, "fake/busybox:test")
}

func TestFailNextAndOutOfBandRemoval(t *testing.T) {
	rt := fake.New(nil)
	e := runtimetest.NewEnv(t, rt, "img", container.IPv4)
	boom := container.NewError("start", "container", "x", container.KindTransient, errors.New("boom"))
	rt.FailNext(fake.OpStart, boom)
	ctx := context.Background()
	if _, err := rt.CreateMachine(ctx, e.Spec("m")); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, e.Spec("m").Name, e.Owns("m")); !container.IsTransient(err) {
		t.Fatalf("want injected transient error, got %v", err)
	}
	evctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, _ := rt.Events(evctx, map[string]string{container.LabelClusterID: e.Owner.ClusterID})
	if err := rt.Start(ctx, e.Spec("m").Name, e.Owns("m")); err != nil {
		t.Fatal(err)
	}
	if !rt.RemoveOutOfBand(e.Spec("m").Name) {
		t.Fatal("not removed")
	}
	var got []container.EventType
	for len(got) < 3 {
		select {
		case ev := <-ch:
			got = append(got, ev.Type)
		case <-time.After(time.Second):
			t.Fatalf("events %v", got)
		}
	}
	if got[2] != container.EventDestroy {
		t.Fatalf("events %v", got)
	}
	if _, err := rt.Inspect(ctx, e.Spec("m").Name); !container.IsNotFound(err) {
		t.Fatalf("want not found, got %v", err)
	}
}

func TestPreloadImages(t *testing.T) {
	rt := fake.New(nil)
	e := runtimetest.NewEnv(t, rt, "img", container.IPv4)
	rt.AddImage("registry.k8s.io/pause:3.10", []byte("pause-bits"))
	m := e.Running(t, "node")
	if err := container.PreloadImages(context.Background(), rt, m.Name, e.Owns("node"), []string{"registry.k8s.io/pause:3.10"}); err != nil {
		t.Fatal(err)
	}
	calls := rt.ExecCalls()
	last := calls[len(calls)-1]
	if last.Cmd[0] != "ctr" || len(last.Stdin) == 0 {
		t.Fatalf("preload exec %+v", last)
	}
}

// TestForgetExecCalls: a runtime told to forget its Exec history still
// runs the commands but keeps none of them.
func TestForgetExecCalls(t *testing.T) {
	rt := fake.New(nil)
	e := runtimetest.NewEnv(t, rt, "img", container.IPv4)
	m := e.Running(t, "forget")
	run := func() {
		t.Helper()
		res, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v, exit code %d", err, res.ExitCode)
		}
	}
	run()
	if n := len(rt.ExecCalls()); n != 1 {
		t.Fatalf("recorded %d calls, want 1", n)
	}
	rt.ForgetExecCalls()
	run()
	if n := len(rt.ExecCalls()); n != 0 {
		t.Fatalf("recorded %d calls after ForgetExecCalls, want none", n)
	}
}

// TestTagImageNeverMovesATag checks the fake as the Docker test of the
// same name checks the engine.
func TestTagImageNeverMovesATag(t *testing.T) {
	rt := fake.New(nil)
	rt.AddImage("img", []byte("the image"))
	rt.AddImage("other", []byte("another image"))
	ctx := context.Background()
	if err := rt.TagImage(ctx, fake.ImageIDOf([]byte("another image")), "img"); !container.IsConflict(err) {
		t.Fatalf("want a conflict moving img to another image, got %v", err)
	}
	if got, err := rt.ImageID(ctx, "img"); err != nil || got != fake.ImageIDOf([]byte("the image")) {
		t.Fatalf("img names %q (%v) after the refused tag", got, err)
	}
}

// TestABootstrapRunDiesWithItsContainer re-creates a container under the
// same name while a bootstrap run is in a step: the run, which lives in the
// first container, writes nothing into the second.
func TestABootstrapRunDiesWithItsContainer(t *testing.T) {
	rt := fake.New(nil)
	e := runtimetest.NewEnv(t, rt, "img", container.IPv4)
	ctx := context.Background()
	m := e.Running(t, "swapped")
	inStep, release := make(chan struct{}), make(chan struct{})
	rt.SetExecHandler(func(_ context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		if in.Cmd[0] != "block" {
			return container.ExecResult{}, false
		}
		close(inStep)
		<-release
		return container.ExecResult{Stdout: []byte("written by the first container's run")}, true
	})
	for _, f := range provisioning.Script([]provisioning.Step{{Description: "block", Command: []string{"block"}}}) {
		if err := rt.WriteFile(ctx, m.Name, e.Owns("swapped"), f.Path, f.Content, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.Exec(ctx, m.Name, e.Owns("swapped"), container.ExecInput{Cmd: provisioning.LaunchCommand(1)}); err != nil {
		t.Fatal(err)
	}
	<-inStep
	rt.RemoveOutOfBand(m.Name)
	again := e.Running(t, "swapped")
	close(release)
	marks := provisioning.Marks(1)
	for range 50 {
		for _, p := range []string{marks.Output, marks.Exit} {
			if _, err := rt.ReadFile(ctx, again.Name, e.Owns("swapped"), p); !container.IsNotFound(err) {
				t.Fatalf("the first container's run wrote %s into the second: %v", p, err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
