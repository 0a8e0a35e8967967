package machineprovider

import (
	"errors"
	"time"
)

// WaitError says why a machine's container cannot be created yet and when
// to look again. It is waiting, not failing: what it waits for (an engine,
// room on the host, an image, a change of the object or of the manager's
// flags) may come, and no launch timeout counts meanwhile. Reason is the
// Launched condition's.
type WaitError struct {
	Reason  string
	Message string
	// RequeueAfter is how soon to look again; 0 waits for a change of the
	// object or a restart of the manager to bring the machine back.
	RequeueAfter time.Duration
	// Announce asks the lifecycle to tell the machine's ContainerCluster,
	// once for all its machines, as when the host is full.
	Announce bool
}

func (e *WaitError) Error() string { return e.Message }

// AsWait returns err's *WaitError, if it is one.
func AsWait(err error) (*WaitError, bool) {
	var w *WaitError
	ok := errors.As(err, &w)
	return w, ok
}

// RetryError says that a container that never ran was removed, because the
// engine refused the addresses it was made with, and must be created again
// at once on addresses picked anew. Its launch is still under way.
type RetryError struct{ Err error }

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }
