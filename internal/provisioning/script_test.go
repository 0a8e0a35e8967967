package provisioning

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestScriptRoundTrip(t *testing.T) {
	steps, err := Plan(FormatCloudConfig, []byte(cabpkInit), Vars{Hostname: "node-0"})
	if err != nil {
		t.Fatal(err)
	}
	steps = append(steps, Step{File: &File{Path: "/opt/it's here", Content: []byte("x"), Mode: 0o755 | os.ModeSetuid, Owner: "capi:capi"}},
		cmd("", "printf", "%s\n", "a 'quoted'\nword", `back\slash`, ""))
	files := Script(steps)
	if last := files[len(files)-1]; last.Path != ScriptPath || last.Mode != 0o700 {
		t.Fatalf("the script must be written last, got %s %o", last.Path, last.Mode)
	}
	got, err := ParseScript(files[len(files)-1].Content)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(steps) {
		t.Fatalf("got %d steps back, want %d", len(got), len(steps))
	}
	staged := map[string][]byte{}
	for _, f := range files[:len(files)-1] {
		if f.Mode != 0o600 || !strings.HasPrefix(f.Path, RunDir+"/") {
			t.Errorf("staged file %s: mode %o, want 0600 under %s", f.Path, f.Mode, RunDir)
		}
		staged[f.Path] = f.Content
	}
	for i, want := range steps {
		g := got[i]
		if g.Index != i+1 || g.Label != StepLabel(want) {
			t.Errorf("step %d: index %d label %q, want %d %q", i, g.Index, g.Label, i+1, StepLabel(want))
		}
		if want.File == nil {
			if !reflect.DeepEqual(g.Command, want.Command) {
				t.Errorf("step %d: command %q, want %q", i, g.Command, want.Command)
			}
			continue
		}
		wantFile := *want.File
		if wantFile.Owner == "root:root" {
			wantFile.Owner = ""
		}
		if g.File == nil || g.File.Path != wantFile.Path || g.File.Mode != wantFile.Mode || g.File.Owner != wantFile.Owner || g.File.Append != wantFile.Append {
			t.Errorf("step %d: file %+v, want %+v", i, g.File, wantFile)
			continue
		}
		if !bytes.Equal(staged[g.Staged], want.File.Content) {
			t.Errorf("step %d: staged %s holds %q, want %q", i, g.Staged, staged[g.Staged], want.File.Content)
		}
	}
	if bytes.Contains(files[len(files)-1].Content, []byte("BEGIN RSA PRIVATE KEY")) {
		t.Error("file contents must be staged, not put in the script")
	}
}

// FuzzScriptRoundTrip checks that any argv survives the script's quoting.
func FuzzScriptRoundTrip(f *testing.F) {
	f.Add("kubeadm", "join --token x", "it's")
	f.Add("sh", "-c", "a\nb\\'c'\"")
	f.Add("", "'", "\\")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		argv := []string{a, b, c}
		files := Script([]Step{{Command: argv}})
		got, err := ParseScript(files[len(files)-1].Content)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0].Command, argv) {
			t.Fatalf("got %+v back, want %q", got, argv)
		}
	})
}

func TestStepLabel(t *testing.T) {
	testCases := []struct {
		step Step
		want string
	}{
		{cmd("", "kubeadm", "join", "10.0.0.1:6443", "--token", "abcdef.0123456789abcdef"), "kubeadm join"},
		{cmd("", "/usr/bin/kubeadm", "init", "--config", "/run/kubeadm/kubeadm.yaml"), "kubeadm init"},
		{cmd("", "kubeadm", "--token", "abcdef.0123456789abcdef"), "kubeadm"},
		{sh("", "kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > "+SentinelPath), "kubeadm init"},
		{sh("", "TOKEN=abcdef.0123456789abcdef kubeadm join"), "a command"},
		{cmd("", "echo", "secret"), "echo"},
		{sh("", "echo secret"), "echo"},
		{sh("", ""), "a command"},
		{cmd("", "/bin/sh", "-c"), "sh"},
		{Step{File: &File{Path: "/etc/kubernetes/pki/ca.key"}}, "write /etc/kubernetes/pki/ca.key"},
		{Step{File: &File{Path: "/etc/hosts", Append: true}}, "append to /etc/hosts"},
	}
	for _, tc := range testCases {
		if got := StepLabel(tc.step); got != tc.want {
			t.Errorf("StepLabel(%q) = %q, want %q", tc.step.Command, got, tc.want)
		}
	}
}

func TestParseExit(t *testing.T) {
	testCases := []struct {
		in   string
		want Exit
		ok   bool
	}{
		{"0 done the bootstrap data\n", Exit{Code: 0, Where: WhereDone, Label: "the bootstrap data"}, true},
		{"1 step:3 kubeadm join\n", Exit{Code: 1, Where: WhereStep, Step: 3, Label: "kubeadm join"}, true},
		{"1 runtime container runtime\n", Exit{Code: 1, Where: WhereRuntime, Label: "container runtime"}, true},
		{"127 file:2 write /a b\n", Exit{Code: 127, Where: WhereFile, Step: 2, Label: "write /a b"}, true},
		{"1 sentinel \n", Exit{Code: 1, Where: WhereSentinel}, true},
		{"", Exit{}, false},
		{"1 step:3 kubeadm", Exit{}, false}, // still being written
		{"x step:3\n", Exit{}, false},
		{"1 step:zero x\n", Exit{}, false},
		{"1\n", Exit{}, false},
	}
	for _, tc := range testCases {
		got, ok := ParseExit([]byte(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseExit(%q) = %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && tc.want.Label != "" && got.String() != tc.in {
			t.Errorf("%+v renders as %q, want %q", got, got.String(), tc.in)
		}
	}
}

func TestLaunchCommand(t *testing.T) {
	for _, n := range []int{1, 3} {
		if got, ok := ParseLaunchCommand(LaunchCommand(n)); !ok || got != n {
			t.Errorf("ParseLaunchCommand(LaunchCommand(%d)) = %d %v", n, got, ok)
		}
	}
	if _, ok := ParseLaunchCommand([]string{"/bin/sh", "-c", "true"}); ok {
		t.Error("another command is not a launch")
	}
}

// node is a folder standing in for a node container: the script's absolute
// paths are moved into it, and PATH holds only busybox's basic commands, so
// the script runs in the host's shell as in a busybox image (no systemd, no
// container runtime, no kubeadm).
type node struct {
	t    *testing.T
	root string
	bin  string
}

func newNode(t *testing.T, steps []Step) *node {
	t.Helper()
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Fatalf("the script tests need Debian's static busybox at %s (apt-get install busybox-static): %v", busybox, err)
	}
	n := &node{t: t, root: t.TempDir()}
	n.bin = filepath.Join(n.root, "bin")
	if err := os.MkdirAll(n.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "cat", "mkdir", "rm", "chmod", "sleep", "wc", "tail", "echo", "printf", "true", "false"} {
		if err := os.Symlink(busybox, filepath.Join(n.bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range Script(steps) {
		n.write(f.Path, f.Content, f.Mode)
	}
	return n
}

// relocate moves the absolute paths in s into the node's folder; @ROOT@
// is the folder itself.
func (n *node) relocate(s string) string {
	var pairs []string
	for _, dir := range []string{"/etc/", "/run/", "/var/", "/root/"} {
		pairs = append(pairs, dir, n.root+dir)
	}
	return strings.NewReplacer(append(pairs, "@ROOT@", n.root)...).Replace(s)
}

func (n *node) write(p string, content []byte, mode os.FileMode) {
	n.t.Helper()
	p = n.relocate(p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(n.relocate(string(content))), mode); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) read(p string) (string, bool) {
	b, err := os.ReadFile(n.relocate(p))
	return string(b), err == nil
}

// run runs attempt a of the script in the foreground and waits for it.
func (n *node) run(a int) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(n.bin, "sh"), n.relocate(ScriptPath), strconv.Itoa(a))
	c.Env = []string{"PATH=" + n.bin, "CAPCT_RETRY_BACKOFF_SECONDS=0"}
	if out, err := c.CombinedOutput(); err != nil {
		n.t.Fatalf("attempt %d: %v: %s", a, err, out)
	}
}

func (n *node) exit(a int) Exit {
	n.t.Helper()
	b, ok := n.read(Marks(a).Exit)
	if !ok {
		n.t.Fatalf("attempt %d left no exit mark", a)
	}
	e, ok := ParseExit([]byte(b))
	if !ok {
		n.t.Fatalf("attempt %d: bad exit mark %q", a, b)
	}
	return e
}

func TestScriptRunsEachAttemptOnceAndAppendsOnce(t *testing.T) {
	n := newNode(t, []Step{
		{File: &File{Path: "/etc/hosts", Content: []byte("10.0.0.1 node-0\n"), Mode: 0o644, Append: true}},
		{File: &File{Path: "/etc/kubernetes/pki/ca.key", Content: []byte("KEY"), Mode: 0o600}},
		// Counts its runs in a file that outlives attempts, fails the
		// first time and writes the sentinel the second.
		sh("", `echo run >> @ROOT@/runs; [ "$(wc -l < @ROOT@/runs)" -ge 2 ] && echo success > `+SentinelPath+` || { echo "dial tcp 10.0.0.1:6443: connect: connection refused"; exit 1; }`),
	})
	n.write("/etc/hosts", []byte("127.0.0.1 localhost\n"), 0o644)

	n.run(1)
	if e := n.exit(1); e.Code != 1 || e.Where != WhereStep || e.Step != 3 || e.Label != "echo" {
		t.Fatalf("attempt 1: want a failure of step 3 (echo), got %+v", e)
	}
	if out, _ := n.read(Marks(1).Output); !strings.Contains(out, "connection refused") {
		t.Fatalf("attempt 1: the failed step's output is not kept: %q", out)
	}
	if diag, _ := n.read(Marks(1).Diagnostics); !strings.Contains(diag, "inotify limits") {
		t.Fatalf("attempt 1: no diagnostics were collected: %q", diag)
	}

	// A second launch of attempt 1, as from a new manager, exits at once.
	n.run(1)
	if runs, _ := n.read("@ROOT@/runs"); runs != "run\n" {
		t.Fatalf("attempt 1 ran again: %q", runs)
	}

	n.run(2)
	if e := n.exit(2); e.Code != 0 || e.Where != WhereDone {
		out, _ := n.read(Marks(2).Log)
		t.Fatalf("attempt 2: want success, got %+v; log:\n%s", e, out)
	}
	if hosts, _ := n.read("/etc/hosts"); hosts != "127.0.0.1 localhost\n10.0.0.1 node-0\n" {
		t.Fatalf("the append must apply once across attempts, /etc/hosts is %q", hosts)
	}
	if key, _ := n.read("/etc/kubernetes/pki/ca.key"); key != "KEY" {
		t.Fatalf("ca.key is %q", key)
	}
	if _, ok := n.read(ScriptPath); ok {
		t.Error("the script must be removed after success")
	}
	if _, ok := n.read(RunDir + "/files/2"); ok {
		t.Error("the staged contents must be removed after success")
	}
	if _, ok := n.read(Marks(2).Alive); !ok {
		t.Error("attempt 2 left no alive mark")
	}
	if started, _ := n.read(Marks(2).Started); strings.TrimSpace(started) == "" {
		t.Error("attempt 2 left no start mark")
	}
	if log, _ := n.read(Marks(2).Log); strings.Contains(log, "KEY") || !strings.Contains(log, "step 3 (echo)") {
		t.Errorf("the log must name steps but hold no file contents: %q", log)
	}
}

func TestScriptStopsAtTheFirstFailureAndChecksTheSentinel(t *testing.T) {
	writeSentinel := sh("", "echo success > "+SentinelPath)
	testCases := []struct {
		name  string
		steps []Step
		want  Exit
	}{
		{"a command that does not exist", []Step{cmd("", "no-such-command"), writeSentinel},
			Exit{Code: 127, Where: WhereStep, Step: 1, Label: "no-such-command"}},
		{"a failing second step", []Step{cmd("", "true"), sh("", "exit 3"), writeSentinel},
			Exit{Code: 3, Where: WhereStep, Step: 2, Label: "exit"}},
		{"no sentinel", []Step{cmd("", "true")}, Exit{Code: 1, Where: WhereSentinel, Label: "the bootstrap data"}},
		{"success", []Step{writeSentinel}, Exit{Code: 0, Where: WhereDone, Label: "the bootstrap data"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.steps)
			n.run(1)
			if e := n.exit(1); e != tc.want {
				t.Fatalf("want %+v, got %+v", tc.want, e)
			}
		})
	}
}
