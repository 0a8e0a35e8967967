package lifecycle

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// whereInterrupted is the Where of an attempt that has a start mark but
// neither an exit mark nor an alive mark: the container restarted during it.
const whereInterrupted = "interrupted"

// attemptFailure is what CAPCT knows of a failed bootstrap attempt: its exit
// mark, the output of the command that failed and what the run collected
// from the node (see provisioning.AttemptMarks).
type attemptFailure struct {
	Exit        provisioning.Exit
	Output      string
	Diagnostics string
}

// rootCause is a cause that can be read in the node, most specific first.
// Each pattern is matched against the node's diagnostics (containerd's and
// the kubelet's journals) and the failed command's output; the message is
// CAPCT's own words, with at most the submatches of the node's own log text.
type rootCause struct {
	pattern *regexp.Regexp
	message func(m []string) string
	// hostLimit marks a host limit: commands fail because of it, and may
	// pass once it is raised.
	hostLimit bool
}

// fixed is a message without submatches.
func fixed(msg string) func([]string) string { return func([]string) string { return msg } }

var rootCauses = []rootCause{
	{pattern: regexp.MustCompile(`(?i)failed to load plugin io\.containerd\.grpc\.v1\.cri.*too many open files`),
		message: fixed("containerd's CRI plugin failed to load: too many open files (raise fs.inotify.max_user_instances)"), hostLimit: true},
	{pattern: regexp.MustCompile(`(?i)failed to load plugin io\.containerd\.grpc\.v1\.cri.*no space left on device`),
		message: fixed("containerd's CRI plugin failed to load: no space left on device (raise fs.inotify.max_user_watches, or free disk space)"), hostLimit: true},
	{pattern: regexp.MustCompile(`(?i)failed to load plugin io\.containerd\.grpc\.v1\.cri"?\s*error="?([^"\n]{1,200})`),
		message: func(m []string) string { return "containerd's CRI plugin failed to load: " + strings.TrimSpace(m[1]) }},
	{pattern: regexp.MustCompile(`(?i)(inotify_add_watch|fsnotify|inotify)[^\n]*no space left on device`),
		message: fixed("inotify watches are exhausted: no space left on device (raise fs.inotify.max_user_watches)"), hostLimit: true},
	{pattern: regexp.MustCompile(`(?i)(inotify_init|inotify|fsnotify)[^\n]*too many open files`),
		message: fixed("inotify instances are exhausted: too many open files (raise fs.inotify.max_user_instances)"), hostLimit: true},
	{pattern: regexp.MustCompile(`(?i)too many open files`),
		message: fixed("too many open files in the node (raise fs.inotify.max_user_instances or the open file limit)"), hostLimit: true},
	{pattern: regexp.MustCompile(`(?i)failed to run kubelet: ([^\n]{1,200})`),
		message: func(m []string) string { return "the kubelet failed to start: " + strings.TrimSpace(m[1]) }},
}

// symptom is what kubeadm reports when the cause is not in the node's logs.
// Symptoms are matched against the failed command's output only: the
// kubelet's journal is full of refused connections while a control plane
// starts normally.
var symptoms = []rootCause{
	{pattern: regexp.MustCompile(`(?i)unknown service runtime\.v1\.(RuntimeService|ImageService)`),
		message: fixed("containerd does not serve the CRI: its cri plugin is not loaded")},
	{pattern: regexp.MustCompile(`(?i)container runtime is not running`),
		message: fixed("the container runtime is not running")},
	{pattern: regexp.MustCompile(`(?i)dial tcp ([^\s]+): connect: connection refused`),
		message: func(m []string) string {
			return fmt.Sprintf("%s refused the connection (the API server or etcd is not serving yet)", m[1])
		}},
	{pattern: regexp.MustCompile(`(?i)connection refused`),
		message: fixed("a connection was refused (the API server or etcd is not serving yet)")},
	{pattern: regexp.MustCompile(`(?i)(etcdserver: (request timed out|leader changed|no leader|too many requests))`),
		message: func(m []string) string { return "etcd was not ready: " + m[1] }},
	{pattern: regexp.MustCompile(`(?i)(TLS handshake timeout|i/o timeout|connection reset by peer|no route to host|http2: client connection lost|\bEOF\b)`),
		message: func(m []string) string { return "the connection to the API server failed: " + m[1] }},
	{pattern: regexp.MustCompile(`(?i)(the server is currently unable to handle the request|the server was unable to return a response|ServiceUnavailable)`),
		message: fixed("the API server was not ready to answer")},
	{pattern: regexp.MustCompile(`(?i)(timed out waiting for the condition|context deadline exceeded)`),
		message: fixed("kubeadm timed out waiting (the node or the control plane is slow or still starting)")},
	{pattern: regexp.MustCompile(`\[ERROR ([A-Za-z0-9._-]{1,80})\]`),
		message: func(m []string) string { return "kubeadm's preflight check " + m[1] + " failed" }},
}

// diagnose names the root cause of a failed attempt found in the node, in
// CAPCT's words, or returns "" when nothing is recognised.
func diagnose(f attemptFailure) string {
	for _, c := range rootCauses {
		for _, text := range []string{f.Diagnostics, f.Output} {
			if m := c.pattern.FindStringSubmatch(text); m != nil {
				return c.message(m)
			}
		}
	}
	for _, c := range symptoms {
		if m := c.pattern.FindStringSubmatch(f.Output); m != nil {
			return c.message(m)
		}
	}
	return ""
}

// transient are the failures of a kubeadm run that may pass on a retry: a
// runtime that is not ready yet, a control plane that is still starting, a
// host limit that an operator (or CAPCT's capacity check) may raise.
var transient = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`\[ERROR CRI\]`,
	`unknown service runtime\.v1\.`,
	`container runtime is not running`,
	`connection refused`,
	`connection reset by peer`,
	`no route to host`,
	`i/o timeout`,
	`TLS handshake timeout`,
	`http2: client connection lost`,
	`\bEOF\b`,
	`etcdserver: (request timed out|leader changed|no leader|too many requests)`,
	`context deadline exceeded`,
	`timed out waiting for the condition`,
	`the server is currently unable to handle the request`,
	`the server was unable to return a response`,
	`ServiceUnavailable`,
	`the object has been modified`,
	`too many open files`,
	`no space left on device`,
}, "|"))

// retryable tells whether a failed attempt may pass when tried again. The
// runtime not answering, an interrupted attempt and a failed reset may;
// so may a command whose output or node shows a transient cause. A file that
// cannot be written, a missing sentinel, a command that does not exist
// (126, 127) and any other failure come from the bootstrap data itself and
// would fail the same way again.
func retryable(f attemptFailure) bool {
	switch f.Exit.Where {
	case provisioning.WhereRuntime, provisioning.WhereReset, whereInterrupted:
		return true
	case provisioning.WhereStep:
		if f.Exit.Code == 126 || f.Exit.Code == 127 {
			return false
		}
		return transient.MatchString(f.Output) || rootCauseIn(f.Diagnostics)
	}
	return false
}

// rootCauseIn reports whether the node's diagnostics name a host limit that
// makes commands fail.
func rootCauseIn(diagnostics string) bool {
	for _, c := range rootCauses {
		if c.hostLimit && c.pattern.MatchString(diagnostics) {
			return true
		}
	}
	return false
}

// summary says, in CAPCT's words, how attempt n of maxAttempts failed:
// where, the root cause found in the node, and the tail of the failed
// command's output. It never holds bootstrap data.
func (f attemptFailure) summary(n, maxAttempts int) string {
	var where string
	e := f.Exit
	switch e.Where {
	case provisioning.WhereStep:
		where = fmt.Sprintf("in step %d (%s) with exit code %d", e.Step, e.Label, e.Code)
	case provisioning.WhereFile:
		where = fmt.Sprintf("in step %d (%s)", e.Step, e.Label)
	case provisioning.WhereRuntime:
		where = fmt.Sprintf("waiting %ds for the container runtime's CRI to answer", provisioning.RuntimeWaitSeconds)
	case provisioning.WhereReset:
		where = fmt.Sprintf("undoing the previous attempt (kubeadm reset, exit code %d)", e.Code)
	case provisioning.WhereSentinel:
		where = "at the end: the bootstrap data ran but did not write " + provisioning.SentinelPath
	case whereInterrupted:
		where = "because the container restarted during it"
	default:
		where = fmt.Sprintf("(%s, exit code %d)", e.Where, e.Code)
	}
	msg := fmt.Sprintf("Bootstrap attempt %d of %d failed %s", n, maxAttempts, where)
	if cause := diagnose(f); cause != "" {
		msg += ": " + cause
	}
	if strings.TrimSpace(f.Output) != "" {
		msg += ". Output: " + tail([]byte(f.Output))
	}
	return msg
}

// tail keeps the end of a command's output for a condition message: the
// cause of a kubeadm failure is in its last lines.
func tail(outputs ...[]byte) string {
	const keep = 1024
	for _, out := range outputs {
		s := strings.TrimSpace(string(out))
		if s == "" {
			continue
		}
		if len(s) > keep {
			s = "…" + s[len(s)-keep:]
		}
		return s
	}
	return "no output"
}
