package diagnostics

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// Bounds of what is kept of one failed machine. Together they stay far
// below a Secret's 1 MiB, so that a pool that keeps the records of its last
// few failures holds a few hundred KiB in etcd at most.
const (
	// JournalLimit is how much of the end of the node's journal is kept.
	JournalLimit = 32 << 10
	// BootstrapLogLimit is how much of the end of the last bootstrap
	// attempt's log is kept.
	BootstrapLogLimit = 16 << 10
	// MarkLimit bounds each of the last bootstrap attempt's exit mark and
	// diagnostics.
	MarkLimit = 8 << 10
	// journalLines is how many journal lines are asked for; JournalLimit
	// cuts them further.
	journalLines = 2000
	// journalTimeout bounds the journalctl command in the node.
	journalTimeout = 15 * time.Second
	// collectTimeout bounds one collection, so that an engine that
	// answers slowly cannot hold the caller's worker for long.
	collectTimeout = 45 * time.Second
)

// Keys of a record's data (NodeLogs.Data).
const (
	KeySummary              = "summary"
	KeyNotes                = "notes"
	KeyJournal              = "journal"
	KeyBootstrapExit        = "bootstrap-exit"
	KeyBootstrapDiagnostics = "bootstrap-diagnostics"
	KeyBootstrapLog         = "bootstrap-log"
)

// NodeLogs is what a failed machine's node container still tells about its
// failure, each part bounded. A part that could not be read is empty and a
// note says why.
type NodeLogs struct {
	// Journal is the end of the node's systemd journal (the kubelet,
	// containerd and systemd's own units): read only while the container
	// runs.
	Journal []byte
	// BootstrapExit, BootstrapDiagnostics and BootstrapLog are the marks
	// of the last bootstrap attempt (docs/bootstrap.md), read from the
	// node's /var, which outlives a stopped container.
	BootstrapExit, BootstrapDiagnostics, BootstrapLog []byte
	// Notes say, in CAPCT's words, what could not be read and why.
	Notes []string
}

// CollectNodeLogs reads what the node container name still holds: the
// marks of its last bootstrap attempt, and the end of its journal when it
// runs. It never fails: whatever cannot be read (the container is gone,
// stopped, or its engine does not answer) is a note, so that a machine
// that failed for good is never kept alive because its logs are gone with
// it. Only reads: nothing in the node changes.
func CollectNodeLogs(ctx context.Context, rt container.Runtime, name string, owner container.Owner) NodeLogs {
	ctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	var l NodeLogs
	c, err := rt.Inspect(ctx, name)
	switch {
	case container.IsNotFound(err):
		l.note("the container %s is gone: there are no logs to keep", name)
		return l
	case err != nil:
		l.note("the container %s could not be inspected: %v", name, err)
		return l
	}
	l.readBootstrap(ctx, rt, name, owner)
	if c.State != container.StateRunning {
		l.note("the container %s is %s: its journal cannot be read", name, c.State)
		return l
	}
	res, err := rt.Exec(ctx, name, owner, container.ExecInput{
		Cmd:       []string{"journalctl", "--no-pager", "--output=short-iso", "--lines=" + strconv.Itoa(journalLines)},
		Timeout:   journalTimeout,
		MaxOutput: JournalLimit,
	})
	switch {
	case err != nil:
		l.note("the journal of %s could not be read: %v", name, err)
	case res.ExitCode != 0:
		l.note("journalctl in %s exited with code %d: %s", name, res.ExitCode, strings.TrimSpace(string(Tail(res.Stderr, 512))))
	default:
		l.Journal = Tail(res.Stdout, JournalLimit)
	}
	return l
}

// readBootstrap reads the marks of the last bootstrap attempt.
func (l *NodeLogs) readBootstrap(ctx context.Context, rt container.Runtime, name string, owner container.Owner) {
	b, err := rt.ReadFile(ctx, name, owner, provisioning.AttemptPath)
	switch {
	case container.IsNotFound(err):
		l.note("no bootstrap attempt was made in %s", name)
		return
	case err != nil:
		l.note("the bootstrap marks of %s could not be read: %v", name, err)
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		l.note("%s holds %q, not an attempt number", provisioning.AttemptPath, Tail(b, 64))
		return
	}
	marks := provisioning.Marks(n)
	for _, part := range []struct {
		path  string
		limit int
		into  *[]byte
	}{
		{marks.Exit, MarkLimit, &l.BootstrapExit},
		{marks.Diagnostics, MarkLimit, &l.BootstrapDiagnostics},
		{marks.Log, BootstrapLogLimit, &l.BootstrapLog},
	} {
		b, err := rt.ReadFile(ctx, name, owner, part.path)
		switch {
		case container.IsNotFound(err):
			// An attempt that is still running, or that succeeded, has no
			// exit mark or no diagnostics: nothing to say.
		case err != nil:
			l.note("%s in %s could not be read: %v", part.path, name, err)
		default:
			*part.into = Tail(b, part.limit)
		}
	}
}

func (l *NodeLogs) note(format string, args ...any) {
	l.Notes = append(l.Notes, fmt.Sprintf(format, args...))
}

// Data is the record's content: the summary (the caller's words on what
// failed) and each part under its key. Empty parts are left out.
func (l NodeLogs) Data(summary string) map[string][]byte {
	data := map[string][]byte{KeySummary: []byte(summary)}
	if len(l.Notes) > 0 {
		data[KeyNotes] = []byte(strings.Join(l.Notes, "\n") + "\n")
	}
	for key, b := range map[string][]byte{
		KeyJournal:              l.Journal,
		KeyBootstrapExit:        l.BootstrapExit,
		KeyBootstrapDiagnostics: l.BootstrapDiagnostics,
		KeyBootstrapLog:         l.BootstrapLog,
	} {
		if len(b) > 0 {
			data[key] = b
		}
	}
	return data
}

// Tail returns the last limit bytes of b. When it cuts, it starts at the
// first whole line within them, if there is one, so that a log does not
// begin mid-line.
func Tail(b []byte, limit int) []byte {
	if len(b) <= limit {
		return bytes.Clone(b)
	}
	t := b[len(b)-limit:]
	if i := bytes.IndexByte(t, '\n'); i >= 0 && i < len(t)-1 {
		t = t[i+1:]
	}
	return bytes.Clone(t)
}
