package loadbalancer

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

type env struct {
	rt      *fake.Runtime
	lb      *LoadBalancer
	cluster *clusterv1.Cluster
	cc      *infrav1.ContainerCluster
	// loaded is the configuration the pretend HAProxy runs; the stats list
	// its backends.
	loaded []byte
}

func newEnv(t *testing.T) *env {
	t.Helper()
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{rt: fake.New(nil),
		cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}},
		cc: &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
			Spec: infrav1.ContainerClusterSpec{ClusterID: "id-1"}}}
	// Time passes only while a reload is being waited for.
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			if clk.HasWaiters() {
				clk.Step(reloadPoll)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	e.lb = &LoadBalancer{Client: fakeclient.NewClientBuilder().WithScheme(scheme).Build(), Engines: engines.Single(e.rt),
		Clock: clk,
		Stats: func(ctx context.Context, m *container.Machine) ([]byte, error) {
			var csv bytes.Buffer
			for _, line := range strings.Split(string(e.loaded), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "backend" {
					csv.WriteString(f[1] + ",BACKEND,\n")
				}
			}
			return csv.Bytes(), nil
		}}
	if _, err := e.rt.EnsureNetwork(context.Background(), container.NetworkSpec{Name: "capct-c1", Owner: naming.ClusterOwner(e.cluster, e.cc)}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) ensure(t *testing.T) *container.Machine {
	t.Helper()
	m, err := e.lb.Ensure(context.Background(), Spec{Cluster: e.cluster, ContainerCluster: e.cc, Network: "capct-c1", Image: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEnsureFixesTheHostPortAndAddress(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.ensure(t)
	port := first.HostPort(APIServerPort)
	if port == 0 || configuredHostPort(first) != port {
		t.Fatalf("host port %d, configured %v", port, first.PortMappings)
	}
	if !first.StaticIPv4.IsValid() || first.StaticIPv4 != first.IPv4 {
		t.Fatalf("address %v, static %v", first.IPv4, first.StaticIPv4)
	}
	// The fake, like the engine, picks another port at every start when
	// none is fixed.
	if err := e.rt.Stop(ctx, first.Name, owner(e.cluster, e.cc), 0); err != nil {
		t.Fatal(err)
	}
	again := e.ensure(t)
	if again.HostPort(APIServerPort) != port || again.IPv4 != first.IPv4 || again.ID != first.ID {
		t.Fatalf("after a restart: port %d address %v id %s; before %d %v %s",
			again.HostPort(APIServerPort), again.IPv4, again.ID, port, first.IPv4, first.ID)
	}
}

// TestEnsurePublishesOnTheListenAddress: the API server port is published
// on the ContainerCluster's spec.loadBalancer.listenAddress, and on
// 127.0.0.1 when it is empty, also once the port is fixed.
func TestEnsurePublishesOnTheListenAddress(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{{addr: "", want: "127.0.0.1"}, {addr: "::1", want: "::1"}, {addr: "192.0.2.10", want: "192.0.2.10"}} {
		e := newEnv(t)
		m, err := e.lb.Ensure(context.Background(), Spec{Cluster: e.cluster, ContainerCluster: e.cc, Network: "capct-c1", Image: "lb", ListenAddress: tc.addr})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.PortMappings) != 1 || m.PortMappings[0].HostIP != tc.want || m.PortMappings[0].HostPort == 0 ||
			len(m.Ports) != 1 || m.Ports[0].HostIP != tc.want {
			t.Fatalf("listen address %q: configured %+v, published %+v; want the fixed port on %s", tc.addr, m.PortMappings, m.Ports, tc.want)
		}
	}
}

func TestSyncNeverInstallsAConfigurationHAProxyRefuses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.ensure(t)
	e.rt.SetExecHandler(func(ctx context.Context, _ container.Machine, files map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		if in.Cmd[0] == "haproxy" && bytes.Contains(files[candidatePath], []byte("frontend control-plane")) {
			return container.ExecResult{ExitCode: 1, Stderr: []byte("[ALERT] config : parsing: unknown keyword")}, true
		}
		return container.ExecResult{}, false
	})
	_, err := e.lb.SyncAndVerify(ctx, e.cluster, e.cc, m)
	var re *ReloadError
	if !errors.As(err, &re) || re.Reason != infrav1.LoadBalancerConfigInvalidReason || !strings.Contains(err.Error(), "unknown keyword") {
		t.Fatalf("want a LoadBalancerConfigInvalid error with HAProxy's message, got %v", err)
	}
	if _, err := e.rt.ReadFile(ctx, m.Name, owner(e.cluster, e.cc), ConfigPath); !container.IsNotFound(err) {
		t.Fatalf("the refused configuration was put in place: %v", err)
	}
	if len(e.rt.Signals()) != 0 {
		t.Fatalf("HAProxy was signalled: %v", e.rt.Signals())
	}
}

func TestSyncAndVerifyConfirmsTheLoadedConfiguration(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.ensure(t)

	// HAProxy that does not pick up the new configuration.
	_, err := e.lb.SyncAndVerify(ctx, e.cluster, e.cc, m)
	var re *ReloadError
	if !errors.As(err, &re) || re.Reason != infrav1.LoadBalancerReloadFailedReason {
		t.Fatalf("want LoadBalancerReloadFailed, got %v", err)
	}
	if n := len(e.rt.Signals()); n != 1 {
		t.Fatalf("%d signals, want 1", n)
	}

	// The next pass finds the file in place but not loaded, and reloads
	// again; this time HAProxy loads it.
	cfg, err := e.rt.ReadFile(ctx, m.Name, owner(e.cluster, e.cc), ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	e.loaded = cfg
	reloaded, err := e.lb.SyncAndVerify(ctx, e.cluster, e.cc, m)
	if err != nil || reloaded {
		t.Fatalf("reloaded %v, %v; want a loaded configuration left alone", reloaded, err)
	}
	e.loaded = nil
	if _, err := e.lb.SyncAndVerify(ctx, e.cluster, e.cc, m); err == nil || len(e.rt.Signals()) != 2 {
		t.Fatalf("a configuration that is in place but not loaded must be reloaded again: %v, signals %v", err, e.rt.Signals())
	}
}

// TestStatsAreNeverFollowedElsewhere: a statistics page that redirects (a
// tenant's template can make HAProxy answer anything) is an error, and the
// address it names is never asked.
func TestStatsAreNeverFollowedElsewhere(t *testing.T) {
	var followed atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		followed.Store(true)
		_, _ = w.Write([]byte("# pxname,svname\n"))
	}))
	defer elsewhere.Close()
	lb := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusFound))
	defer lb.Close()

	_, err := getStats(context.Background(), lb.URL+StatsPath+";csv")
	if err == nil || !strings.Contains(err.Error(), "302 Found") {
		t.Fatalf("want the redirect reported as an error, got %v", err)
	}
	if followed.Load() {
		t.Fatal("the redirect was followed")
	}
}
