package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// machine creates a ContainerMachine of cluster with the given addresses;
// controlPlane labels it as such, deleting marks it deleted.
func (e *env) machine(t *testing.T, cluster, name string, controlPlane, deleting bool, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}, Finalizers: []string{infrav1.MachineFinalizer}}}
	if controlPlane {
		cm.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	for _, a := range addrs {
		cm.Status.Addresses = append(cm.Status.Addresses, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: a})
	}
	// A hostname is never a backend address.
	cm.Status.Addresses = append(cm.Status.Addresses, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: name})
	if err := e.lb.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if deleting {
		if err := e.lb.Client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

// config is what the load balancer container holds.
func (e *env) config(t *testing.T) string {
	t.Helper()
	cfg, err := e.rt.ReadFile(context.Background(), e.ensure(t).Name, owner(e.cluster, e.cc), ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(cfg)
}

var serverLine = regexp.MustCompile(`(?m)^\s*server (\S+) (\S+) weight (\d+)`)

// servers lists the configuration's server lines as "name address weight".
func servers(cfg string) []string {
	var out []string
	for _, m := range serverLine.FindAllStringSubmatch(cfg, -1) {
		out = append(out, strings.Join(m[1:], " "))
	}
	return out
}

func (e *env) sync(t *testing.T) bool {
	t.Helper()
	reloaded, err := e.lb.Sync(context.Background(), e.cluster, e.cc)
	if err != nil {
		t.Fatal(err)
	}
	return reloaded
}

// haproxyChecks counts the `haproxy -c` runs.
func (e *env) haproxyChecks() int {
	n := 0
	for _, c := range e.rt.ExecCalls() {
		if len(c.Cmd) > 0 && c.Cmd[0] == "haproxy" {
			n++
		}
	}
	return n
}

// TestSyncRendersTheControlPlaneOfTheCluster: the backends are the
// cluster's control-plane machines that have an address, by name, on their
// IPv4 address when they have one, with weight 0 while they are deleted.
// Workers, machines without an address and other clusters' machines are
// not backends.
func TestSyncRendersTheControlPlaneOfTheCluster(t *testing.T) {
	e := newEnv(t)
	e.ensure(t)
	// The fake client lists by name; an API server promises no order.
	e.lb.Client = interceptor.NewClient(e.lb.Client.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*infrav1.ContainerMachineList); ok {
				slices.Reverse(l.Items)
			}
			return nil
		},
	})
	e.machine(t, "c1", "cp-c", true, false, "fd00::3", "10.0.0.3")
	e.machine(t, "c1", "cp-a", true, false, "fd00::1")
	e.machine(t, "c1", "cp-b", true, true, "10.0.0.2")
	e.machine(t, "c1", "cp-none", true, false)
	e.machine(t, "c1", "worker", false, false, "10.0.0.9")
	e.machine(t, "c2", "cp-other", true, false, "10.0.0.8")
	if !e.sync(t) {
		t.Fatal("the first sync did not reload")
	}
	want := []string{"cp-a [fd00::1]:6443 100", "cp-b 10.0.0.2:6443 0", "cp-c 10.0.0.3:6443 100"}
	if got := servers(e.config(t)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("servers %q, want %q", got, want)
	}
}

// TestSyncReloadsOnlyWhatChanged: a configuration that is in place is
// neither checked nor written nor reloaded again; a changed control plane
// is, once.
func TestSyncReloadsOnlyWhatChanged(t *testing.T) {
	e := newEnv(t)
	e.ensure(t)
	e.machine(t, "c1", "cp-0", true, false, "10.0.0.1")
	if !e.sync(t) {
		t.Fatal("the first sync did not reload")
	}
	checks, signals, before := e.haproxyChecks(), len(e.rt.Signals()), e.config(t)
	if checks != 1 || signals != 1 {
		t.Fatalf("the first sync: %d checks and %d reloads, want 1 of each", checks, signals)
	}
	if e.sync(t) || e.haproxyChecks() != checks || len(e.rt.Signals()) != signals || e.config(t) != before {
		t.Fatalf("an unchanged control plane was checked or reloaded again: %d checks, signals %v", e.haproxyChecks(), e.rt.Signals())
	}

	e.machine(t, "c1", "cp-1", true, false, "10.0.0.2")
	if !e.sync(t) {
		t.Fatal("a new control-plane machine did not reload the load balancer")
	}
	if e.haproxyChecks() != checks+1 || len(e.rt.Signals()) != signals+1 {
		t.Fatalf("a change: %d checks, signals %v; want one more of each", e.haproxyChecks(), e.rt.Signals())
	}
	if got := servers(e.config(t)); len(got) != 2 || got[1] != "cp-1 10.0.0.2:6443 100" {
		t.Fatalf("servers after the change: %q", got)
	}
}

// TestSyncUsesTheCustomTemplate renders the ConfigMap that
// customHAProxyConfigTemplateRef names, follows its changes, and reports a
// missing or unusable one without touching the running configuration.
func TestSyncUsesTheCustomTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.ensure(t)
	e.machine(t, "c1", "cp-0", true, false, "10.0.0.1")
	e.cc.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef = &infrav1.LocalObjectReference{Name: "haproxy"}

	// No ConfigMap yet.
	if _, err := e.lb.Sync(ctx, e.cluster, e.cc); err == nil || !strings.Contains(err.Error(), "ns/haproxy") {
		t.Fatalf("want the missing ConfigMap named, got %v", err)
	}
	if _, err := e.rt.ReadFile(ctx, e.ensure(t).Name, owner(e.cluster, e.cc), ConfigPath); !container.IsNotFound(err) {
		t.Fatalf("a configuration was written without its template: %v", err)
	}

	template := func(text string) string {
		return "# custom " + text + "\n{{ range .Backends }}  server {{ .Name }} {{ JoinHostPort .Address $.BackendPort }} weight {{ .Weight }}\n{{ end }}"
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "haproxy"}, Data: map[string]string{"value": template("one")}}
	if err := e.lb.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if !e.sync(t) {
		t.Fatal("the custom template did not reload")
	}
	cfg := e.config(t)
	if !strings.HasPrefix(cfg, "# custom one\n") || fmt.Sprint(servers(cfg)) != "[cp-0 10.0.0.1:6443 100]" {
		t.Fatalf("the configuration is not the custom template's:\n%s", cfg)
	}
	if !strings.Contains(cfg, "\nbackend "+markerPrefix) {
		t.Fatalf("the configuration lacks the marker that confirms reloads:\n%s", cfg)
	}

	cm.Data["value"] = template("two")
	if err := e.lb.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if !e.sync(t) || !strings.HasPrefix(e.config(t), "# custom two\n") {
		t.Fatalf("a changed template was not put in place:\n%s", e.config(t))
	}
	running, signals := e.config(t), len(e.rt.Signals())

	for _, tc := range []struct {
		name   string
		data   map[string]string
		reason string
		want   string
	}{
		{name: "no value key", data: map[string]string{"template": template("three")}, want: `has no key "value"`},
		{name: "a template that does not parse", data: map[string]string{"value": "{{ .Backends "}, reason: infrav1.LoadBalancerConfigInvalidReason, want: "failed to parse"},
		{name: "a refused template", data: map[string]string{"value": "{{ range 5 }}{{ end }}"}, reason: infrav1.LoadBalancerConfigInvalidReason, want: "only .Backends"},
		{name: "the render bomb that took the manager down", data: map[string]string{"value": renderBomb(12)}, reason: infrav1.LoadBalancerConfigInvalidReason, want: "more than 1048576"},
		{name: "a template with an unknown field", data: map[string]string{"value": "{{ .Nope }}"}, reason: infrav1.LoadBalancerConfigInvalidReason, want: "Nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm.Data = tc.data
			if err := e.lb.Client.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
			_, err := e.lb.Sync(ctx, e.cluster, e.cc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
			var re *ReloadError
			if tc.reason != "" && (!errors.As(err, &re) || re.Reason != tc.reason) {
				t.Fatalf("want a ReloadError with reason %s, got %#v", tc.reason, err)
			}
			if e.config(t) != running || len(e.rt.Signals()) != signals {
				t.Fatal("the running configuration was replaced or reloaded")
			}
		})
	}
}

// TestSyncBindsIPv6WhereTheClusterHasIt: the frontend listens on IPv6 too
// in an IPv6 or dual-stack cluster, whether the ContainerCluster says so or
// the Cluster's pod CIDRs do.
func TestSyncBindsIPv6WhereTheClusterHasIt(t *testing.T) {
	testCases := []struct {
		name   string
		family infrav1.IPFamily
		pods   []string
		ipv6   bool
	}{
		{name: "IPv4 by default"},
		{name: "IPv4", family: infrav1.IPv4Family},
		{name: "dual stack", family: infrav1.DualStackFamily, ipv6: true},
		{name: "IPv6", family: infrav1.IPv6Family, ipv6: true},
		{name: "dual-stack pod CIDRs", pods: []string{"10.244.0.0/16", "fd00:10:244::/56"}, ipv6: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.ensure(t)
			e.machine(t, "c1", "cp-0", true, false, "10.0.0.1")
			e.cc.Spec.Network.IPFamily = tc.family
			e.cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = tc.pods
			e.sync(t)
			if got := strings.Contains(e.config(t), "bind :::6443 v6only"); got != tc.ipv6 {
				t.Fatalf("IPv6 frontend %v, want %v:\n%s", got, tc.ipv6, e.config(t))
			}
		})
	}
}

// TestDeleteTheLoadBalancer: Delete removes the cluster's load balancer, is
// fine when it is gone, and leaves one of another owner.
func TestDeleteTheLoadBalancer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	name := e.ensure(t).Name
	stranger := e.cc.DeepCopy()
	stranger.Spec.ClusterID = "another-id"
	if err := e.lb.Delete(ctx, e.cluster, stranger); err == nil {
		t.Fatal("another cluster's delete of the load balancer succeeded")
	}
	if _, err := e.rt.Inspect(ctx, name); err != nil {
		t.Fatalf("the load balancer is gone after another owner's delete: %v", err)
	}
	for range 2 {
		if err := e.lb.Delete(ctx, e.cluster, e.cc); err != nil {
			t.Fatal(err)
		}
		if _, err := e.rt.Inspect(ctx, name); !container.IsNotFound(err) {
			t.Fatalf("the load balancer is still there: %v", err)
		}
	}
}
