package realcluster

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Timeline records the states objects pass through: one entry per change
// of an object's state, as a sampler sees them. It is safe for one
// sampler and concurrent readers.
type Timeline struct {
	mu      sync.Mutex
	last    map[string]string
	entries []Entry
}

// Entry is one change: at At the object (such as "container x" or "Node
// y") was in State.
type Entry struct {
	At            time.Time
	Object, State string
}

// TSV is the entry as a line of the states file: epoch seconds, object and
// state, tab separated.
func (e Entry) TSV() string { return fmt.Sprintf("%d\t%s\t%s\n", e.At.Unix(), e.Object, e.State) }

// Record notes object in state at at, and returns the entry when that is a
// change (the first state seen counts as one).
func (tl *Timeline) Record(at time.Time, object, state string) (Entry, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if last, ok := tl.last[object]; ok && last == state {
		return Entry{}, false
	}
	if tl.last == nil {
		tl.last = map[string]string{}
	}
	tl.last[object] = state
	e := Entry{At: at, Object: object, State: state}
	tl.entries = append(tl.entries, e)
	return e, true
}

// First is when object first entered state at or after since.
func (tl *Timeline) First(object, state string, since time.Time) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.entries {
		if e.Object == object && e.State == state && !e.At.Before(since) {
			return e.At, true
		}
	}
	return time.Time{}, false
}

// Table is the states each object passed through, objects in the order
// they were first seen, each change at its whole seconds since t0.
func (tl *Timeline) Table(t0 time.Time) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var order []string
	seq := map[string]*strings.Builder{}
	for _, e := range tl.entries {
		b, ok := seq[e.Object]
		if !ok {
			b = &strings.Builder{}
			seq[e.Object] = b
			order = append(order, e.Object)
		}
		fmt.Fprintf(b, "\n      %+5ds  %s", e.At.Unix()-t0.Unix(), e.State)
	}
	var out strings.Builder
	for _, o := range order {
		fmt.Fprintf(&out, "  %s%s\n", o, seq[o])
	}
	return out.String()
}
