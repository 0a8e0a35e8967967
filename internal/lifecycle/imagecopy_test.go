package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// TestLaunchCopiesAMissingImageToItsEngine launches machines on a
// ContainerEngine that lacks their image: one whose image the manager's
// own engine holds waits, CopyingImage, for the copy and then launches;
// one whose image no engine holds is told so, with why no copy was made.
func TestLaunchCopiesAMissingImageToItsEngine(t *testing.T) {
	for _, tc := range []struct {
		name, image    string
		wantReason     string
		wantAfterWake  string
		wantMessageHas string
	}{
		{name: "held by the manager's own engine", image: "capct/node:v1.35.9",
			wantAfterWake: infrav1.SucceededReason},
		{name: "held by no engine", image: "capct/node:v0.0.0-nowhere",
			wantAfterWake: infrav1.ImageNotOnHostReason, wantMessageHas: "no other engine of the cluster holds it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, cloudConfig)
			ctx := context.Background()
			local := fakeruntime.New(nil)
			local.AddImage("capct/node:v1.35.9", []byte("node image"))
			woken := make(chan types.NamespacedName, 1)
			e.deps.Images = imagecopy.New(ctx, engines.Named(map[string]container.Runtime{engines.Local: local, "engine-b": e.runtime}), 0,
				func(k types.NamespacedName) { woken <- k }, nil)
			s := e.scope()
			e.onEngine(s, "engine-b", local)
			s.ContainerMachine.Spec.Image = tc.image
			// Copies alone: internal/machineprovider tests the pulls.
			s.ContainerMachine.Spec.ImagePullPolicy = infrav1.ImagePullNever

			if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.CopyingImageReason)
			if msg := condition(s, infrav1.LaunchedCondition).Message; !strings.Contains(msg, tc.image) || !strings.Contains(msg, "engine-b") {
				t.Fatalf("the condition does not name the image and the engine: %s", msg)
			}
			select {
			case <-woken:
			case <-time.After(10 * time.Second):
				t.Fatal("the machine was not woken when the copy ended")
			}
			if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			want := metav1.ConditionFalse
			if tc.wantAfterWake == infrav1.SucceededReason {
				want = metav1.ConditionTrue
			}
			wantCondition(t, s, infrav1.LaunchedCondition, want, tc.wantAfterWake)
			if msg := condition(s, infrav1.LaunchedCondition).Message; !strings.Contains(msg, tc.wantMessageHas) {
				t.Fatalf("the condition does not say %q: %s", tc.wantMessageHas, msg)
			}
		})
	}
}

// TestLaunchOnTheManagersEngineCopiesNothing keeps the rule of one host:
// an image missing on the manager's own engine is the admin's to load.
func TestLaunchOnTheManagersEngineCopiesNothing(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	other := fakeruntime.New(nil)
	other.AddImage("capct/node:v1.35.9", []byte("node image"))
	e.deps.Images = imagecopy.New(ctx, engines.Named(map[string]container.Runtime{engines.Local: e.runtime, "engine-b": other}), 0, func(types.NamespacedName) {}, nil)
	s := e.scope()
	s.ContainerMachine.Spec.Image = "capct/node:v1.35.9"
	s.ContainerMachine.Spec.ImagePullPolicy = infrav1.ImagePullNever
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ImageNotOnHostReason)
}
