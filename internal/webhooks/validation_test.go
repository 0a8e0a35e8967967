package webhooks_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		*env.Policy = testPolicy
		if err := startShippedWebhooks(ctx, e); err != nil {
			return err
		}
		return createFixtureClusters(ctx, e.Client)
	}, nil))
}

func validMachine(name string) *infrav1.ContainerMachine {
	return &infrav1.ContainerMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: infrav1.ContainerMachineSpec{
			Image:       "capct/node:v1.35.4",
			ExtraMounts: []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/capct/data"}},
			Resources:   &infrav1.MachineResources{CPUs: ptr.To(resource.MustParse("1")), Memory: ptr.To(resource.MustParse("1Gi"))},
			Lifecycle:   infrav1.MachineLifecycle{RegistrationTTL: &metav1.Duration{Duration: 600_000_000_000}},
		},
	}
}

func validCluster(name string) *infrav1.ContainerCluster {
	return &infrav1.ContainerCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: infrav1.ContainerClusterSpec{
			FailureDomains: []clusterv1.FailureDomain{{Name: "fd1", ControlPlane: ptr.To(true)}},
			Network: infrav1.NetworkSpec{
				IPFamily:          infrav1.DualStackFamily,
				PodCIDRAllocation: infrav1.PodCIDRAllocation{NodeMaskSizeIPv4: 24, NodeMaskSizeIPv6: 64},
			},
		},
	}
}

func validMachineTemplate(name string) *infrav1.ContainerMachineTemplate {
	return &infrav1.ContainerMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: infrav1.ContainerMachineTemplateSpec{Template: infrav1.ContainerMachineTemplateResource{
			Spec: validMachine("unused").Spec,
		}},
	}
}

func validPool(name string) *expinfrav1.ContainerMachinePool {
	return &expinfrav1.ContainerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec:       expinfrav1.ContainerMachinePoolSpec{Template: validMachine("unused").Spec},
	}
}

// TestValidObjectsAreAccepted guards the invalid-object table: if the base
// objects were rejected, every row below would pass for the wrong reason.
func TestValidObjectsAreAccepted(t *testing.T) {
	ctx := context.Background()
	for _, obj := range []client.Object{validMachine("valid-m"), validCluster("valid-c"), validMachineTemplate("valid-t"), validPool("valid-p")} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("valid %T was rejected: %v", obj, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
}

// TestInvalidObjectsAreRejected creates (or updates) objects that are wrong
// in one field each and checks that the API server refuses them with a
// message that names the field.
func TestInvalidObjectsAreRejected(t *testing.T) {
	quantity := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	testCases := []struct {
		name string
		// before, when set, is created first; obj is then applied as an update.
		before func(name string) client.Object
		obj    func(name string) client.Object
		// wantField must appear in the error message.
		wantField string
	}{
		{name: "machine providerID with another scheme", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ProviderID = "docker:///foo"
			return m
		}, wantField: "spec.providerID"},
		{name: "machine providerID too long", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ProviderID = "container:///" + strings.Repeat("a", 600)
			return m
		}, wantField: "spec.providerID"},
		{name: "machine image with whitespace", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Image = "capct/node v1"
			return m
		}, wantField: "spec.image"},
		{name: "machine mount with relative container path", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ExtraMounts = []infrav1.Mount{{ContainerPath: "data", HostPath: "/srv/capct"}}
			return m
		}, wantField: "spec.extraMounts[0].containerPath"},
		{name: "machine mount with relative host path", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ExtraMounts = []infrav1.Mount{{ContainerPath: "/data", HostPath: "tmp"}}
			return m
		}, wantField: "spec.extraMounts[0].hostPath"},
		{name: "machine mounts with the same container path", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ExtraMounts = []infrav1.Mount{{ContainerPath: "/data", HostPath: "/a"}, {ContainerPath: "/data", HostPath: "/b"}}
			return m
		}, wantField: "spec.extraMounts[1]"},
		{name: "machine preloaded image that is empty", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.PreLoadImages = []string{""}
			return m
		}, wantField: "spec.preLoadImages[0]"},
		{name: "machine with zero CPUs", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Resources.CPUs = quantity("0")
			return m
		}, wantField: "spec.resources.cpus"},
		{name: "machine with too little memory", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Resources.Memory = quantity("1Mi")
			return m
		}, wantField: "spec.resources.memory"},
		{name: "machine with empty resources", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Resources = &infrav1.MachineResources{}
			return m
		}, wantField: "spec.resources"},
		{name: "machine with a negative bootstrap timeout", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Lifecycle.BootstrapTimeout = &metav1.Duration{Duration: -1_000_000_000}
			return m
		}, wantField: "spec.lifecycle.bootstrapTimeout"},
		{name: "machine with a bootstrap timeout of ten years", obj: func(n string) client.Object {
			// It would hold one of its engine's bootstrap slots for good.
			m := validMachine(n)
			m.Spec.Lifecycle.BootstrapTimeout = &metav1.Duration{Duration: 87600 * time.Hour}
			return m
		}, wantField: "bootstrapTimeout must be at most 1h"},
		{name: "machine with a registration TTL under 30s", obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Lifecycle.RegistrationTTL = &metav1.Duration{Duration: 1_000_000_000}
			return m
		}, wantField: "spec.lifecycle.registrationTTL"},
		{name: "machine image changed", before: func(n string) client.Object { return validMachine(n) }, obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.Image = "capct/node:v1.35.5"
			return m
		}, wantField: "image is immutable"},
		{name: "machine providerID changed once set", before: func(n string) client.Object {
			// Only a machine created while its Cluster is paused (clusterctl
			// move) may have a providerID from the start.
			m := validMachine(n)
			m.Labels = map[string]string{clusterv1.ClusterNameLabel: pausedCluster}
			m.Spec.ProviderID = "container:///a"
			return m
		}, obj: func(n string) client.Object {
			m := validMachine(n)
			m.Spec.ProviderID = "container:///b"
			return m
		}, wantField: "providerID is immutable"},
		{name: "cluster with an unknown IP family", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.IPFamily = "IPv5"
			return c
		}, wantField: "spec.network.ipFamily"},
		{name: "cluster with an IPv4 node mask of 31", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.PodCIDRAllocation.NodeMaskSizeIPv4 = 31
			return c
		}, wantField: "spec.network.podCIDRAllocation.nodeMaskSizeIPv4"},
		{name: "cluster with an IPv6 node mask of 129", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.PodCIDRAllocation.NodeMaskSizeIPv6 = 129
			return c
		}, wantField: "spec.network.podCIDRAllocation.nodeMaskSizeIPv6"},
		{name: "cluster network name with a slash", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.Name = "a/b"
			return c
		}, wantField: "spec.network.name"},
		{name: "cluster network Unmanaged without a name", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.Mode = infrav1.NetworkUnmanaged
			return c
		}, wantField: "name is required when mode is Unmanaged"},
		{name: "cluster network mode with an unknown value", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.Mode = "Borrowed"
			return c
		}, wantField: "spec.network.mode"},
		{name: "cluster network mode changed", before: func(n string) client.Object { return validCluster(n) }, obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.Network.Name = "shared"
			c.Spec.Network.Mode = infrav1.NetworkUnmanaged
			return c
		}, wantField: "spec.network.mode"},
		{name: "cluster endpoint port out of range", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "1.2.3.4", Port: 70000}
			return c
		}, wantField: "spec.controlPlaneEndpoint.port"},
		{name: "cluster failure domains with the same name", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.FailureDomains = append(c.Spec.FailureDomains, clusterv1.FailureDomain{Name: "fd1"})
			return c
		}, wantField: "spec.failureDomains[1]"},
		{name: "cluster failure domain without a name", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.FailureDomains = []clusterv1.FailureDomain{{Name: ""}}
			return c
		}, wantField: "spec.failureDomains[0].name"},
		{name: "cluster custom HAProxy template without a name", obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef = &infrav1.LocalObjectReference{}
			return c
		}, wantField: "spec.loadBalancer.customHAProxyConfigTemplateRef.name"},
		{name: "cluster endpoint changed once set", before: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "1.2.3.4", Port: 6443}
			return c
		}, obj: func(n string) client.Object {
			c := validCluster(n)
			c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "5.6.7.8", Port: 6443}
			return c
		}, wantField: "controlPlaneEndpoint is immutable"},
		{name: "machine template with a providerID", obj: func(n string) client.Object {
			t := validMachineTemplate(n)
			t.Spec.Template.Spec.ProviderID = "container:///x"
			return t
		}, wantField: "spec.template.spec"},
		{name: "machine template spec changed", before: func(n string) client.Object { return validMachineTemplate(n) }, obj: func(n string) client.Object {
			t := validMachineTemplate(n)
			t.Spec.Template.Spec.Image = "capct/node:v1.35.5"
			return t
		}, wantField: "spec.template.spec"},
		{name: "pool template with a providerID", obj: func(n string) client.Object {
			p := validPool(n)
			p.Spec.Template.ProviderID = "container:///x"
			return p
		}, wantField: "spec.template"},
		{name: "pool strategy that can never progress", obj: func(n string) client.Object {
			p := validPool(n)
			p.Spec.Strategy = expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
			return p
		}, wantField: "spec.strategy"},
		{name: "pool with a warm pool and host ports", obj: func(n string) client.Object {
			p := validPool(n)
			p.Spec.WarmPool.Size = 2
			p.Spec.Template.ExtraPortMappings = []infrav1.PortMapping{{HostPort: 30080, ContainerPort: 30080}}
			return p
		}, wantField: "warmPool cannot be used with template.extraPortMappings"},
		{name: "pool with a warm pool over its bound", obj: func(n string) client.Object {
			p := validPool(n)
			p.Spec.WarmPool.Size = 101
			return p
		}, wantField: "spec.warmPool.size"},
		{name: "pool providerIDList with an empty entry", obj: func(n string) client.Object {
			p := validPool(n)
			p.Spec.ProviderIDList = []string{""}
			return p
		}, wantField: "spec.providerIDList[0]"},
	}
	if len(testCases) < 20 {
		t.Fatalf("the table must hold at least 20 invalid objects, it holds %d", len(testCases))
	}
	ctx := context.Background()
	for i, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("invalid-%d", i)
			obj := tc.obj(name)
			var err error
			if tc.before != nil {
				before := tc.before(name)
				if err := env.Client.Create(ctx, before); err != nil {
					t.Fatalf("failed to create the valid object before the update: %v", err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(ctx, before) })
				obj.SetResourceVersion(before.GetResourceVersion())
				err = env.Client.Update(ctx, obj)
			} else {
				err = env.Client.Create(ctx, obj)
				if err == nil {
					t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
				}
			}
			if err == nil {
				t.Fatalf("the API server accepted an invalid %T", obj)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("the error does not name %q: %v", tc.wantField, err)
			}
		})
	}
}

// TestClusterEndpointPortDefaults checks the defaulting webhook.
func TestClusterEndpointPortDefaults(t *testing.T) {
	ctx := context.Background()
	c := validCluster("defaulted")
	c.Spec.ControlPlaneEndpoint.Host = "10.0.0.1"
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, c) })
	if c.Spec.ControlPlaneEndpoint.Port != 6443 {
		t.Fatalf("want port 6443 defaulted, got %d", c.Spec.ControlPlaneEndpoint.Port)
	}
}
