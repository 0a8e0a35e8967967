// Exec and files: Exec through the handler a test installs or the built-in
// commands, the record of Execs, and WriteFile and ReadFile on each
// container's in-memory files.

package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"strings"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// ExecHandler runs a command in a fake container. m is a snapshot of the
// container; files reads the container's files. Return (result, true) to
// answer, or (_, false) to fall back to the built-ins.
type ExecHandler func(ctx context.Context, m container.Machine, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, bool)

// ExecCall records one Exec.
type ExecCall struct {
	// Container is the container's name.
	Container string
	// Cmd is the command.
	Cmd []string
	// Stdin is what was read from ExecInput.Stdin.
	Stdin []byte
}

// SetExecHandler installs h, consulted before the built-ins.
func (r *Runtime) SetExecHandler(h ExecHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handler = h
}

// ForgetExecCalls stops recording Execs for ExecCalls. A long run (the
// scale benchmark) would otherwise keep every command and its stdin, which
// the fake's memory would then count against the manager that runs it.
func (r *Runtime) ForgetExecCalls() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetExecs = true
	r.execs = nil
}

// ExecCalls returns the Execs recorded so far.
func (r *Runtime) ExecCalls() []ExecCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ExecCall(nil), r.execs...)
}

// Exec implements container.Runtime. It records the call, then asks the
// handler (SetExecHandler), then the built-ins: true, false, echo, cat (of
// written files, or of stdin), test -f/-e/-d, sleep (honours the timeout),
// `sh -c "exit N"` and CAPCT's bootstrap launch (provisioning.LaunchCommand),
// which returns at once and acts out the staged script on a goroutine (see
// runBootstrap); anything else exits 0 with no output.
func (r *Runtime) Exec(ctx context.Context, name string, owner container.Owner, in container.ExecInput) (container.ExecResult, error) {
	// Only the program is named, as by the Docker runtime: the arguments of
	// `sh -c` are a script.
	op := "exec in"
	if len(in.Cmd) > 0 {
		op = fmt.Sprintf("exec %q in", in.Cmd[0])
	}
	var stdin []byte
	if in.Stdin != nil {
		b, err := io.ReadAll(in.Stdin)
		if err != nil {
			return container.ExecResult{}, container.NewError(op, "container", name, container.KindUnknown, err)
		}
		stdin = b
	}
	r.mu.Lock()
	if err := r.failure(OpExec); err != nil {
		r.mu.Unlock()
		return container.ExecResult{}, err
	}
	if len(in.Cmd) == 0 {
		r.mu.Unlock()
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindInvalid, errors.New("empty command"))
	}
	c, err := r.owned(op, name, owner)
	if err == nil && c.m.State != container.StateRunning {
		err = container.NewError(op, "container", name, container.KindConflict, fmt.Errorf("container %s is not running", name))
	}
	if err != nil {
		r.mu.Unlock()
		return container.ExecResult{}, err
	}
	if !r.forgetExecs {
		r.execs = append(r.execs, ExecCall{Container: c.m.Name, Cmd: append([]string(nil), in.Cmd...), Stdin: stdin})
	}
	m, files, h := *snapshot(c), maps.Clone(c.files), r.handler
	r.mu.Unlock()

	if h != nil {
		if res, ok := h(ctx, m, files, in, stdin); ok {
			return container.BoundOutput(res, in.OutputLimit()), nil
		}
	}
	res, err := r.builtin(ctx, op, name, m.ID, files, in, stdin)
	return container.BoundOutput(res, in.OutputLimit()), err
}

// builtin runs the built-in commands in the container id, named name in
// errors.
func (r *Runtime) builtin(ctx context.Context, op, name, id string, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, error) {
	args := in.Cmd
	if n, ok := provisioning.ParseLaunchCommand(args); ok {
		// Detached, as setsid makes it in a real container: the exec
		// returns at once and the run goes on by itself, in that very
		// container (by ID), dying with it.
		go r.runBootstrap(id, n)
		return container.ExecResult{}, nil
	}
	switch args[0] {
	case "true":
		return container.ExecResult{}, nil
	case "false":
		return container.ExecResult{ExitCode: 1}, nil
	case "echo":
		return container.ExecResult{Stdout: []byte(strings.Join(args[1:], " ") + "\n")}, nil
	case "cat":
		return catFiles(files, args[1:], stdin), nil
	case "test", "[":
		return testPath(files, args[1:]), nil
	case "sleep":
		return r.sleep(ctx, op, name, args[1:], in.Timeout)
	case "sh":
		if len(args) == 3 && args[1] == "-c" && strings.HasPrefix(args[2], "exit ") {
			var code int
			if _, err := fmt.Sscanf(args[2], "exit %d", &code); err == nil {
				return container.ExecResult{ExitCode: code}, nil
			}
		}
	}
	return container.ExecResult{}, nil
}

// catFiles is busybox's cat of the files at paths, or of stdin without paths.
func catFiles(files map[string][]byte, paths []string, stdin []byte) container.ExecResult {
	if len(paths) == 0 {
		return container.ExecResult{Stdout: stdin}
	}
	var res container.ExecResult
	for _, p := range paths {
		b, ok := files[path.Clean(p)]
		if !ok {
			res.ExitCode = 1
			res.Stderr = append(res.Stderr, fmt.Sprintf("cat: can't open '%s': No such file or directory\n", p)...)
			continue
		}
		res.Stdout = append(res.Stdout, b...)
	}
	return res
}

// testPath is test's -f, -d and -e on files, where a folder is the prefix
// of a file's path; anything else is false.
func testPath(files map[string][]byte, args []string) container.ExecResult {
	if len(args) >= 2 {
		p := path.Clean(args[1])
		_, isFile := files[p]
		isDir := false
		for f := range files {
			if strings.HasPrefix(f, p+"/") {
				isDir = true
			}
		}
		ok := (args[0] == "-f" && isFile) || (args[0] == "-d" && isDir) || (args[0] == "-e" && (isFile || isDir))
		if ok {
			return container.ExecResult{}
		}
	}
	return container.ExecResult{ExitCode: 1}
}

// sleep returns at once, unless the exec's timeout (0 for none) ends
// before the sleep of args would: then it returns the timeout's error when
// the injected clock reaches it, as a real exec would.
func (r *Runtime) sleep(ctx context.Context, op, name string, args []string, timeout time.Duration) (container.ExecResult, error) {
	d := time.Hour
	if len(args) > 0 {
		if v, err := time.ParseDuration(args[0] + "s"); err == nil {
			d = v
		}
	}
	if timeout <= 0 || timeout >= d {
		return container.ExecResult{}, nil
	}
	t := r.clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-t.C():
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindTimeout,
			fmt.Errorf("command did not finish within %s: %w", timeout, context.DeadlineExceeded))
	case <-ctx.Done():
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindUnknown, ctx.Err())
	}
}

// WriteFile implements container.Runtime.
func (r *Runtime) WriteFile(ctx context.Context, name string, owner container.Owner, p string, content []byte, mode os.FileMode) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpWriteFile); err != nil {
		return err
	}
	op := fmt.Sprintf("write %q in", p)
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return container.NewError(op, "container", name, container.KindInvalid, errors.New("path must be absolute and name a file"))
	}
	c, err := r.owned(op, name, owner)
	if err != nil {
		return err
	}
	c.files[path.Clean(p)] = bytes.Clone(content)
	return nil
}

// ReadFile implements container.Runtime.
func (r *Runtime) ReadFile(ctx context.Context, name string, owner container.Owner, p string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpReadFile); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("read %q in", p)
	c, err := r.owned(op, name, owner)
	if err != nil {
		return nil, err
	}
	b, ok := c.files[path.Clean(p)]
	if !ok {
		return nil, container.NewError(op, "container", name, container.KindNotFound, fmt.Errorf("no such file %s", p))
	}
	if len(b) > container.MaxFileSize {
		return nil, container.NewError(op, "container", name, container.KindInvalid, fmt.Errorf("the file is larger than %d bytes", container.MaxFileSize))
	}
	return bytes.Clone(b), nil
}
