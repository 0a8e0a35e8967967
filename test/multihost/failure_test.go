//go:build engine

package multihost_test

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// TestLostEngineFailsFastAndComesBack drops every packet to engine 2, as
// the loss of its host does (the packets vanish: nothing refuses them), and
// checks the registry's runtime of it: the call
// in flight fails as unreachable within the call timeout, the calls after
// it fail at once instead of holding a worker for the timeout each, and
// once the packets flow again the engine answers within the probe
// interval.
func TestLostEngineFailsFastAndComesBack(t *testing.T) {
	const callTimeout = 3 * time.Second
	engine, data := engine2Spec(t)
	u, err := url.Parse(engine.Spec.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	drop := []string{"OUTPUT", "-d", u.Hostname(), "-m", "comment", "--comment", "capct multihost test: engine 2 lost", "-j", "DROP"}
	const namespace = "capct-system"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: engine.Spec.TLS.SecretRef.Name}, Data: data}
	registry := engines.NewRegistry(nil, docker.Connect, fake.NewClientBuilder().WithObjects(secret).Build(), namespace, callTimeout, nil)
	t.Cleanup(func() { registry.Forget(engine.Name) })
	ctx := runtimetest.Ctx(t)
	rt, err := registry.Ensure(ctx, engine)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Info(ctx); err != nil {
		t.Fatalf("engine 2 before its packets are dropped: %v", err)
	}

	iptables(t, append([]string{"-I"}, drop...))
	t.Cleanup(func() { iptables(t, append([]string{"-D"}, drop...)) })
	start := time.Now()
	if _, err := rt.Info(ctx); !container.IsUnreachable(err) {
		t.Fatalf("engine 2 with its packets dropped: %v; want unreachable", err)
	}
	t.Logf("the first call found engine 2 unreachable after %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, err := rt.Inspect(ctx, "anything"); !container.IsUnreachable(err) {
		t.Fatalf("the next call: %v; want unreachable", err)
	}
	if took := time.Since(start); took > callTimeout/3 {
		t.Fatalf("the next call took %s: the gate did not fail it at once", took)
	}

	iptables(t, append([]string{"-D"}, drop...))
	back := time.Now()
	deadline := back.Add(engines.ProbeInterval + callTimeout + 2*time.Second)
	for {
		_, err := rt.Info(ctx)
		if err == nil {
			t.Logf("engine 2 answered %s after its packets flowed again", time.Since(back).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine 2 still unreachable %s after its packets flowed again: %v", time.Since(back).Round(time.Second), err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// iptables changes the host's rules; the test's rule only ever names
// engine 2's address. Deleting a rule already gone is not an error.
func iptables(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil && (args[0] != "-D" || !strings.Contains(string(out), "does a matching rule exist")) {
		t.Fatalf("iptables %v: %v: %s", args, err, out)
	}
}
