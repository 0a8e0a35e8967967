// Events: the engine's container events as the seam's, on a stream that
// reconnects and resumes after the last event seen.

package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/events"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Events implements container.Runtime. Stream errors (the engine stopping
// or restarting among them) are retried with an exponential backoff (100ms
// doubling to 5s) timed by the injected clock, resuming from the last event
// seen, or from the moment the stream first opened when none was, so that
// the events in between are not lost as long as the engine still holds them
// (a restarted engine holds those since its start: the restarts of
// containers under their restart policies).
func (r *Runtime) Events(ctx context.Context, labelSelector map[string]string) (<-chan container.Event, error) {
	// Fail fast when the engine is not there at all; container.WatchEvents
	// retries. A versioned request, not a ping: it settles the client's API
	// version negotiation first, which the client's event stream reads
	// without the lock the negotiation writes under (a data race when the
	// stream opens before any other call, as on a newly connected engine).
	if _, err := r.cli.ServerVersion(ctx); err != nil {
		return nil, wrap("watch", "events", fmt.Sprint(labelSelector), err)
	}
	f := labelFilters(labelSelector)
	f.Add("type", string(events.ContainerEventType))
	for _, a := range []container.EventType{container.EventStart, container.EventDie, container.EventDestroy} {
		f.Add("event", r.eventName(a))
	}
	out := make(chan container.Event, 64)
	opened := r.clock.Now()
	since := ""
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		for {
			sctx, cancel := context.WithCancel(ctx)
			msgs, errs := r.cli.Events(sctx, events.ListOptions{Filters: f, Since: since})
			var received bool
			since, received = r.forwardEvents(ctx, msgs, errs, labelSelector, out, since)
			if received {
				backoff = 100 * time.Millisecond
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			if since == "" {
				since = fmt.Sprintf("%d.%09d", opened.Unix(), opened.Nanosecond())
			}
			t := r.clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
	return out, nil
}

// forwardEvents sends the events of one stream that match labelSelector to
// out, until the stream or ctx ends. It returns where a new stream resumes,
// just after the last event received (since when none came), and whether
// any came, which resets the reconnects' backoff.
func (r *Runtime) forwardEvents(ctx context.Context, msgs <-chan events.Message, errs <-chan error,
	labelSelector map[string]string, out chan<- container.Event, since string) (string, bool) {
	received := false
	for {
		select {
		case <-ctx.Done():
			return since, received
		case <-errs: //nolint:errcheck // whatever ended the stream, Events reconnects from the last event seen
			return since, received
		case m := <-msgs:
			received = true
			// Resume strictly after this event after a reconnect.
			if m.TimeNano > 0 {
				since = fmt.Sprintf("%d.%09d", (m.TimeNano+1)/1e9, (m.TimeNano+1)%1e9)
			}
			ev, ok := r.event(m, labelSelector)
			if !ok {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return since, received
			}
		}
	}
}

// event is the engine's event m as the seam's, and whether its container's
// labels match labelSelector. The event's attributes hold the container's
// labels and keys of the engine's own (notLabels).
func (r *Runtime) event(m events.Message, labelSelector map[string]string) (container.Event, bool) {
	attrs := m.Actor.Attributes
	labels := map[string]string{}
	for k, v := range attrs {
		if !notLabels[k] {
			labels[k] = v
		}
	}
	if !container.MatchesSelector(labels, labelSelector) {
		return container.Event{}, false
	}
	return container.Event{Type: r.eventType(string(m.Action)), Name: attrs["name"], ID: m.Actor.ID,
		Labels: labels, Time: time.Unix(0, m.TimeNano)}, true
}
