package container

// Bounds on what a container can make the manager hold in memory. What runs
// in a node belongs to whoever controls the workload cluster, so neither a
// command's output nor a file's size is the manager's to trust.
const (
	// MaxExecOutput is how much of each of a command's stdout and stderr
	// Exec keeps unless ExecInput.MaxOutput says otherwise: the last bytes,
	// where a failing command says why.
	MaxExecOutput = 1 << 20
	// MaxFileSize bounds what ReadFile returns; a larger file is an error
	// for which IsInvalid is true.
	MaxFileSize = 16 << 20
)

// TailBuffer is an io.Writer that keeps the last Limit bytes written to it,
// holding at most twice that, so that a command's output costs bounded
// memory however much it writes.
type TailBuffer struct {
	// Limit is how many bytes to keep; it must be positive.
	Limit int

	buf       []byte
	truncated bool
}

// Write keeps the tail of what has been written; it never fails.
func (b *TailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.Limit {
		b.truncated = b.truncated || len(b.buf) > 0 || len(p) > b.Limit
		b.buf = append(b.buf[:0], p[len(p)-b.Limit:]...)
		return n, nil
	}
	b.buf = append(b.buf, p...)
	if excess := len(b.buf) - b.Limit; excess > b.Limit {
		b.truncated = true
		b.buf = b.buf[:copy(b.buf, b.buf[excess:])]
	}
	return n, nil
}

// Bytes returns the last Limit bytes written.
func (b *TailBuffer) Bytes() []byte {
	if excess := len(b.buf) - b.Limit; excess > 0 {
		return b.buf[excess:]
	}
	return b.buf
}

// Truncated reports whether more than Limit bytes were written, so that
// Bytes lacks their beginning.
func (b *TailBuffer) Truncated() bool { return b.truncated || len(b.buf) > b.Limit }

// OutputLimit is the bound Exec applies to each of the command's stdout and
// stderr: in.MaxOutput, or MaxExecOutput when that is not positive.
func (in ExecInput) OutputLimit() int {
	if in.MaxOutput > 0 {
		return in.MaxOutput
	}
	return MaxExecOutput
}

// BoundOutput cuts a result's stdout and stderr to their last limit bytes,
// as Exec does, for runtimes that get whole outputs at once.
func BoundOutput(res ExecResult, limit int) ExecResult {
	for _, out := range []*[]byte{&res.Stdout, &res.Stderr} {
		if len(*out) > limit {
			*out = (*out)[len(*out)-limit:]
			res.Truncated = true
		}
	}
	return res
}
