package imagecopy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// heldPull is an engine whose pulls wait until release is closed.
type heldPull struct {
	*fake.Runtime
	release chan struct{}
}

func (h *heldPull) PullImage(ctx context.Context, ref string, opts container.PullOptions) error {
	<-h.release
	return h.Runtime.PullImage(ctx, ref, opts)
}

// TestAPullRunsOncePerEngineAndImage: machines that ask while a pull runs
// join it, all are woken at its end, and the engine pulled once.
func TestAPullRunsOncePerEngineAndImage(t *testing.T) {
	rt := &heldPull{Runtime: fake.New(nil), release: make(chan struct{})}
	rt.AddRegistryImage(ref, []byte("node"))
	w := make(woken, 2)
	c := imagecopy.New(t.Context(), engines.Single(rt), 0, w.notify, nil)
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	asked := 0
	auth := func() (*container.RegistryAuth, error) { asked++; return nil, nil }
	if st := c.Pull(engines.Local, ref, auth, a); !st.Pulling {
		t.Fatalf("the first request must start a pull: %+v", st)
	}
	if st := c.Pull(engines.Local, ref, auth, b); !st.Pulling {
		t.Fatalf("a second request during the pull must join it: %+v", st)
	}
	close(rt.release)
	got := map[types.NamespacedName]bool{w.next(t): true, w.next(t): true}
	if !got[a] || !got[b] {
		t.Fatalf("woken %v; want both machines", got)
	}
	if n := len(rt.PullCalls()); n != 1 || asked != 1 {
		t.Fatalf("%d pulls, credentials asked %d times; want 1 and 1", n, asked)
	}
	if ok, _ := rt.ImageExists(t.Context(), ref); !ok {
		t.Fatal("the pull did not put the image on the engine")
	}
}

// TestAFailedPullBacksOff: a failure is reported, not retried, until its
// backoff ends; the backoff doubles with each failure in a row, up to
// MaxPullRetryAfter; credentials that cannot be had start no pull.
func TestAFailedPullBacksOff(t *testing.T) {
	rt := fake.New(nil)
	clk := clocktesting.NewFakeClock(time.Now())
	w := make(woken, 8)
	c := imagecopy.New(t.Context(), engines.Single(rt), 0, w.notify, clk)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}

	wait := imagecopy.RetryAfter
	for failure := 1; failure <= 5; failure++ {
		if st := c.Pull(engines.Local, ref, nil, m); !st.Pulling {
			t.Fatalf("pull %d did not start: %+v", failure, st)
		}
		w.next(t)
		st := c.Pull(engines.Local, ref, nil, m)
		var pullErr *imagecopy.PullError
		if !errors.As(st.Err, &pullErr) || !container.IsNotFound(st.Err) || !strings.Contains(st.Err.Error(), ref) {
			t.Fatalf("after pull %d: %+v; want a PullError naming the image", failure, st)
		}
		clk.Step(wait - time.Second)
		if st := c.Pull(engines.Local, ref, nil, m); st.Pulling || st.Err == nil {
			t.Fatalf("within the backoff of failure %d (%s) a pull started: %+v", failure, wait, st)
		}
		clk.Step(time.Second)
		wait = min(2*wait, imagecopy.MaxPullRetryAfter)
	}
	if n := len(rt.PullCalls()); n != 5 {
		t.Fatalf("%d pulls; want 5", n)
	}

	refused := errors.New("spec.imagePullSecretRef: failed to read Secret ns/pull")
	other := "registry.example.com/other:v1"
	if st := c.Pull(engines.Local, other, func() (*container.RegistryAuth, error) { return nil, refused }, m); !errors.Is(st.Err, refused) {
		t.Fatalf("credentials that cannot be had = %+v; want their error", st)
	}
	if n := len(rt.PullCalls()); n != 5 {
		t.Fatal("a pull started without its credentials")
	}
}

// TestObtainNamesEveryImageItCouldNotHave: once nothing is under way, the
// wait lists each image that is missing, ImagePullFailed when a pull
// failed, ImageNotOnHost when none was allowed.
func TestObtainNamesEveryImageItCouldNotHave(t *testing.T) {
	rt := fake.New(nil)
	w := make(woken, 4)
	c := imagecopy.New(t.Context(), engines.Single(rt), 0, w.notify, nil)
	m := types.NamespacedName{Namespace: "ns", Name: "m"}
	req := imagecopy.Request{Target: engines.Local, Waiter: m, Missing: []imagecopy.Missing{
		{Field: "spec.image", Ref: ref, Pull: true, PolicyField: "spec.imagePullPolicy"},
		{Field: "spec.preLoadImages[0]", Ref: "app:v1", PolicyField: "spec.imagePullPolicy"},
	}}
	if got := c.Obtain(req); got.Reason != infrav1.PullingImageReason || !strings.Contains(got.Message, ref) {
		t.Fatalf("Obtain = %+v; want PullingImage of %s", got, ref)
	}
	w.next(t)
	got := c.Obtain(req)
	if got.Reason != infrav1.ImagePullFailedReason || !strings.Contains(got.Message, "spec.image: the manager's engine could not pull image") ||
		!strings.Contains(got.Message, `spec.preLoadImages[0]: image "app:v1" is not on the container host and spec.imagePullPolicy is Never`) {
		t.Fatalf("Obtain = %+v; want ImagePullFailed naming both images", got)
	}
	req.Missing = req.Missing[1:]
	if got := c.Obtain(req); got.Reason != infrav1.ImageNotOnHostReason {
		t.Fatalf("Obtain of an image never pulled = %+v; want ImageNotOnHost", got)
	}
}
