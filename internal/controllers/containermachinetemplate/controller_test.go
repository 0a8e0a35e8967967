package containermachinetemplate_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachinetemplate"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// The suite runs the controller in a manager against a real API server
// with CAPCT's CRDs and webhooks. No cluster autoscaler is served here, so
// the tests read the status as the autoscaler's Cluster API provider does
// (status.capacity as a map of resource names to quantity strings,
// status.nodeInfo as a map of strings) and hold it to the form Cluster
// API's opt-in autoscaling from zero documents.
var env *envtest.Environment

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.Background())
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		return (&containermachinetemplate.Reconciler{Client: env.Manager.GetClient()}).
			SetupWithManager(ctx, env.Manager, controller.Options{})
	}, nil))
}

// newNamespace creates a namespace of its own for a test.
func newNamespace(ctx context.Context, g Gomega, t *testing.T) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cmt-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// createTemplate creates a ContainerMachineTemplate whose machines get
// resources.
func createTemplate(ctx context.Context, g Gomega, namespace string, resources *infrav1.MachineResources) *infrav1.ContainerMachineTemplate {
	template := &infrav1.ContainerMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "md-0"},
		Spec: infrav1.ContainerMachineTemplateSpec{Template: infrav1.ContainerMachineTemplateResource{
			Spec: infrav1.ContainerMachineSpec{Resources: resources},
		}},
	}
	g.Expect(env.Client.Create(ctx, template)).To(Succeed())
	return template
}

// autoscalerView reads the template as the cluster autoscaler does: as an
// unstructured object, status.capacity and status.nodeInfo as string maps.
func autoscalerView(ctx context.Context, g Gomega, key client.ObjectKey) (capacity, nodeInfo map[string]string, resourceVersion string) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(infrav1.GroupVersion.WithKind("ContainerMachineTemplate"))
	g.Expect(env.Client.Get(ctx, key, u)).To(Succeed())
	capacity, _, err := unstructured.NestedStringMap(u.Object, "status", "capacity")
	g.Expect(err).NotTo(HaveOccurred(), "status.capacity must be a map of strings")
	nodeInfo, _, err = unstructured.NestedStringMap(u.Object, "status", "nodeInfo")
	g.Expect(err).NotTo(HaveOccurred(), "status.nodeInfo must be a map of strings")
	return capacity, nodeInfo, u.GetResourceVersion()
}

func quantity(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// TestTemplateCapacityFollowsTheContract: a template with CPU and memory
// limits reports them in status.capacity under the resource names cpu and
// memory, each a quantity the autoscaler parses back to the limit, and
// status.nodeInfo says linux.
func TestTemplateCapacityFollowsTheContract(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := newNamespace(ctx, g, t)
	template := createTemplate(ctx, g, ns, &infrav1.MachineResources{CPUs: quantity("1500m"), Memory: quantity("4Gi")})

	var capacity, nodeInfo map[string]string
	g.Eventually(func(g Gomega) {
		capacity, nodeInfo, _ = autoscalerView(ctx, g, client.ObjectKeyFromObject(template))
		g.Expect(capacity).NotTo(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "status.capacity is never written")

	g.Expect(capacity).To(HaveLen(2), "capacity has cpu and memory only: %v", capacity)
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1.5", corev1.ResourceMemory: "4Gi"} {
		got, err := resource.ParseQuantity(capacity[string(name)])
		g.Expect(err).NotTo(HaveOccurred(), "status.capacity.%s = %q is no quantity", name, capacity[string(name)])
		g.Expect(got.Cmp(resource.MustParse(want))).To(BeZero(), "status.capacity.%s = %s, want %s", name, got.String(), want)
	}
	g.Expect(nodeInfo).To(Equal(map[string]string{"operatingSystem": "linux"}))
}

// TestSecondReconcileWritesNothing: once the status is current, neither
// the manager's own reconcile of its status patch nor further reconciles
// write: the resource version stays, and a client that counts writes
// counts none.
func TestSecondReconcileWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := newNamespace(ctx, g, t)
	template := createTemplate(ctx, g, ns, &infrav1.MachineResources{CPUs: quantity("2"), Memory: quantity("2Gi")})
	key := client.ObjectKeyFromObject(template)

	var written string
	g.Eventually(func(g Gomega) {
		var capacity map[string]string
		capacity, _, written = autoscalerView(ctx, g, key)
		g.Expect(capacity).To(HaveKey("cpu"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// The status patch woke the controller in the manager again; that
	// reconcile must find nothing to write.
	g.Consistently(func(g Gomega) {
		_, _, rv := autoscalerView(ctx, g, key)
		g.Expect(rv).To(Equal(written), "the template was written again")
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed())

	var writes atomic.Int32
	count := func() { writes.Add(1) }
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	counting := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, obj, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count()
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	rec := &containermachinetemplate.Reconciler{Client: counting}
	for range 3 {
		_, err := rec.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Load()).To(BeZero(), "a reconcile of a current template wrote")
	_, _, rv := autoscalerView(ctx, g, key)
	g.Expect(rv).To(Equal(written), "the template was written again")
}

// TestTemplateWithoutLimitsHasNoCapacity: a template that sets no limits
// gets nodeInfo but no capacity, so that the autoscaler does not take the
// shared host for one node's room.
func TestTemplateWithoutLimitsHasNoCapacity(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := newNamespace(ctx, g, t)
	template := createTemplate(ctx, g, ns, nil)

	g.Eventually(func(g Gomega) {
		capacity, nodeInfo, _ := autoscalerView(ctx, g, client.ObjectKeyFromObject(template))
		g.Expect(nodeInfo).To(HaveKeyWithValue("operatingSystem", "linux"))
		g.Expect(capacity).To(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestChangedStatusIsRestored: a status someone else changed is put back,
// since the controller reconciles its templates' status updates too.
func TestChangedStatusIsRestored(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ns := newNamespace(ctx, g, t)
	template := createTemplate(ctx, g, ns, &infrav1.MachineResources{CPUs: quantity("2"), Memory: quantity("2Gi")})
	key := client.ObjectKeyFromObject(template)
	g.Eventually(func(g Gomega) {
		capacity, _, _ := autoscalerView(ctx, g, key)
		g.Expect(capacity).To(HaveKeyWithValue("cpu", "2"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Get(ctx, key, template)).To(Succeed())
	template.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("64")
	g.Expect(env.Client.Status().Update(ctx, template)).To(Succeed())

	g.Eventually(func(g Gomega) {
		capacity, _, _ := autoscalerView(ctx, g, key)
		g.Expect(capacity).To(HaveKeyWithValue("cpu", "2"))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "the changed status is never restored")
}
