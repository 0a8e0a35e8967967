package container_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// hangingRuntime is an engine that never answers: every call blocks until
// its context ends and reports what ended it, as the Docker client does.
// It records the deadline each call saw.
type hangingRuntime struct {
	container.Runtime // calls not overridden here panic: the test must not reach them
	deadlines         chan time.Duration
}

func (h *hangingRuntime) hang(ctx context.Context, op string) error {
	if d, ok := ctx.Deadline(); ok {
		h.deadlines <- time.Until(d)
	} else {
		h.deadlines <- -1
	}
	<-ctx.Done()
	return container.NewError(op, "container", "c1-cp-0", container.KindTransient, ctx.Err())
}

func (h *hangingRuntime) Inspect(ctx context.Context, _ string) (*container.Machine, error) {
	return nil, h.hang(ctx, "inspect")
}

func (h *hangingRuntime) Exec(ctx context.Context, _ string, _ container.Owner, in container.ExecInput) (container.ExecResult, error) {
	if in.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.Timeout)
		defer cancel()
		if err := h.hang(ctx, "exec in"); errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return container.ExecResult{}, container.NewError("exec in", "container", "c1-cp-0", container.KindTimeout, err)
		}
	}
	return container.ExecResult{}, h.hang(ctx, "exec in")
}

func (h *hangingRuntime) SaveImages(ctx context.Context, _ []string) (io.ReadCloser, error) {
	h.deadlines <- 0
	// The archive streams after the call returns, as long as ctx lives.
	return &ctxReader{ctx: ctx}, nil
}

func (h *hangingRuntime) Events(ctx context.Context, _ map[string]string) (<-chan container.Event, error) {
	if _, ok := ctx.Deadline(); ok {
		return nil, errors.New("the event stream got a deadline")
	}
	return make(chan container.Event), nil
}

type ctxReader struct{ ctx context.Context }

func (r *ctxReader) Read([]byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return 0, nil
}
func (r *ctxReader) Close() error { return nil }

func TestWithCallTimeoutBoundsAHangingCall(t *testing.T) {
	h := &hangingRuntime{deadlines: make(chan time.Duration, 10)}
	rt := container.WithCallTimeout(h, 200*time.Millisecond)
	start := time.Now()
	_, err := rt.Inspect(context.Background(), "c1-cp-0")
	took := time.Since(start)
	if took > 2*time.Second {
		t.Fatalf("a hanging Inspect returned after %s under a 200ms bound", took)
	}
	if !container.IsUnreachable(err) {
		t.Fatalf("want an unreachable error for an engine that does not answer, got %v", err)
	}
	if !strings.Contains(err.Error(), `failed to inspect container "c1-cp-0"`) || !strings.Contains(err.Error(), "did not answer within 200ms") {
		t.Fatalf("the error does not say what did not answer: %v", err)
	}
	<-h.deadlines

	// The caller's own cancellation stays a cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-h.deadlines; cancel() }()
	if _, err := rt.Inspect(ctx, "c1-cp-0"); container.IsUnreachable(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want the caller's cancellation, got %v", err)
	}
}

func TestWithCallTimeoutLeavesLongerWorkItsOwnBound(t *testing.T) {
	h := &hangingRuntime{deadlines: make(chan time.Duration, 10)}
	rt := container.WithCallTimeout(h, 100*time.Millisecond)

	// An Exec with a longer timeout of its own keeps it, and outliving it
	// is the command's timeout, not an unreachable engine.
	start := time.Now()
	_, err := rt.Exec(context.Background(), "c1-cp-0", container.Owner{}, container.ExecInput{Cmd: []string{"sleep", "1"}, Timeout: 400 * time.Millisecond})
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("an Exec with a 400ms timeout was cut after %s by the 100ms bound", took)
	}
	if !container.IsTimeout(err) {
		t.Fatalf("want the command's timeout error, got %v", err)
	}
	<-h.deadlines

	// An Exec without a timeout under a caller's deadline keeps that deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _ = rt.Exec(ctx, "c1-cp-0", container.Owner{}, container.ExecInput{Cmd: []string{"kubeadm", "init"}})
	if d := <-h.deadlines; d < 150*time.Millisecond {
		t.Fatalf("an Exec under the caller's 300ms deadline saw %s left", d)
	}

	// An Exec with neither is bounded.
	_, err = rt.Exec(context.Background(), "c1-cp-0", container.Owner{}, container.ExecInput{Cmd: []string{"ip", "route"}})
	if d := <-h.deadlines; d <= 0 || d > 100*time.Millisecond || !container.IsUnreachable(err) {
		t.Fatalf("want an unbounded Exec bounded by 100ms, it saw %s and returned %v", d, err)
	}

	// A saved archive stays readable after the call returns, until closed.
	rc, err := rt.SaveImages(context.Background(), []string{"capct/node:v1.35.4"})
	if err != nil {
		t.Fatal(err)
	}
	<-h.deadlines
	time.Sleep(200 * time.Millisecond)
	if _, err := rc.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the archive was cut off by the call bound: %v", err)
	}
	_ = rc.Close()

	// The event stream is not bounded.
	if _, err := rt.Events(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}
