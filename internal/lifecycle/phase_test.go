package lifecycle

import (
	"context"
	"errors"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
)

// An engine that stops answering between two phases is waiting, not
// failing: the machine looks again soon instead of returning the error,
// which would back off for minutes after the engine is back.
func TestTheEngineGoingAwayMidReconcileIsWaitedFor(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	away := container.NewError("read", "file", cpName, container.KindUnreachable, errors.New("connection refused"))
	e.runtime.FailNext(fakeruntime.OpReadFile, away)
	res, err := NewMachine(e.deps.config()).Reconcile(ctx, s)
	if err != nil {
		t.Fatalf("want no error, got %v", err)
	}
	if res.RequeueAfter == 0 || res.RequeueAfter > containerRecheck {
		t.Fatalf("want a look again within %s, got %+v", containerRecheck, res)
	}
	if c := TerminalCondition(s.ContainerMachine); c != nil {
		t.Fatalf("the machine failed for good: %s %s", c.Type, c.Reason)
	}
}
