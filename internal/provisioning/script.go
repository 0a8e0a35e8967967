package provisioning

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// A plan runs in its node container as one detached shell script, so that it
// outlives the exec session that started it and the manager that asked for
// it. CAPCT stages the plan's file contents and the script under RunDir (on
// /var, which survives a restart of the container) and starts the script
// once per attempt; the script leaves marks that tell CAPCT, even after a
// restart of the manager, whether an attempt started, is still running in
// this boot of the container, or ended, and how.
const (
	// RunDir holds the staged run and the marks of every attempt.
	RunDir = "/var/lib/capct/bootstrap"
	// ScriptPath is the script of the run (see Script).
	ScriptPath = RunDir + "/run.sh"
	// AttemptPath holds the number of the latest attempt CAPCT asked for. It
	// is written before the attempt is started, so an attempt that was
	// asked for but never claimed is started again, not forgotten.
	AttemptPath = RunDir + "/attempt"
	// aliveDir is on /run, a tmpfs in node containers: its marks vanish when
	// the container restarts.
	aliveDir = "/run/capct"
	// stagedDir holds the contents of the plan's files.
	stagedDir = RunDir + "/files"
)

// RuntimeWaitSeconds bounds how long an attempt waits for the container
// runtime's CRI to answer before it fails as not ready.
const RuntimeWaitSeconds = 60

// RetryBackoffSeconds is how long attempt n waits, times n-1, before it
// undoes the previous attempt and starts again (the script's environment
// may override it with CAPCT_RETRY_BACKOFF_SECONDS, as tests do).
const RetryBackoffSeconds = 5

// Where a failed attempt stopped, as recorded in its exit mark.
const (
	// WhereRuntime: the container runtime's CRI did not answer in time.
	WhereRuntime = "runtime"
	// WhereReset: undoing the previous attempt (kubeadm reset) failed.
	WhereReset = "reset"
	// WhereFile: writing one of the plan's files failed.
	WhereFile = "file"
	// WhereStep: one of the plan's commands exited non-zero.
	WhereStep = "step"
	// WhereSentinel: every step passed but SentinelPath is missing.
	WhereSentinel = "sentinel"
	// WhereDone: the attempt succeeded.
	WhereDone = "done"
)

// AttemptMarks are the paths of one attempt's marks.
type AttemptMarks struct {
	// Started is written by the run as it claims the attempt; it holds the
	// run's process id, which is also its process group (setsid).
	Started string
	// Alive is written on /run just before the claim: a Started mark
	// without it means the container restarted during the attempt.
	Alive string
	// Exit is written last; see ParseExit.
	Exit string
	// Output holds the output of the command that ran last (bounded).
	Output string
	// Log holds the attempt's whole output (bounded).
	Log string
	// Diagnostics holds what the run collected from the node on failure:
	// containerd's and the kubelet's journals, the CRI plugin's status and
	// the host's inotify limits (bounded).
	Diagnostics string
}

// Marks returns the paths of attempt n's marks.
func Marks(n int) AttemptMarks {
	dir := fmt.Sprintf("%s/attempts/%d", RunDir, n)
	return AttemptMarks{
		Started:     dir + "/started",
		Alive:       fmt.Sprintf("%s/bootstrap-attempt-%d", aliveDir, n),
		Exit:        dir + "/exit",
		Output:      dir + "/output",
		Log:         dir + "/log",
		Diagnostics: dir + "/diagnostics",
	}
}

// Exit is an attempt's exit mark: "<code> <where>[:<step>] <label>".
type Exit struct {
	// Code is the exit code of what failed; 0 when the attempt succeeded.
	Code int
	// Where is one of the Where constants.
	Where string
	// Step is the 1-based index of the failed step for WhereFile and
	// WhereStep.
	Step int
	// Label names what failed in CAPCT's words (see StepLabel); it never
	// holds bootstrap data.
	Label string
}

// ParseExit reads an exit mark. It returns false for an empty or partly
// written mark, which the caller treats as not yet written.
func ParseExit(b []byte) (Exit, bool) {
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		return Exit{}, false
	}
	fields := strings.SplitN(strings.TrimSuffix(s, "\n"), " ", 3)
	if len(fields) < 2 {
		return Exit{}, false
	}
	code, err := strconv.Atoi(fields[0])
	if err != nil {
		return Exit{}, false
	}
	e := Exit{Code: code, Where: fields[1]}
	if w, step, ok := strings.Cut(fields[1], ":"); ok {
		n, err := strconv.Atoi(step)
		if err != nil || n < 1 {
			return Exit{}, false
		}
		e.Where, e.Step = w, n
	}
	if len(fields) == 3 {
		e.Label = fields[2]
	}
	return e, true
}

// String renders the mark as the script writes it.
func (e Exit) String() string {
	where := e.Where
	if e.Step > 0 {
		where += ":" + strconv.Itoa(e.Step)
	}
	return fmt.Sprintf("%d %s %s\n", e.Code, where, e.Label)
}

// StagedFile is a file CAPCT writes into the node container to run a plan.
type StagedFile struct {
	Path    string
	Content []byte
	Mode    os.FileMode
}

// Script renders steps as the files of a detached run: the content of each
// File step, staged under RunDir (mode 0600: they hold keys), then the
// script at ScriptPath, last. Writing them again is harmless: a running
// attempt has read what it needs.
//
// Each attempt of the script, started with LaunchCommand(n):
//
//  1. marks itself alive on /run and claims attempt n with an atomic mkdir,
//     so that a second launch of the same attempt exits at once;
//  2. waits for systemd to finish booting (when there is systemd), waits
//     RetryBackoffSeconds×(n-1), then for the CRI to answer, for at most
//     RuntimeWaitSeconds (`crictl info`, else `ctr plugins ls` showing the
//     cri plugin ok; images without either go on), restarting containerd
//     first on a retry whose runtime does not answer, since a CRI plugin
//     that failed to load never comes back by itself;
//  3. on a retry, undoes what the previous attempt left when kubeadm is
//     there: `kubeadm reset -f`, then what reset leaves (CNI
//     configuration, etcd's data, kubeconfigs, the sentinel);
//  4. writes every file (appends start again from the content the file had
//     before the first attempt, so nothing is appended twice) and runs
//     every command, stopping at the first failure;
//  5. checks SentinelPath, removes the staged contents and the script when
//     it succeeded, collects diagnostics when it failed, and writes its exit
//     mark.
//
// The script never traces its commands: bootstrap data reaches no log but
// the node's own.
func Script(steps []Step) []StagedFile {
	var files []StagedFile
	var b strings.Builder
	b.WriteString(scriptHeader)
	b.WriteString(stepsBegin + "\n")
	for i, s := range steps {
		k := i + 1
		if f := s.File; f != nil {
			staged := fmt.Sprintf("%s/%d", stagedDir, k)
			files = append(files, StagedFile{Path: staged, Content: f.Content, Mode: 0o600})
			verb := "write"
			if f.Append {
				verb = "append"
			}
			owner := f.Owner
			if owner == "root" || owner == "root:root" {
				owner = ""
			}
			words := []string{"capct_file", strconv.Itoa(k), quote(StepLabel(s)), quote(f.Path), chmodMode(f.Mode), quote(owner), verb}
			b.WriteString(strings.Join(words, " ") + "\n")
			continue
		}
		words := []string{"capct_step", strconv.Itoa(k), quote(StepLabel(s))}
		for _, a := range s.Command {
			words = append(words, quote(a))
		}
		b.WriteString(strings.Join(words, " ") + "\n")
	}
	b.WriteString(stepsEnd + "\n")
	b.WriteString(scriptFooter)
	return append(files, StagedFile{Path: ScriptPath, Content: []byte(b.String()), Mode: 0o700})
}

const (
	stepsBegin = "# --- steps ---"
	stepsEnd   = "# --- end of steps ---"
)

// scriptHeader is the fixed part of the script before the steps. It uses
// only POSIX sh and the commands every node image has (mkdir, cat, rm,
// chmod, sleep); tail, crictl, ctr, systemctl, journalctl and kubeadm are
// used when present.
var scriptHeader = strings.NewReplacer(
	"@DIR@", RunDir,
	"@ALIVE@", aliveDir,
	"@SENTINEL@", SentinelPath,
	"@RUNTIME_WAIT@", strconv.Itoa(RuntimeWaitSeconds),
	"@BACKOFF@", strconv.Itoa(RetryBackoffSeconds),
).Replace(`#!/bin/sh
# Written by CAPCT (cluster-api-provider-container): runs this machine's
# bootstrap data, at most once per attempt. Usage: run.sh ATTEMPT.
# CAPCT rewrites it before each attempt; the marks are under @DIR@/attempts.
set -u
d=@DIR@
n=$1
a=$d/attempts/$n
# The alive mark is on a tmpfs: an attempt that started (see below) but has
# neither an alive mark nor an exit mark was cut short by a restart.
mkdir -p @ALIVE@ && : > @ALIVE@/bootstrap-attempt-$n || exit 1
mkdir -p $d/attempts || exit 1
# mkdir is atomic: of several launches of one attempt only one claims it.
mkdir $a 2>/dev/null || exit 0
echo $$ > $a/started
exec >>$a/log 2>&1 </dev/null

# capct_bound FILE BYTES keeps the last BYTES of FILE.
capct_bound() {
	command -v tail >/dev/null 2>&1 || return 0
	[ "$(wc -c < "$1")" -gt "$2" ] || return 0
	tail -c "$2" "$1" > "$1.t" && cat "$1.t" > "$1" && rm -f "$1.t"
}

# capct_matching REGEX keeps the lines that match (all of them without grep);
# capct_last N keeps the last N lines (all of them without tail).
capct_matching() {
	if command -v grep >/dev/null 2>&1; then grep -iE "$1"; else cat; fi
}
capct_last() {
	if command -v tail >/dev/null 2>&1; then tail -n "$1"; else cat; fi
}

# capct_diagnose prints what tells why an attempt failed, for CAPCT to read.
capct_diagnose() {
	echo "== inotify limits (max_user_instances max_user_watches)"
	cat /proc/sys/fs/inotify/max_user_instances /proc/sys/fs/inotify/max_user_watches 2>&1
	if command -v ctr >/dev/null 2>&1; then
		echo "== ctr plugins ls"
		ctr --timeout 10s plugins ls 2>&1 | capct_matching 'status|error|cri'
	fi
	if command -v journalctl >/dev/null 2>&1; then
		echo "== journalctl -u containerd"
		journalctl -u containerd --no-pager -o cat -n 5000 2>&1 | capct_matching 'level=(error|fatal|warning)|fail|too many' | capct_last 60
		echo "== journalctl -u kubelet"
		journalctl -u kubelet --no-pager -o cat -n 2000 2>&1 | capct_matching '^[EF][0-9]{4} |fail|error' | capct_last 40
	fi
}

# capct_finish CODE WHERE LABEL writes the exit mark and ends the attempt.
capct_finish() {
	if [ "$1" -ne 0 ]; then
		capct_diagnose > $a/diagnostics 2>&1
		capct_bound $a/diagnostics 65536
	else
		rm -rf $d/files $d/run.sh
	fi
	capct_bound $a/log 262144
	echo "$1 $2 $3" > $a/exit
	exit 0
}

capct_runtime_answers() {
	if command -v crictl >/dev/null 2>&1; then
		crictl --timeout 10s info > $a/output 2>&1
		return
	fi
	command -v ctr >/dev/null 2>&1 || return 0
	ctr --timeout 10s plugins ls > $a/output 2>&1 || return 1
	while read -r type id platforms status; do
		[ "$type" = io.containerd.grpc.v1 ] && [ "$id" = cri ] && [ "$status" = ok ] && return 0
	done < $a/output
	return 1
}

capct_wait_for_runtime() {
	if [ "$n" -gt 1 ] && ! capct_runtime_answers && command -v systemctl >/dev/null 2>&1; then
		echo "capct: the container runtime does not answer; restarting containerd"
		systemctl restart containerd
	fi
	i=0
	until capct_runtime_answers; do
		i=$((i + 1))
		if [ $i -ge @RUNTIME_WAIT@ ]; then
			cat $a/output
			capct_finish 1 runtime 'container runtime'
		fi
		sleep 1
	done
}

capct_reset() {
	command -v kubeadm >/dev/null 2>&1 || return 0
	echo "capct: undoing attempt $((n - 1)) with kubeadm reset"
	kubeadm reset -f > $a/output 2>&1 || { rc=$?; cat $a/output; capct_finish $rc reset 'kubeadm reset'; }
	cat $a/output
	rm -rf /etc/cni/net.d/* /var/lib/etcd/* /root/.kube/config @SENTINEL@
}

# capct_file K LABEL PATH MODE OWNER write|append
capct_file() {
	echo "capct: step $1 ($2)"
	src=$d/files/$1
	mkdir -p "${3%/*}/" || capct_finish 1 file:$1 "$2"
	if [ "$6" = append ]; then
		# What the file held before the first attempt appended to it, kept
		# so that a retry appends to that and not to its own earlier append.
		# The .ok mark makes the copy count only once it is whole.
		if [ ! -e $src.before.ok ]; then
			{ if [ -e "$3" ]; then cat "$3"; fi; } > $src.before || capct_finish 1 file:$1 "$2"
			: > $src.before.ok
		fi
		cat $src.before "$src" > "$3" || capct_finish 1 file:$1 "$2"
	else
		cat "$src" > "$3" || capct_finish 1 file:$1 "$2"
	fi
	chmod "$4" "$3" || capct_finish 1 file:$1 "$2"
	if [ -n "$5" ]; then
		chown "$5" "$3" > $a/output 2>&1 || { rc=$?; cat $a/output; capct_finish $rc file:$1 "$2"; }
	fi
}

# capct_step K LABEL ARGV...
capct_step() {
	k=$1
	label=$2
	shift 2
	echo "capct: step $k ($label)"
	"$@" > $a/output 2>&1 </dev/null
	rc=$?
	capct_bound $a/output 65536
	cat $a/output
	capct_bound $a/log 262144
	[ $rc -eq 0 ] || capct_finish $rc step:$k "$label"
}

echo "capct: attempt $n"
if command -v systemctl >/dev/null 2>&1; then
	# Right after the container starts systemctl cannot reach systemd and
	# --wait returns at once, so it is asked again each second.
	i=0
	while [ $i -lt 300 ]; do
		case "$(systemctl is-system-running --wait 2>/dev/null)" in running|degraded) break ;; esac
		i=$((i + 1))
		sleep 1
	done
fi
if [ "$n" -gt 1 ]; then
	sleep $(( (n - 1) * ${CAPCT_RETRY_BACKOFF_SECONDS:-@BACKOFF@} ))
fi
capct_wait_for_runtime
if [ "$n" -gt 1 ]; then
	capct_reset
fi
mkdir -p /run/cluster-api
`)

var scriptFooter = strings.NewReplacer("@SENTINEL@", SentinelPath).Replace(`[ -e @SENTINEL@ ] || capct_finish 1 sentinel 'the bootstrap data'
capct_finish 0 done 'the bootstrap data'
`)

// chmodMode renders a FileMode as chmod's octal argument, with the setuid,
// setgid and sticky bits.
func chmodMode(m os.FileMode) string {
	v := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// quote makes s one shell word: in single quotes, each single quote inside
// closed, escaped and reopened.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// labelWord is what a program name must look like to be named in a label.
var labelWord = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,39}$`)

// kubeadmSubcommands are named in labels; other arguments never are, as
// they may carry tokens.
var kubeadmSubcommands = map[string]bool{"init": true, "join": true, "reset": true, "upgrade": true, "phase": true}

// StepLabel names a step for conditions, events and logs without any of
// its data: "write <path>" or "append to <path>" for a file, and for a
// command only the program's name ("kubeadm join", "sh -c", "sysctl"),
// taken from the script's first word for a shell string.
func StepLabel(s Step) string {
	if f := s.File; f != nil {
		if f.Append {
			return "append to " + f.Path
		}
		return "write " + f.Path
	}
	argv := s.Command
	if isShell(firstOr(argv)) && len(argv) >= 3 && argv[1] == "-c" {
		argv = strings.Fields(argv[2])
	}
	name := path.Base(firstOr(argv))
	if !labelWord.MatchString(name) || strings.Contains(name, "=") {
		return "a command"
	}
	if name == "kubeadm" && len(argv) > 1 && kubeadmSubcommands[argv[1]] {
		return name + " " + argv[1]
	}
	return name
}

func firstOr(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// LaunchCommand starts attempt n of the staged script detached from the
// exec session (setsid when the image has it), so the exec returns at once
// and the run outlives it and the manager.
func LaunchCommand(n int) []string {
	return []string{"/bin/sh", "-c", launcher, "capct-bootstrap", ScriptPath, strconv.Itoa(n)}
}

const launcher = `cd / || exit 1
if command -v setsid >/dev/null 2>&1; then
	setsid /bin/sh "$1" "$2" </dev/null >/dev/null 2>&1 &
else
	/bin/sh "$1" "$2" </dev/null >/dev/null 2>&1 &
fi`

// ParseLaunchCommand reports whether argv is LaunchCommand(n), and n.
func ParseLaunchCommand(argv []string) (int, bool) {
	if len(argv) != 6 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[2] != launcher || argv[3] != "capct-bootstrap" || argv[4] != ScriptPath {
		return 0, false
	}
	n, err := strconv.Atoi(argv[5])
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// ScriptStep is one step as a rendered script holds it.
type ScriptStep struct {
	// Index is the step's 1-based index.
	Index int
	// Label is StepLabel of the step.
	Label string
	// File is set for a file step; Staged is where its content is.
	File   *File
	Staged string
	// Command is set for a command step.
	Command []string
}

// ErrNotAScript means the bytes are not a script rendered by Script.
var ErrNotAScript = errors.New("not a CAPCT bootstrap script")

// ParseScript reads back the steps of a script rendered by Script. It lets
// a stand-in runtime (the fake) act as the script would without a shell.
// File contents are not in the script: File.Content is nil.
func ParseScript(b []byte) ([]ScriptStep, error) {
	s := string(b)
	begin := strings.Index(s, "\n"+stepsBegin+"\n")
	end := strings.Index(s, "\n"+stepsEnd+"\n")
	if begin < 0 || end < begin {
		return nil, ErrNotAScript
	}
	lines, err := splitWords(s[begin+len(stepsBegin)+2 : end+1])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAScript, err)
	}
	var steps []ScriptStep
	for _, words := range lines {
		if len(words) < 3 {
			return nil, fmt.Errorf("%w: short line %q", ErrNotAScript, words)
		}
		k, err := strconv.Atoi(words[1])
		if err != nil {
			return nil, fmt.Errorf("%w: bad step index %q", ErrNotAScript, words[1])
		}
		st := ScriptStep{Index: k, Label: words[2]}
		switch words[0] {
		case "capct_step":
			st.Command = words[3:]
		case "capct_file":
			if len(words) != 7 {
				return nil, fmt.Errorf("%w: file step %d has %d words", ErrNotAScript, k, len(words))
			}
			mode, err := strconv.ParseUint(words[4], 8, 32)
			if err != nil {
				return nil, fmt.Errorf("%w: bad mode %q", ErrNotAScript, words[4])
			}
			m, err := unixMode(int64(mode), words[4])
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrNotAScript, err)
			}
			st.File = &File{Path: words[3], Mode: m, Owner: words[5], Append: words[6] == "append"}
			st.Staged = fmt.Sprintf("%s/%d", stagedDir, k)
		default:
			return nil, fmt.Errorf("%w: unknown step %q", ErrNotAScript, words[0])
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// splitWords splits what quote and Script wrote into lines of words: words
// are bare or single-quoted, a backslash outside quotes escapes the next
// byte, and a newline outside quotes ends a line.
func splitWords(s string) ([][]string, error) {
	var lines [][]string
	var line []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			word.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(s):
			word.WriteByte(s[i+1])
			i++
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				line = append(line, word.String())
				word.Reset()
				inWord = false
			}
			if c == '\n' && len(line) > 0 {
				lines = append(lines, line)
				line = nil
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		line = append(line, word.String())
	}
	if len(line) > 0 {
		lines = append(lines, line)
	}
	return lines, nil
}
