package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"
)

// ImageTransferTimeout bounds SaveImages (until its archive is closed) and
// LoadImages under WithCallTimeout. Their duration grows with the images'
// size (a node image is about a gigabyte, and it goes through the engine
// twice when preloaded), so the bound of an API round trip would cut them
// off; ten minutes is room for a few gigabytes on a loaded small host.
const ImageTransferTimeout = 10 * time.Minute

// WithCallTimeout returns rt with every call bounded by d, so that an engine
// that hangs cannot hold a reconcile worker. A call cut off by the bound
// fails with an error for which IsUnreachable is true: to its caller an
// engine that does not answer is an engine that is away.
//
// Exceptions, each because the call's own work is longer than a round trip:
// Exec gets the longer of its ExecInput.Timeout and d; an Exec without a
// timeout whose context already has a deadline (a bootstrap step under the
// bootstrap timeout) keeps that deadline alone. SaveImages and LoadImages
// get ImageTransferTimeout, and PullImage ImagePullTimeout (cut off, a
// timeout error). Events is a stream that lives as long as its context and
// is not bounded. A d of 0 or less returns rt unchanged.
func WithCallTimeout(rt Runtime, d time.Duration) Runtime {
	if d <= 0 {
		return rt
	}
	return &boundedRuntime{rt: rt, bound: d}
}

// WithGatedCallTimeout is WithCallTimeout with gate in front of every call
// but Events: while the engine is known to be unreachable, calls fail at
// once (UnreachableGate). It is how remote engines are wrapped.
func WithGatedCallTimeout(rt Runtime, d time.Duration, gate *UnreachableGate) Runtime {
	return &boundedRuntime{rt: rt, bound: d, gate: gate}
}

type boundedRuntime struct {
	rt    Runtime
	bound time.Duration
	// gate, when set, fails calls at once while the engine is unreachable.
	gate *UnreachableGate
}

var _ Runtime = (*boundedRuntime)(nil)

// gated runs fn when gate admits it and records what fn found of the
// engine; a nil gate admits every call.
func gated[T any](ctx context.Context, gate *UnreachableGate, fn func() (T, error)) (T, error) {
	if err := gate.admit(); err != nil {
		var zero T
		return zero, err
	}
	v, err := fn()
	gate.observe(ctx, err)
	return v, err
}

// call runs fn, when gate admits it, under a context bounded by d, and
// reclassifies its error when the bound, not the caller's context, ended it.
func call[T any](ctx context.Context, gate *UnreachableGate, d time.Duration, fn func(context.Context) (T, error)) (T, error) {
	return gated(ctx, gate, func() (T, error) {
		bctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		v, err := fn(bctx)
		return v, unanswered(ctx, bctx, d, err)
	})
}

// unanswered turns an error caused by the bound's deadline into an
// unreachable error. A command that outlived its own ExecInput.Timeout
// stays a timeout error, and the caller's own cancellation stays as it is.
func unanswered(ctx, bctx context.Context, d time.Duration, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(bctx.Err(), context.DeadlineExceeded) || IsTimeout(err) {
		return err
	}
	cause := fmt.Errorf("the container engine did not answer within %s: %w", d, err)
	var e *Error
	if errors.As(err, &e) {
		return &Error{Op: e.Op, Object: e.Object, Name: e.Name, Kind: KindUnreachable, Err: cause}
	}
	return &Error{Op: "call", Object: "container engine", Kind: KindUnreachable, Err: cause}
}

func noValue(fn func(context.Context) error) func(context.Context) (struct{}, error) {
	return func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }
}

func (b *boundedRuntime) EnsureNetwork(ctx context.Context, spec NetworkSpec) (Network, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (Network, error) { return b.rt.EnsureNetwork(ctx, spec) })
}

func (b *boundedRuntime) InspectNetwork(ctx context.Context, name string) (Network, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (Network, error) { return b.rt.InspectNetwork(ctx, name) })
}

func (b *boundedRuntime) DeleteNetwork(ctx context.Context, name string, owner Owner) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.DeleteNetwork(ctx, name, owner) }))
	return err
}

func (b *boundedRuntime) LocalSubnets(ctx context.Context) ([]netip.Prefix, error) {
	return call(ctx, b.gate, b.bound, b.rt.LocalSubnets)
}

func (b *boundedRuntime) CreateMachine(ctx context.Context, spec MachineSpec) (*Machine, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (*Machine, error) { return b.rt.CreateMachine(ctx, spec) })
}

func (b *boundedRuntime) Start(ctx context.Context, name string, owner Owner) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.Start(ctx, name, owner) }))
	return err
}

func (b *boundedRuntime) Delete(ctx context.Context, name string, owner Owner) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.Delete(ctx, name, owner) }))
	return err
}

func (b *boundedRuntime) Signal(ctx context.Context, name string, owner Owner, signal string) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.Signal(ctx, name, owner, signal) }))
	return err
}

func (b *boundedRuntime) Inspect(ctx context.Context, name string) (*Machine, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (*Machine, error) { return b.rt.Inspect(ctx, name) })
}

func (b *boundedRuntime) List(ctx context.Context, labelSelector map[string]string) ([]Machine, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) ([]Machine, error) { return b.rt.List(ctx, labelSelector) })
}

func (b *boundedRuntime) Exec(ctx context.Context, name string, owner Owner, in ExecInput) (ExecResult, error) {
	if _, hasDeadline := ctx.Deadline(); in.Timeout <= 0 && hasDeadline {
		return gated(ctx, b.gate, func() (ExecResult, error) { return b.rt.Exec(ctx, name, owner, in) })
	}
	return call(ctx, b.gate, max(in.Timeout, b.bound), func(ctx context.Context) (ExecResult, error) { return b.rt.Exec(ctx, name, owner, in) })
}

func (b *boundedRuntime) WriteFile(ctx context.Context, name string, owner Owner, path string, content []byte, mode os.FileMode) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.WriteFile(ctx, name, owner, path, content, mode) }))
	return err
}

func (b *boundedRuntime) ReadFile(ctx context.Context, name string, owner Owner, path string) ([]byte, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) ([]byte, error) { return b.rt.ReadFile(ctx, name, owner, path) })
}

func (b *boundedRuntime) Info(ctx context.Context) (EngineInfo, error) {
	return call(ctx, b.gate, b.bound, b.rt.Info)
}

func (b *boundedRuntime) ImageExists(ctx context.Context, ref string) (bool, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (bool, error) { return b.rt.ImageExists(ctx, ref) })
}

func (b *boundedRuntime) ImageID(ctx context.Context, ref string) (string, error) {
	return call(ctx, b.gate, b.bound, func(ctx context.Context) (string, error) { return b.rt.ImageID(ctx, ref) })
}

func (b *boundedRuntime) TagImage(ctx context.Context, id, ref string) error {
	_, err := call(ctx, b.gate, b.bound, noValue(func(ctx context.Context) error { return b.rt.TagImage(ctx, id, ref) }))
	return err
}

// SaveImages keeps its bound until the archive is closed: the engine
// streams the archive after the call returns.
func (b *boundedRuntime) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	return gated(ctx, b.gate, func() (io.ReadCloser, error) {
		bctx, cancel := context.WithTimeout(ctx, ImageTransferTimeout)
		rc, err := b.rt.SaveImages(bctx, refs)
		if err != nil {
			defer cancel()
			return nil, unanswered(ctx, bctx, ImageTransferTimeout, err)
		}
		return &cancelOnClose{ReadCloser: rc, cancel: cancel}, nil
	})
}

// LoadImages gets ImageTransferTimeout, as SaveImages does: the engine
// reads the whole archive within the call.
func (b *boundedRuntime) LoadImages(ctx context.Context, tar io.Reader) error {
	_, err := call(ctx, b.gate, ImageTransferTimeout, noValue(func(ctx context.Context) error { return b.rt.LoadImages(ctx, tar) }))
	return err
}

// PullImage gets ImagePullTimeout: a pull lasts as long as the registry
// and the network make it. One cut off by the bound is a timeout error,
// not an unreachable one: the engine was answering all along, and a slow
// registry must not mark the engine away.
func (b *boundedRuntime) PullImage(ctx context.Context, ref string, opts PullOptions) error {
	_, err := gated(ctx, b.gate, func() (struct{}, error) {
		bctx, cancel := context.WithTimeout(ctx, ImagePullTimeout)
		defer cancel()
		err := b.rt.PullImage(bctx, ref, opts)
		if err != nil && ctx.Err() == nil && errors.Is(bctx.Err(), context.DeadlineExceeded) && !IsUnreachable(err) {
			err = NewError("pull", "image", ref, KindTimeout, fmt.Errorf("the pull did not finish within %s: %w", ImagePullTimeout, err))
		}
		return struct{}{}, err
	})
	return err
}

// Events is not bounded: it streams for as long as ctx lives.
func (b *boundedRuntime) Events(ctx context.Context, labelSelector map[string]string) (<-chan Event, error) {
	return b.rt.Events(ctx, labelSelector)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}
