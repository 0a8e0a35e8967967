//go:build realcluster

package mirror_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/test/registry"
	"github.com/capct/cluster-api-provider-container/test/mirror"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

const (
	// repo and tag are where the image goes in the test's registry; a
	// pod asks for it as docker.io's, which only the mirror can serve on
	// a host without internet.
	repo     = "library/busybox"
	tag      = "capct-mirror"
	podImage = "docker.io/" + repo + ":" + tag

	// defaultSource is the image pushed: the quickstart's probe image
	// (probe_image in hack/quickstart/quickstart.sh), busybox from the
	// host that its up builds and keeps on the host's engine. The test
	// flow passes it as MIRROR_SOURCE_IMAGE.
	defaultSource = "capct/busybox:quickstart"

	// newPod runs on the Node made after the change, oldPod on one made
	// before it.
	newPod = "capct-mirror-new"
	oldPod = "capct-mirror-old"

	// engineTimeout bounds a push, a tag, a log read on the host's engine.
	engineTimeout = time.Minute
)

// TestPodPullsThroughMirror sets the quickstart cluster's
// spec.registryMirrors to send docker.io to a registry on the cluster's
// network, scales the MachineDeployment up by one, and runs
// docker.io/library/busybox:capct-mirror with imagePullPolicy Always:
//   - on the new Node the pod must be Running within MIRROR_POD_TIMEOUT
//     (180 s), the registry's access log showing that Node's pull;
//   - on a Node made before the change (without the mirror's hosts.toml)
//     it must not run within MIRROR_NEGATIVE_WINDOW (20 s) and must show
//     ErrImagePull or ImagePullBackOff.
//
// Then the pods go, the mirrors are unset and the MachineDeployment is
// scaled back, its new machine first, so that the rest of the flow sees
// the Nodes of before. MIRROR_NODE_TIMEOUT (300 s) bounds each wait for
// Nodes.
func TestPodPullsThroughMirror(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-quickstart")
	podBound := realcluster.Seconds(t, "MIRROR_POD_TIMEOUT", 180)
	window := realcluster.Seconds(t, "MIRROR_NEGATIVE_WINDOW", 20)
	nodeBound := realcluster.Seconds(t, "MIRROR_NODE_TIMEOUT", 300)
	source := cmp.Or(os.Getenv("MIRROR_SOURCE_IMAGE"), defaultSource)
	ctx := t.Context()
	// The waits end a minute before go test's -timeout would panic, which
	// skips the cleanups: a failed run still puts the cluster back.
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Minute))
		defer cancel()
	}
	c := realcluster.Connect(t, env)
	engine := realcluster.NewEngine(t, "the engine", "")
	rt, err := docker.New()
	if err != nil {
		t.Fatalf("failed to build the engine's client: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	times := &timings{t: t}
	mdKey := client.ObjectKey{Namespace: env.Namespace, Name: env.Cluster + "-md-0"}

	// What is there now: the old Nodes must lack any mirror, and the
	// counts are what the scale-down must come back to.
	cc, err := c.ContainerCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Spec.RegistryMirrors) > 0 {
		t.Fatalf("ContainerCluster %s/%s already has spec.registryMirrors %+v: its Nodes may have a mirror, and the test's control on an old Node would prove nothing", cc.Namespace, cc.Name, cc.Spec.RegistryMirrors)
	}
	cluster, err := c.CAPICluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	network := naming.NetworkName(cluster, cc)
	md, err := machineDeployment(ctx, c.Mgmt, mdKey)
	if err != nil {
		t.Fatal(err)
	}
	replicas := ptr.Deref(md.Spec.Replicas, 0)
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := realcluster.CountNodes(nodes)
	oldNodes := mdNodes(nodes)
	if replicas == 0 || !before.Are(int(replicas), before.MachinePool) {
		t.Fatalf("want every Node Ready and %d MachineDeployment Nodes (MachineDeployment %s's replicas), got %s", replicas, mdKey, before)
	}
	t.Logf("cluster %s on network %s: %s; MachineDeployment Nodes %s", env.Cluster, network, before, strings.Join(oldNodes, " "))

	// 1. The registry, on the cluster's network for the nodes and on the
	// loopback for the push.
	start := time.Now()
	reg := registry.Start(t, rt, registry.Options{Network: network})
	times.add("registry started", start)
	t.Logf("registry %s at %s, on network %s at %s", reg.Container, reg.Host, network, reg.NetworkHost)

	// 2. The image, pushed by the host's engine, which treats a registry
	// on 127.0.0.0/8 as insecure (plain HTTP) without being told to.
	start = time.Now()
	if err := pushImage(ctx, rt, source, reg.Host+"/"+repo+":"+tag); err != nil {
		t.Fatal(err)
	}
	times.add("image pushed", start)

	// Whatever happens from here, the cluster is put back as far as it
	// can be: the quickstart's down follows a failure, and a success
	// puts it back itself (then this finds nothing to do).
	pb := &putBack{c: c, mdKey: mdKey, replicas: replicas}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := pb.run(ctx); err != nil {
			t.Errorf("failed to put the cluster back: %v", err)
		}
	})

	// 3. The mirror, then one more MachineDeployment Node, which gets it
	// as its first bootstrap steps.
	url := "http://" + reg.NetworkHost
	start = time.Now()
	if err := patchMirrors(ctx, c.Mgmt, cc, []any{map[string]any{"registry": "docker.io", "endpoints": []any{map[string]any{"url": url}}}}); err != nil {
		t.Fatal(err)
	}
	pb.mirrors = true
	if cc, err = c.ContainerCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if len(cc.Spec.RegistryMirrors) != 1 || len(cc.Spec.RegistryMirrors[0].Endpoints) != 1 || cc.Spec.RegistryMirrors[0].Endpoints[0].URL != url {
		t.Fatalf("ContainerCluster %s/%s has spec.registryMirrors %+v after the patch, want docker.io at %s", cc.Namespace, cc.Name, cc.Spec.RegistryMirrors, url)
	}
	t.Logf("ContainerCluster %s/%s: docker.io mirrored at %s", cc.Namespace, cc.Name, url)
	if err := scale(ctx, c.Mgmt, mdKey, replicas+1); err != nil {
		t.Fatal(err)
	}
	pb.scaled = true
	if err := c.WaitNodes(ctx, t, int(replicas)+1, before.MachinePool, nodeBound); err != nil {
		t.Fatalf("MachineDeployment %s scaled %d->%d: %v", mdKey, replicas, replicas+1, err)
	}
	times.add(fmt.Sprintf("MachineDeployment %d->%d, new Node Ready", replicas, replicas+1), start)
	if nodes, err = c.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, n := range mdNodes(nodes) {
		if !slices.Contains(oldNodes, n) {
			added = append(added, n)
		}
	}
	if len(added) != 1 {
		t.Fatalf("want one new MachineDeployment Node, got %v (before: %v)", added, oldNodes)
	}
	newNode, oldNode := added[0], oldNodes[0]
	pb.newNode = newNode
	t.Logf("new Node %s, with the mirror; old Node %s, without", newNode, oldNode)
	newAddrs := addresses(ctx, t, c, engine, newNode, network)
	oldAddrs := addresses(ctx, t, c, engine, oldNode, network)

	// 4. A pod on the new Node pulls through the mirror: the host has no
	// internet, so nothing else can serve docker.io's image.
	pb.pods = true
	start = time.Now()
	if err := createPod(ctx, c, newPod, newNode); err != nil {
		t.Fatal(err)
	}
	pod, err := waitPod(ctx, t, c, newPod, podBound, mirror.Running)
	if err != nil {
		t.Fatalf("pod %s on the new Node %s (mirror %s) not Running within %s: %v\n%s", newPod, newNode, url, podBound, err,
			diagnose(ctx, c, engine, rt, reg, newPod, newNode, newAddrs))
	}
	times.add("pod on the new Node Running", start)
	t.Logf("pod %s on %s: %s", newPod, newNode, mirror.PodDetail(pod))
	reqs, err := accessLog(ctx, rt, reg.Container)
	if err != nil {
		t.Fatal(err)
	}
	fromNew := mirror.From(reqs, newAddrs...)
	if !mirror.Pulled(fromNew, repo, tag) {
		t.Fatalf("pod %s runs, but registry %s's log shows no pull of %s:%s from the new Node %s (%v); its requests from there: %v; all: %v",
			newPod, reg.Container, repo, tag, newNode, newAddrs, fromNew, reqs)
	}
	t.Logf("registry %s served %s (%v): %v", reg.Container, newNode, newAddrs, fromNew)

	// 5. The control: on a Node made before the change, with no mirror
	// and no internet, the same pull must fail.
	start = time.Now()
	if err := createPod(ctx, c, oldPod, oldNode); err != nil {
		t.Fatal(err)
	}
	pullFailed := false
	pod, err = waitPod(ctx, t, c, oldPod, window, func(p *corev1.Pod) bool {
		pullFailed = pullFailed || mirror.PullFailed(p)
		return mirror.Running(p)
	})
	switch {
	case err == nil:
		t.Fatalf("pod %s on the old Node %s, which has no mirror, runs %s: the host reaches docker.io, or the Node had the image; %s\n%s",
			oldPod, oldNode, podImage, mirror.PodDetail(pod), diagnose(ctx, c, engine, rt, reg, oldPod, oldNode, oldAddrs))
	case ctx.Err() != nil:
		t.Fatal(err)
	case !pullFailed:
		t.Fatalf("pod %s on the old Node %s showed neither ErrImagePull nor ImagePullBackOff within %s: %v\n%s",
			oldPod, oldNode, window, err, diagnose(ctx, c, engine, rt, reg, oldPod, oldNode, oldAddrs))
	}
	times.add("pod on the old Node not Running (control window)", start)
	t.Logf("pod %s on %s, as it should be: %s", oldPod, oldNode, mirror.PodDetail(pod))
	if reqs, err = accessLog(ctx, rt, reg.Container); err != nil {
		t.Fatal(err)
	}
	if fromOld := mirror.From(reqs, oldAddrs...); len(fromOld) > 0 {
		t.Fatalf("registry %s was asked by the old Node %s (%v), which has no mirror: %v", reg.Container, oldNode, oldAddrs, fromOld)
	}

	// 6. Back as it was, the new machine removed first.
	start = time.Now()
	if err := pb.run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodes(ctx, t, int(replicas), before.MachinePool, nodeBound); err != nil {
		t.Fatalf("MachineDeployment %s scaled back to %d: %v", mdKey, replicas, err)
	}
	if nodes, err = c.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	if now := mdNodes(nodes); !slices.Equal(now, oldNodes) {
		t.Errorf("after the scale-down the MachineDeployment Nodes are %v, want those of before %v", now, oldNodes)
	}
	times.add(fmt.Sprintf("put back: pods deleted, mirrors unset, MachineDeployment %d->%d", replicas+1, replicas), start)
	times.report()
}

// putBack undoes what the test changed, each step once it was made; run
// is idempotent.
type putBack struct {
	c                     *realcluster.Clusters
	mdKey                 client.ObjectKey
	replicas              int32
	newNode               string
	pods, mirrors, scaled bool
}

func (p *putBack) run(ctx context.Context) error {
	var errs []error
	if p.pods {
		for _, name := range []string{newPod, oldPod} {
			if err := deletePod(ctx, p.c, name); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			p.pods = false
		}
	}
	if p.mirrors {
		cc, err := p.c.ContainerCluster(ctx)
		if err == nil {
			err = patchMirrors(ctx, p.c.Mgmt, cc, nil)
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			p.mirrors = false
		}
	}
	if p.scaled {
		// The MachineDeployment removes a machine marked for deletion
		// first: the new one goes, and with it the only Node that points
		// at a registry about to be removed.
		if p.newNode != "" {
			if err := markForDeletion(ctx, p.c, p.mdKey, p.newNode); err != nil {
				errs = append(errs, err)
			}
		}
		if err := scale(ctx, p.c.Mgmt, p.mdKey, p.replicas); err != nil {
			errs = append(errs, err)
		} else {
			p.scaled = false
		}
	}
	return errors.Join(errs...)
}

// timings are the test's steps with how long each took, for the report.
type timings struct {
	t     *testing.T
	steps []string
}

func (tm *timings) add(step string, start time.Time) {
	d := time.Since(start).Round(100 * time.Millisecond)
	tm.t.Logf("%s in %s", step, d)
	tm.steps = append(tm.steps, fmt.Sprintf("  %8s  %s", d, step))
}

func (tm *timings) report() {
	tm.t.Logf("times:\n%s", strings.Join(tm.steps, "\n"))
}

// mdNodes are the names of the MachineDeployment's Nodes, sorted.
func mdNodes(nodes []corev1.Node) []string {
	var out []string
	for _, n := range nodes {
		if strings.Contains(n.Name, "-md-0-") {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// addresses are where the Node's requests come from as the registry sees
// them: its container's address on network, and its InternalIPs.
func addresses(ctx context.Context, t *testing.T, c *realcluster.Clusters, engine *realcluster.Engine, node, network string) []string {
	t.Helper()
	var out []string
	if ci, err := engine.Inspect(ctx, node); err == nil {
		if a := realcluster.AddressOn(ci, network); a != "" {
			out = append(out, a)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	n, err := c.Workload.CoreV1().Nodes().Get(rctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("failed to read Node %s: %v", node, err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && !slices.Contains(out, a.Address) {
			out = append(out, a.Address)
		}
	}
	if len(out) == 0 {
		t.Fatalf("Node %s has no address on network %s and no InternalIP", node, network)
	}
	return out
}

// pushImage tags source as ref on the host's engine, pushes it, and removes the
// tag again, so that only the registry holds ref.
func pushImage(ctx context.Context, rt *docker.Runtime, source, ref string) error {
	cli := rt.Client()
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, source); err != nil {
		return fmt.Errorf("failed to find image %s on the engine (the quickstart's up builds it; MIRROR_SOURCE_IMAGE names another): %w", source, err)
	}
	if err := cli.ImageTag(ctx, source, ref); err != nil {
		return fmt.Errorf("failed to tag image %s as %s: %w", source, ref, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		defer cancel()
		_, _ = cli.ImageRemove(ctx, ref, image.RemoveOptions{})
	}()
	// {} as the credentials: the registry asks for none, and the engine
	// wants the header.
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: "e30="})
	if err == nil {
		err = registry.Drain(rc)
	}
	if err != nil {
		return fmt.Errorf("failed to push image %s: %w", ref, err)
	}
	return nil
}

// accessLog reads the registry container's log, both streams.
func accessLog(ctx context.Context, rt *docker.Runtime, name string) ([]mirror.Request, error) {
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	rc, err := rt.Client().ContainerLogs(ctx, name, dcontainer.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, fmt.Errorf("failed to read the log of registry container %s: %w", name, err)
	}
	defer func() { _ = rc.Close() }()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil {
		return nil, fmt.Errorf("failed to read the log of registry container %s: %w", name, err)
	}
	return mirror.ParseAccessLog(buf.String()), nil
}

// patchMirrors sets cc's spec.registryMirrors to mirrors (nil: none) by a
// merge patch, retried: a merge patch carries no resourceVersion, so a
// retry after a lost answer sets the same list again.
func patchMirrors(ctx context.Context, c client.Client, cc client.Object, mirrors []any) error {
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"registryMirrors": mirrors}})
	if err != nil {
		return err
	}
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		return c.Patch(ctx, cc, client.RawPatch(types.MergePatchType, body))
	}); err != nil {
		return fmt.Errorf("failed to set spec.registryMirrors of ContainerCluster %s to %s: %w", client.ObjectKeyFromObject(cc), body, err)
	}
	return nil
}

func machineDeployment(ctx context.Context, c client.Client, key client.ObjectKey) (*clusterv1.MachineDeployment, error) {
	ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	md := &clusterv1.MachineDeployment{}
	if err := c.Get(ctx, key, md); err != nil {
		return nil, fmt.Errorf("failed to read MachineDeployment %s: %w", key, err)
	}
	return md, nil
}

// scale sets the MachineDeployment's replicas by a merge patch, retried.
func scale(ctx context.Context, c client.Client, key client.ObjectKey, replicas int32) error {
	body := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		return c.Patch(ctx, md, client.RawPatch(types.MergePatchType, body))
	}); err != nil {
		return fmt.Errorf("failed to scale MachineDeployment %s to %d: %w", key, replicas, err)
	}
	return nil
}

// markForDeletion puts Cluster API's delete-machine annotation on the
// MachineDeployment's Machine of node, so that a scale-down removes it
// before any other.
func markForDeletion(ctx context.Context, c *realcluster.Clusters, mdKey client.ObjectKey, node string) error {
	var machine *clusterv1.Machine
	err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		var list clusterv1.MachineList
		if err := c.Mgmt.List(ctx, &list, client.InNamespace(mdKey.Namespace),
			client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdKey.Name}); err != nil {
			return err
		}
		for i := range list.Items {
			if list.Items[i].Status.NodeRef.Name == node {
				machine = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Machine of MachineDeployment %s has Node %s", mdKey, node)
	})
	if err != nil {
		return fmt.Errorf("failed to find the Machine of Node %s: %w", node, err)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{clusterv1.DeleteMachineAnnotation: "true"}}})
	if err != nil {
		return err
	}
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		return c.Mgmt.Patch(ctx, machine, client.RawPatch(types.MergePatchType, body))
	}); err != nil {
		return fmt.Errorf("failed to mark Machine %s/%s for deletion: %w", machine.Namespace, machine.Name, err)
	}
	return nil
}

// createPod runs podImage on node, pulled every time, after removing a
// pod of that name that an earlier run left.
func createPod(ctx context.Context, c *realcluster.Clusters, name, node string) error {
	if err := deletePod(ctx, c, name); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"app.kubernetes.io/name": "capct-mirror-test"}},
		Spec: corev1.PodSpec{
			// Pinned, past the scheduler: the test is about this Node's
			// containerd.
			NodeName: node,
			// sleep as PID 1 ignores SIGTERM; the delete need not wait 30 s.
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:  "busybox",
				Image: podImage,
				// Always: the kubelet asks the registry even for an image
				// the Node might hold, so the pull is what is tested.
				ImagePullPolicy: corev1.PullAlways,
				// The quickstart's probe image holds busybox alone, with no
				// applet links: sleep is run through it.
				Command: []string{"/bin/busybox", "sleep", "3600"},
			}},
		},
	}
	err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		_, err := c.Workload.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		// Already there: an earlier attempt made it and lost the answer.
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to create pod %s on Node %s: %w", name, node, err)
	}
	return nil
}

// deletePod deletes the pod and waits up to a minute for it to be gone.
func deletePod(ctx context.Context, c *realcluster.Clusters, name string) error {
	pods := c.Workload.CoreV1().Pods(metav1.NamespaceDefault)
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		defer cancel()
		err := pods.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("failed to delete pod %s: %w", name, err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		_, err := pods.Get(rctx, name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("failed to see pod %s go within a minute of its delete: %w", name, err)
			}
			return fmt.Errorf("pod %s still there a minute after its delete", name)
		}
		realcluster.Pause(ctx, time.Second)
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for pod %s to go: %w", name, ctx.Err())
		}
	}
}

// waitPod reads the pod every 2 s, logging its state as it changes, until
// done is true of it (nil error, the pod) or bound passes (an error, the
// pod as last read).
func waitPod(ctx context.Context, t *testing.T, c *realcluster.Clusters, name string, bound time.Duration, done func(*corev1.Pod) bool) (*corev1.Pod, error) {
	t.Helper()
	start, last := time.Now(), ""
	pod := &corev1.Pod{}
	for {
		rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		got, err := c.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(rctx, name, metav1.GetOptions{})
		cancel()
		state := ""
		if err != nil {
			state = err.Error()
		} else {
			pod, state = got, mirror.PodState(got)
			if done(pod) {
				t.Logf("%4ds  pod %s: %s", int(time.Since(start).Seconds()), name, state)
				return pod, nil
			}
		}
		if state != last {
			t.Logf("%4ds  pod %s: %s", int(time.Since(start).Seconds()), name, state)
			last = state
		}
		if time.Since(start) > bound {
			return pod, fmt.Errorf("after %s: %s", bound, last)
		}
		realcluster.Pause(ctx, 2*time.Second)
		if ctx.Err() != nil {
			return pod, ctx.Err()
		}
	}
}

// diagnose says what a failed pull needs looked at: the pod's state and
// events, the Node's hosts.toml for docker.io, and what the registry was
// asked from the Node's addresses.
func diagnose(ctx context.Context, c *realcluster.Clusters, engine *realcluster.Engine, rt *docker.Runtime, reg *registry.Registry, pod, node string, addrs []string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var b strings.Builder
	if p, err := c.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "pod %s: %v\n", pod, err)
	} else {
		fmt.Fprintf(&b, "pod %s: %s\n", pod, mirror.PodDetail(p))
	}
	events, err := c.Workload.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		fmt.Fprintf(&b, "events of pod %s: %v\n", pod, err)
	} else {
		slices.SortFunc(events.Items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
		fmt.Fprintf(&b, "events of pod %s:\n", pod)
		for _, e := range events.Items {
			fmt.Fprintf(&b, "  %s %s (x%d): %s\n", e.Type, e.Reason, max(e.Count, 1), strings.Join(strings.Fields(e.Message), " "))
		}
	}
	hosts, err := engine.Exec(ctx, node, "cat", "/etc/containerd/certs.d/docker.io/hosts.toml")
	if err != nil {
		fmt.Fprintf(&b, "Node %s's docker.io hosts.toml: %v\n", node, err)
	} else {
		fmt.Fprintf(&b, "Node %s's /etc/containerd/certs.d/docker.io/hosts.toml:\n%s\n", node, hosts)
	}
	if reqs, err := accessLog(ctx, rt, reg.Container); err != nil {
		fmt.Fprintf(&b, "%v\n", err)
	} else {
		fmt.Fprintf(&b, "registry %s (%s) asked from Node %s %v: %v\n", reg.Container, reg.NetworkHost, node, addrs, mirror.From(reqs, addrs...))
	}
	return b.String()
}
