// Events: the subscribers to the fake's container events, and how each
// event reaches them.

package fake

import (
	"context"
	"maps"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

type subscriber struct {
	ctx      context.Context
	selector map[string]string
	ch       chan container.Event
}

func (r *Runtime) emitLocked(t container.EventType, c *fakeContainer) {
	ev := container.Event{Type: t, Name: c.m.Name, ID: c.m.ID, Labels: maps.Clone(c.m.Labels), Time: r.clock.Now()}
	live := r.subs[:0]
	for _, s := range r.subs {
		if s.ctx.Err() != nil {
			close(s.ch)
			continue
		}
		live = append(live, s)
		if container.MatchesSelector(ev.Labels, s.selector) {
			select {
			case s.ch <- ev:
			default: // A subscriber that lets 1024 events pile up loses some.
			}
		}
	}
	r.subs = live
}

// Events implements container.Runtime. The channel holds up to 1024 events
// not yet received; more are dropped.
func (r *Runtime) Events(ctx context.Context, labelSelector map[string]string) (<-chan container.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpEvents); err != nil {
		return nil, err
	}
	s := &subscriber{ctx: ctx, selector: maps.Clone(labelSelector), ch: make(chan container.Event, 1024)}
	r.subs = append(r.subs, s)
	go func() {
		<-ctx.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, x := range r.subs {
			if x == s {
				r.subs = append(r.subs[:i], r.subs[i+1:]...)
				close(s.ch)
				return
			}
		}
	}()
	return s.ch, nil
}
