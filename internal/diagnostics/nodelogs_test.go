package diagnostics

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		limit    int
		want     string
	}{
		{"short", "a\nb\n", 10, "a\nb\n"},
		{"exact", "abcd", 4, "abcd"},
		{"cut at a line", "first line\nsecond\nthird\n", 12, "third\n"},
		{"no newline in the tail", "0123456789", 4, "6789"},
		{"newline last only", "aaaa\nbbbbbbbb\n", 6, "bbbbb\n"},
		{"empty", "", 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Tail([]byte(tc.in), tc.limit)); got != tc.want {
				t.Fatalf("Tail(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
		})
	}
}

// node creates a started node container on rt with the given files.
func node(t *testing.T, rt *fake.Runtime, name string, files map[string]string) container.Owner {
	t.Helper()
	ctx := context.Background()
	owner := container.Owner{Namespace: "ns", Cluster: "c", ClusterID: "id", Machine: name}
	rt.AddImage("capct/node:test", nil)
	if _, err := rt.CreateMachine(ctx, container.MachineSpec{Name: name, Image: "capct/node:test", Labels: owner.Labels(), Role: container.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, name, owner); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		if err := rt.WriteFile(ctx, name, owner, p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return owner
}

func TestCollectNodeLogs(t *testing.T) {
	ctx := context.Background()
	marks := provisioning.Marks(2)
	bigLog := strings.Repeat("kubeadm says something\n", BootstrapLogLimit/10)
	journal := strings.Repeat("kubelet[42]: E0101 failed to run\n", JournalLimit/10)

	t.Run("running node with a failed bootstrap", func(t *testing.T) {
		rt := fake.New(nil)
		owner := node(t, rt, "n1", map[string]string{
			provisioning.AttemptPath: "2\n",
			marks.Exit:               "1 step:5 kubeadm join\n",
			marks.Diagnostics:        "containerd: failed to load plugin\n",
			marks.Log:                bigLog,
		})
		var asked []string
		rt.SetExecHandler(func(_ context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
			if in.Cmd[0] != "journalctl" {
				return container.ExecResult{}, false
			}
			asked = in.Cmd
			if in.MaxOutput != JournalLimit || in.Timeout == 0 {
				t.Errorf("journalctl asked with MaxOutput %d and Timeout %s: unbounded", in.MaxOutput, in.Timeout)
			}
			return container.ExecResult{Stdout: []byte(journal)}, true
		})
		l := CollectNodeLogs(ctx, rt, "n1", owner)
		if len(asked) == 0 {
			t.Fatal("the journal was not asked for")
		}
		if string(l.BootstrapExit) != "1 step:5 kubeadm join\n" || !strings.Contains(string(l.BootstrapDiagnostics), "failed to load plugin") {
			t.Errorf("bootstrap marks: exit %q diagnostics %q", l.BootstrapExit, l.BootstrapDiagnostics)
		}
		if len(l.BootstrapLog) == 0 || len(l.BootstrapLog) > BootstrapLogLimit || !strings.HasSuffix(bigLog, string(l.BootstrapLog)) {
			t.Errorf("bootstrap log: %d bytes, want the last ≤ %d of %d", len(l.BootstrapLog), BootstrapLogLimit, len(bigLog))
		}
		if len(l.Journal) == 0 || len(l.Journal) > JournalLimit || !strings.HasSuffix(journal, string(l.Journal)) {
			t.Errorf("journal: %d bytes, want the last ≤ %d of %d", len(l.Journal), JournalLimit, len(journal))
		}
		if len(l.Notes) != 0 {
			t.Errorf("notes %q, want none", l.Notes)
		}
		data := l.Data("Bootstrapped=False BootstrapFailed")
		for _, k := range []string{KeySummary, KeyJournal, KeyBootstrapExit, KeyBootstrapDiagnostics, KeyBootstrapLog} {
			if len(data[k]) == 0 {
				t.Errorf("data lacks %s", k)
			}
		}
		if _, ok := data[KeyNotes]; ok {
			t.Error("data has notes without any")
		}
		total := 0
		for _, v := range data {
			total += len(v)
		}
		if total > 64<<10 {
			t.Errorf("the record holds %d bytes, more than 64 KiB", total)
		}
	})

	t.Run("stopped node: marks but no journal", func(t *testing.T) {
		rt := fake.New(nil)
		owner := node(t, rt, "n2", map[string]string{provisioning.AttemptPath: "2\n", marks.Exit: "1 step:5 kubeadm join\n"})
		if err := rt.Stop(ctx, "n2", owner, 0); err != nil {
			t.Fatal(err)
		}
		l := CollectNodeLogs(ctx, rt, "n2", owner)
		if string(l.BootstrapExit) != "1 step:5 kubeadm join\n" || l.Journal != nil {
			t.Errorf("exit %q journal %q", l.BootstrapExit, l.Journal)
		}
		if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "cannot be read") {
			t.Errorf("notes %q, want one on the journal", l.Notes)
		}
		for _, c := range rt.ExecCalls() {
			t.Errorf("exec %v in a stopped container", c.Cmd)
		}
	})

	t.Run("gone", func(t *testing.T) {
		rt := fake.New(nil)
		l := CollectNodeLogs(ctx, rt, "n3", container.Owner{Namespace: "ns", Cluster: "c", ClusterID: "id", Machine: "n3"})
		if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "is gone") || l.Journal != nil || l.BootstrapLog != nil {
			t.Errorf("%+v", l)
		}
		if got := l.Data("s"); !bytes.Contains(got[KeyNotes], []byte("is gone")) {
			t.Errorf("data %q lacks the note", got)
		}
	})

	t.Run("engine away", func(t *testing.T) {
		rt := fake.New(nil)
		owner := node(t, rt, "n4", nil)
		rt.FailNext(fake.OpInspect, container.NewError("inspect", "container", "n4", container.KindUnreachable, errors.New("connection refused")))
		l := CollectNodeLogs(ctx, rt, "n4", owner)
		if len(l.Notes) != 1 || !strings.Contains(l.Notes[0], "could not be inspected") {
			t.Errorf("notes %q", l.Notes)
		}
	})

	t.Run("no bootstrap yet, journal fails", func(t *testing.T) {
		rt := fake.New(nil)
		owner := node(t, rt, "n5", nil)
		rt.SetExecHandler(func(context.Context, container.Machine, map[string][]byte, container.ExecInput, []byte) (container.ExecResult, bool) {
			return container.ExecResult{ExitCode: 1, Stderr: []byte("No journal files were found.\n")}, true
		})
		l := CollectNodeLogs(ctx, rt, "n5", owner)
		if len(l.Notes) != 2 || !strings.Contains(l.Notes[0], "no bootstrap attempt") || !strings.Contains(l.Notes[1], "No journal files") {
			t.Errorf("notes %q", l.Notes)
		}
	})
}
