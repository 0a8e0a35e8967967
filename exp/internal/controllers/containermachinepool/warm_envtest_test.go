package containermachinepool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// warmState is the pool's warm machines: their ContainerMachines, and the
// ID of each one's container ("" while it has none).
type warmState struct {
	cms        []infrav1.ContainerMachine
	containers map[string]string
}

func (f *fixture) warm(ctx context.Context) (warmState, error) {
	ws := warmState{containers: map[string]string{}}
	list := &infrav1.ContainerMachineList{}
	if err := env.Client.List(ctx, list, client.InNamespace(f.ns), client.MatchingLabels{
		clusterv1.ClusterNameLabel: f.name, infrav1.WarmPoolLabel: format.MustFormatValue(f.mp.Name),
	}); err != nil {
		return ws, err
	}
	ws.cms = list.Items
	for _, cm := range ws.cms {
		c, err := rt.Inspect(ctx, naming.ContainerName(f.ns, f.name, cm.Name))
		switch {
		case container.IsNotFound(err):
			ws.containers[cm.Name] = ""
		case err != nil:
			return ws, err
		default:
			ws.containers[cm.Name] = c.ID
		}
	}
	return ws, nil
}

func (ws warmState) names() []string {
	return names(ws.cms, func(c infrav1.ContainerMachine) string { return c.Name })
}

// booted checks that the pool keeps n warm machines, each with its running
// container, none with a Machine or bootstrap data run, and that the pool
// counts them as warm and not as replicas.
func (f *fixture) warmBooted(n int) func() (warmState, error) {
	return func() (warmState, error) {
		ctx := ctxT(f.t)
		ws, err := f.warm(ctx)
		if err != nil {
			return ws, err
		}
		if len(ws.cms) != n {
			return ws, fmt.Errorf("want %d warm machines, got %v", n, ws.names())
		}
		for _, cm := range ws.cms {
			if !cm.DeletionTimestamp.IsZero() {
				return ws, fmt.Errorf("warm machine %s is being deleted", cm.Name)
			}
			if ws.containers[cm.Name] == "" {
				return ws, fmt.Errorf("warm machine %s has no container", cm.Name)
			}
			if !conditions.IsTrue(&cm, infrav1.ContainerRunningCondition) {
				return ws, fmt.Errorf("warm machine %s: ContainerRunning is not True: %v", cm.Name, conditions.Get(&cm, infrav1.ContainerRunningCondition))
			}
			if c := conditions.Get(&cm, infrav1.BootstrappedCondition); c == nil || c.Reason != infrav1.WarmReason {
				return ws, fmt.Errorf("warm machine %s: Bootstrapped is %v, want reason %s", cm.Name, c, infrav1.WarmReason)
			}
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: cm.Name}, &clusterv1.Machine{})
			if !apierrors.IsNotFound(err) {
				f.t.Fatalf("warm machine %s has a Machine (or the read failed: %v): a warm machine must never be a Machine", cm.Name, err)
			}
		}
		pool := &expinfrav1.ContainerMachinePool{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), pool); err != nil {
			return ws, err
		}
		if int(pool.Status.WarmReplicas) != n {
			return ws, fmt.Errorf("status.warmReplicas %d, want %d", pool.Status.WarmReplicas, n)
		}
		return ws, nil
	}
}

func (f *fixture) setWarmPool(size int32, image string) {
	f.t.Helper()
	ctx := ctxT(f.t)
	pool := &expinfrav1.ContainerMachinePool{}
	must(f.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), pool))
	before := pool.DeepCopy()
	pool.Spec.WarmPool.Size = size
	pool.Spec.Template.Image = image
	must(f.t, env.Client.Patch(ctx, pool, client.MergeFrom(before)))
}

// TestWarmPool runs a pool with two warm machines through Cluster API's
// MachinePool controller: they boot without a Machine; they survive a
// manager restart as they are; a scale-out to three joins both, in the
// containers they booted in, and creates only the third; no new warm
// machine is made while the members come up; a scale-in to zero refills
// the warm pool; a new image replaces the warm machines; the pool's
// deletion removes them and their containers.
func TestWarmPool(t *testing.T) {
	st := startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	f.setWarmPool(2, "")

	var ws warmState
	eventually(t, settle, "two warm machines booted", func() (err error) { ws, err = f.warmBooted(2)(); return err })
	eventually(t, settle, "no member", f.settledBeside(0, 2))

	// A new manager finds them as they are: no warm machine made again,
	// no container restarted.
	st.stop()
	startStack(t)
	f.quiet(3 * time.Second)
	after, err := f.warmBooted(2)()
	must(t, err)
	if fmt.Sprint(after.containers) != fmt.Sprint(ws.containers) {
		t.Fatalf("a manager restart changed the warm machines: %v, then %v", ws.containers, after.containers)
	}

	f.scale(3)
	eventually(t, settle, "3 replicas", f.settled(3))
	s := f.state()
	for name, id := range ws.containers {
		if !slices.Contains(cmNames(s), name) {
			t.Fatalf("warm machine %s did not join the pool; members %v", name, cmNames(s))
		}
		c, err := rt.Inspect(ctxT(t), naming.ContainerName(f.ns, f.name, name))
		must(t, err)
		if c.ID != id {
			t.Fatalf("warm machine %s joined in a new container %s, not the one it booted in (%s)", name, c.ID, id)
		}
	}
	// The members are provisioned but not Ready (no kubelet here): the
	// pool does not warm new machines while a scale-out comes up.
	f.quiet(3 * time.Second)
	if ws, err := f.warm(ctxT(t)); err != nil || len(ws.cms) != 0 {
		t.Fatalf("warm machines were made while the scale-out came up: %v (%v)", ws.names(), err)
	}

	f.scale(0)
	eventually(t, settle, "the warm pool refilled", func() (err error) { ws, err = f.warmBooted(2)(); return err })
	eventually(t, settle, "0 replicas", f.settledBeside(0, 2))

	image := "capct/node:" + k8sVersion + "-custom"
	f.setWarmPool(2, image)
	eventually(t, settle, "the warm machines replaced with the new image", func() error {
		now, err := f.warmBooted(2)()
		if err != nil {
			return err
		}
		for _, cm := range now.cms {
			if cm.Spec.Image != image || slices.Contains(ws.names(), cm.Name) {
				return fmt.Errorf("warm machine %s (image %q) was made before the change", cm.Name, cm.Spec.Image)
			}
		}
		return nil
	})

	ctx := ctxT(t)
	must(t, env.Client.Delete(ctx, f.mp))
	eventually(t, settle, "the pool and its warm machines to go", func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), &expinfrav1.ContainerMachinePool{})
		if err == nil {
			return errors.New("the ContainerMachinePool still exists")
		}
		left, err := rt.List(ctx, map[string]string{container.LabelPool: format.MustFormatValue(f.mp.Name), container.LabelNamespace: f.ns})
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d containers of the pool are left", len(left))
		}
		ws, err := f.warm(ctx)
		if err != nil {
			return err
		}
		if len(ws.cms) > 0 {
			return fmt.Errorf("warm machines are left: %v", ws.names())
		}
		return nil
	})
}
