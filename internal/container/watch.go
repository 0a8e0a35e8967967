package container

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Backoff between attempts to open the event stream again.
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// WatchEvents calls handle for every event of rt.Events(ctx, selector) until
// ctx ends. Unlike Events it never gives up: when the stream cannot be
// opened (the engine is away, as when the manager starts before it) or
// ends, it opens it again after a backoff that doubles from 100ms to 5s and
// starts over once an event arrives. onError, when not nil, learns of each
// failure to open. clk times the backoff; nil means the real clock.
func WatchEvents(ctx context.Context, rt Runtime, selector map[string]string, clk clock.WithTicker, handle func(Event), onError func(error)) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	backoff := watchBackoffMin
	for ctx.Err() == nil {
		events, err := rt.Events(ctx, selector)
		switch {
		case err != nil && onError != nil:
			onError(err)
		case err == nil:
			for ev := range events {
				backoff = watchBackoffMin
				handle(ev)
			}
		}
		t := clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backoff = min(backoff*2, watchBackoffMax)
	}
}
