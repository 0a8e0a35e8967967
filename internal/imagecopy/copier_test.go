package imagecopy_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// heldLoad is an engine whose loads wait until release is closed.
type heldLoad struct {
	*fake.Runtime
	release chan struct{}
}

func (h *heldLoad) LoadImages(ctx context.Context, tar io.Reader) error {
	<-h.release
	return h.Runtime.LoadImages(ctx, tar)
}

// counting is an engine that counts the archives it saves.
type counting struct {
	*fake.Runtime
	saves atomic.Int32
}

func (c *counting) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	c.saves.Add(1)
	return c.Runtime.SaveImages(ctx, refs)
}

const ref = "capct/node:v1.35.4"

// woken collects the machines the Copier wakes.
type woken chan types.NamespacedName

func (w woken) notify(m types.NamespacedName) { w <- m }

func (w woken) next(t *testing.T) types.NamespacedName {
	t.Helper()
	select {
	case m := <-w:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no machine was woken")
		return types.NamespacedName{}
	}
}

// TestCopiesOnceFromAnEngineThatHoldsTheImage asks for an image on an
// engine that lacks it: the copy comes from the first source that holds
// it, machines asking while it runs join it, and all are woken at its end.
func TestCopiesOnceFromAnEngineThatHoldsTheImage(t *testing.T) {
	local, empty, holder := fake.New(nil), &counting{Runtime: fake.New(nil)}, &counting{Runtime: fake.New(nil)}
	holder.AddImage(ref, []byte("the node image"))
	target := &heldLoad{Runtime: fake.New(nil), release: make(chan struct{})}
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "empty": empty, "holder": holder, "target": target}), 0, w.notify, nil)

	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	sources := []string{"target", "empty", "holder", engines.Local}
	if st := c.Ensure("target", ref, sources, a); !st.Copying {
		t.Fatalf("the first request must start a copy: %+v", st)
	}
	st := c.Ensure("target", ref, sources, b)
	if !st.Copying {
		t.Fatalf("a second request during the copy must join it: %+v", st)
	}
	close(target.release)
	got := map[types.NamespacedName]bool{w.next(t): true, w.next(t): true}
	if !got[a] || !got[b] {
		t.Fatalf("woken %v, want both waiters", got)
	}
	if ok, _ := target.ImageExists(t.Context(), ref); !ok {
		t.Fatal("the image is not on the target after the copy")
	}
	if ops := holder.saves.Load(); ops != 1 {
		t.Fatalf("the holder saved the image %d times, want once for both machines", ops)
	}
	if ops := empty.saves.Load(); ops != 0 {
		t.Fatalf("an engine without the image was asked to save it %d times", ops)
	}
}

// TestACopyWithoutASourceIsReportedThenRetried asks for an image no source
// holds: the failure names the engines asked, is reported without a new
// attempt until RetryAfter has passed, and then a copy starts again.
func TestACopyWithoutASourceIsReportedThenRetried(t *testing.T) {
	local, target := fake.New(nil), fake.New(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	w := make(woken, 4)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "target": target}), 0, w.notify, clk)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	c.Ensure("target", ref, []string{engines.Local}, m)
	w.next(t)
	st := c.Ensure("target", ref, []string{engines.Local}, m)
	var none *imagecopy.NoSourceError
	if !errors.As(st.Err, &none) || !strings.Contains(st.Err.Error(), "the manager's own") {
		t.Fatalf("want a NoSourceError naming the engine asked, got %+v", st)
	}
	clk.Step(imagecopy.RetryAfter)
	local.AddImage(ref, []byte("loaded since"))
	if st := c.Ensure("target", ref, []string{engines.Local}, m); !st.Copying {
		t.Fatalf("after RetryAfter the copy must start again: %+v", st)
	}
	w.next(t)
	if ok, _ := target.ImageExists(t.Context(), ref); !ok {
		t.Fatal("the retried copy did not put the image on the target")
	}
}

// TestACopyStopsAtTheSizeBound copies an image larger than the bound: the
// copy fails with ErrTooLarge and the target gets nothing.
func TestACopyStopsAtTheSizeBound(t *testing.T) {
	local, target := fake.New(nil), fake.New(nil)
	local.AddImage(ref, []byte(strings.Repeat("x", 64<<10)))
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "target": target}), 16<<10, w.notify, nil)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	c.Ensure("target", ref, []string{engines.Local}, m)
	w.next(t)
	st := c.Ensure("target", ref, []string{engines.Local}, m)
	if !errors.Is(st.Err, imagecopy.ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %+v", st)
	}
	if ok, _ := target.ImageExists(t.Context(), ref); ok {
		t.Fatal("an image over the bound was loaded")
	}
}
