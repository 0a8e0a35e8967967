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

// TestSourcesThatDisagreeAreRefused asks for an image that two sources
// hold under the same tag but with different content: the copy is refused
// as ambiguous, naming both, and nothing is saved or loaded.
func TestSourcesThatDisagreeAreRefused(t *testing.T) {
	local, other, target := &counting{Runtime: fake.New(nil)}, &counting{Runtime: fake.New(nil)}, fake.New(nil)
	local.AddImage(ref, []byte("the node image"))
	other.AddImage(ref, []byte("another image, retagged"))
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "other": other, "target": target}), 0, w.notify, nil)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	c.Ensure("target", ref, []string{"other", engines.Local}, m)
	w.next(t)
	st := c.Ensure("target", ref, []string{"other", engines.Local}, m)
	var ambiguous *imagecopy.AmbiguousImageError
	if !errors.As(st.Err, &ambiguous) || len(ambiguous.IDs) != 2 || !strings.Contains(st.Err.Error(), "the manager's own") {
		t.Fatalf("want an AmbiguousImageError naming both engines, got %+v", st)
	}
	if saves := local.saves.Load() + other.saves.Load(); saves != 0 {
		t.Fatalf("%d archives were saved for an ambiguous image", saves)
	}
	if ok, _ := target.ImageExists(t.Context(), ref); ok {
		t.Fatal("an ambiguous image reached the target")
	}
}

// retagging is a source whose tag is moved to another image as the copy
// saves it, as a user's docker tag would.
type retagging struct{ *fake.Runtime }

func (r retagging) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	r.AddImage(ref, []byte("retagged meanwhile"))
	return r.Runtime.SaveImages(ctx, refs)
}

// TestACopyIsPinnedToTheImageNotTheTag moves the tag on the source while
// the copy runs: the target gets the image the tag named when the copy
// chose it.
func TestACopyIsPinnedToTheImageNotTheTag(t *testing.T) {
	local, target := retagging{fake.New(nil)}, fake.New(nil)
	local.AddImage(ref, []byte("the node image"))
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "target": target}), 0, w.notify, nil)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	c.Ensure("target", ref, []string{engines.Local}, m)
	w.next(t)
	if st := c.Ensure("target", ref, []string{engines.Local}, m); st.Err != nil {
		t.Fatalf("the copy failed: %v", st.Err)
	}
	if got, err := target.ImageID(t.Context(), ref); err != nil || got != fake.ImageIDOf([]byte("the node image")) {
		t.Fatalf("the target's %s is image %s (%v), want the one the copy chose", ref, got, err)
	}
}

// tampering is a source whose archives hold other bytes than the image
// asked for, as a compromised engine or a man in the middle would send.
type tampering struct {
	*fake.Runtime
	other *fake.Runtime
}

func (r tampering) SaveImages(ctx context.Context, _ []string) (io.ReadCloser, error) {
	return r.other.SaveImages(ctx, []string{fake.ImageIDOf([]byte("tampered"))})
}

// TestAnArchiveThatIsNotTheImageIsRefused copies from a source whose
// archive is not the image its ID names: the copy fails with an
// ImageMismatchError and the target's tag is never set.
func TestAnArchiveThatIsNotTheImageIsRefused(t *testing.T) {
	local, target := tampering{Runtime: fake.New(nil), other: fake.New(nil)}, fake.New(nil)
	local.AddImage(ref, []byte("the node image"))
	local.other.AddImage("x", []byte("tampered"))
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Named(map[string]container.Runtime{engines.Local: local, "target": target}), 0, w.notify, nil)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	c.Ensure("target", ref, []string{engines.Local}, m)
	w.next(t)
	st := c.Ensure("target", ref, []string{engines.Local}, m)
	var mismatch *imagecopy.ImageMismatchError
	if !errors.As(st.Err, &mismatch) || mismatch.Want != fake.ImageIDOf([]byte("the node image")) {
		t.Fatalf("want an ImageMismatchError, got %+v", st)
	}
	if ok, _ := target.ImageExists(t.Context(), ref); ok {
		t.Fatal("the target got the tag on bytes that are not the image")
	}
}
