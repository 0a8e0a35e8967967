package container_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// flakyEvents is an engine whose event stream is away at first, then
// breaks after one event, then stays.
type flakyEvents struct {
	container.Runtime
	mu    sync.Mutex
	calls int
}

func (f *flakyEvents) Events(ctx context.Context, _ map[string]string) (<-chan container.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	switch f.calls {
	case 1:
		return nil, container.NewError("watch", "events", "", container.KindUnreachable, errors.New("connection refused"))
	case 2:
		ch := make(chan container.Event, 1)
		ch <- container.Event{Type: container.EventDie, Name: "c1-cp-0"}
		close(ch) // the engine went away mid-stream
		return ch, nil
	}
	ch := make(chan container.Event, 1)
	ch <- container.Event{Type: container.EventStart, Name: "c1-cp-0"}
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func TestWatchEventsOutlastsTheEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan container.Event, 10)
	var failures int
	done := make(chan struct{})
	go func() {
		defer close(done)
		container.WatchEvents(ctx, &flakyEvents{}, nil, nil,
			func(ev container.Event) { got <- ev },
			func(error) { failures++ })
	}()
	for _, want := range []container.EventType{container.EventDie, container.EventStart} {
		select {
		case ev := <-got:
			if ev.Type != want {
				t.Fatalf("want a %s event, got %+v", want, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event: the watch did not open the stream again", want)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
	if failures != 1 {
		t.Fatalf("want the one failure to open reported, got %d", failures)
	}
}
