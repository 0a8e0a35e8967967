package engines

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
)

// recordedClient is a backend's own client type: a fake runtime that
// counts its Closes.
type recordedClient struct {
	*fake.Runtime
	closed int
}

func (c *recordedClient) Close() error {
	c.closed++
	return nil
}

// recorder is a Connector that records what it was given and makes
// recordedClients, or fails with err.
type recorder struct {
	secrets []map[string][]byte
	made    []*recordedClient
	err     error
}

func (r *recorder) connect(_ *infrav1.ContainerEngine, secret map[string][]byte) (*recordedClient, error) {
	r.secrets = append(r.secrets, secret)
	if r.err != nil {
		// A nil pointer of the backend's type, as a constructor returns.
		return nil, r.err
	}
	c := &recordedClient{Runtime: fake.New(clocktesting.NewFakeClock(time.Now()))}
	r.made = append(r.made, c)
	return c, nil
}

// TestRegistryConnectsThroughItsConnector checks the seam to the backend:
// the Registry makes an engine's client only through the Connector it was
// given, with the data of the engine's Secret, once per generation and
// Secret version, closing the client it replaces or forgets; a Secret that
// is missing, or that the Connector refuses, is an InvalidCredentialsError,
// and a failed connection leaves the engine unserved.
func TestRegistryConnectsThroughItsConnector(t *testing.T) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "capct-system", Name: "engine-b-tls"},
		Data: map[string][]byte{container.SecretCA: []byte("ca")}}
	reader := fakeclient.NewClientBuilder().WithObjects(secret).Build()
	rec := &recorder{}
	reg := NewRegistry(nil, rec.connect, reader, "capct-system", time.Second, nil)
	engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b", Generation: 1}, Spec: infrav1.ContainerEngineSpec{
		Endpoint: "tcp://engine-b.example:2376",
		TLS:      &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-b-tls"}},
	}}

	if _, err := reg.Ensure(ctx, engine); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(rec.made) != 1 || string(rec.secrets[0][container.SecretCA]) != "ca" {
		t.Fatalf("the Connector made %d clients from Secrets %v; want one, from the engine's Secret", len(rec.made), rec.secrets)
	}
	if _, err := reg.Ensure(ctx, engine); err != nil || len(rec.made) != 1 {
		t.Fatalf("Ensure of an unchanged engine: %v, %d clients made; want the one held", err, len(rec.made))
	}

	engine.Generation = 2
	if _, err := reg.Ensure(ctx, engine); err != nil || len(rec.made) != 2 || rec.made[0].closed != 1 {
		t.Fatalf("Ensure of a changed engine: %v, %d clients made, the first closed %d times; want a second, the first closed",
			err, len(rec.made), rec.made[0].closed)
	}
	secret.Data[container.SecretCA] = []byte("new ca")
	if err := reader.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Ensure(ctx, engine); err != nil || len(rec.made) != 3 || string(rec.secrets[2][container.SecretCA]) != "new ca" {
		t.Fatalf("Ensure after the Secret changed: %v, %d clients made; want a third, from the new Secret", err, len(rec.made))
	}

	// The Connector refuses the Secret: no client is served, not even a
	// nil one of the backend's type.
	rec.err = &InvalidCredentialsError{Engine: engine.Name, Err: errors.New("no tls.key")}
	engine.Generation = 3
	_, err := reg.Ensure(ctx, engine)
	var invalid *InvalidCredentialsError
	if !errors.As(err, &invalid) {
		t.Fatalf("Ensure with a Secret the Connector refuses: %v, want an InvalidCredentialsError", err)
	}
	if rec.made[2].closed != 1 {
		t.Errorf("the client of the previous generation was closed %d times, want once", rec.made[2].closed)
	}
	if _, err := reg.Get(engine.Name); !container.IsUnreachable(err) {
		t.Fatalf("Get after a failed connection: %v, want the engine unreachable", err)
	}

	// A Secret that does not exist never reaches the Connector.
	calls := len(rec.secrets)
	engine.Spec.TLS.SecretRef.Name = "missing"
	engine.Generation = 4
	if _, err := reg.Ensure(ctx, engine); !errors.As(err, &invalid) || len(rec.secrets) != calls {
		t.Fatalf("Ensure with a missing Secret: %v, Connector called %d more times; want an InvalidCredentialsError and no call",
			err, len(rec.secrets)-calls)
	}

	rec.err = nil
	engine.Spec.TLS.SecretRef.Name = "engine-b-tls"
	engine.Generation = 5
	if _, err := reg.Ensure(ctx, engine); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	reg.Forget(engine.Name)
	if last := rec.made[len(rec.made)-1]; last.closed != 1 {
		t.Errorf("Forget closed the engine's client %d times, want once", last.closed)
	}
}
