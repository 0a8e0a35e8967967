// Exec and files: Exec runs a command in an owned container; WriteFile and
// ReadFile go through the engine's archive API, or through exec for a path
// on a tmpfs mount, which that API does not see.

package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Exec implements container.Runtime. On timeout it returns an error for which
// container.IsTimeout is true and closes the connection; the Docker API has no
// call to kill an exec'd process, so it may be left running in the container.
func (r *Runtime) Exec(ctx context.Context, name string, owner container.Owner, in container.ExecInput) (container.ExecResult, error) {
	ci, err := r.owned(ctx, execOp(in), name, owner)
	if err != nil {
		return container.ExecResult{}, err
	}
	return r.exec(ctx, ci.ID, name, in)
}

// execOp names an exec for errors by its program only: the arguments of
// `sh -c` are a script.
func execOp(in container.ExecInput) string {
	if len(in.Cmd) == 0 {
		return "exec in"
	}
	return "exec " + strconv.Quote(in.Cmd[0]) + " in"
}

// exec runs a command without the ownership check, for the calls that made
// it already: in the container id they checked (a container re-created
// under the same name since is not it); name is for errors.
func (r *Runtime) exec(ctx context.Context, id, name string, in container.ExecInput) (container.ExecResult, error) {
	if len(in.Cmd) == 0 {
		return container.ExecResult{}, container.NewError("exec in", "container", name, container.KindInvalid, errors.New("empty command"))
	}
	op := execOp(in)
	if in.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.Timeout)
		defer cancel()
	}
	timedOut := func(err error) error {
		if in.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return container.NewError(op, "container", name, container.KindTimeout,
				fmt.Errorf("command did not finish within %s: %w", in.Timeout, errors.Join(context.DeadlineExceeded, err)))
		}
		return wrap(op, "container", name, err)
	}
	created, err := r.cli.ContainerExecCreate(ctx, id, dcontainer.ExecOptions{
		Cmd: in.Cmd, Env: in.Env, User: in.User,
		AttachStdin: in.Stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	hj, err := r.cli.ContainerExecAttach(ctx, created.ID, dcontainer.ExecAttachOptions{})
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	defer hj.Close()

	stdinErr := make(chan error, 1)
	if in.Stdin != nil {
		go func() {
			_, err := io.Copy(hj.Conn, in.Stdin)
			if cerr := hj.CloseWrite(); err == nil {
				err = cerr
			}
			stdinErr <- err
		}()
	} else {
		stdinErr <- nil
	}
	stdout, stderr := &container.TailBuffer{Limit: in.OutputLimit()}, &container.TailBuffer{Limit: in.OutputLimit()}
	outDone := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		outDone <- err
	}()
	select {
	case err = <-outDone:
	case <-ctx.Done():
		hj.Close()
		// The copy ends on the closed connection; its error says only
		// that, and ctx's says why.
		<-outDone //nolint:errcheck // the closed connection's error, explained by ctx's
		return container.ExecResult{}, timedOut(ctx.Err())
	}
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	select {
	case err = <-stdinErr:
		// A command that exits without reading all of stdin breaks the pipe;
		// that is its business, not an error of Exec.
		_ = err
	default:
	}
	ei, err := r.cli.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	return container.ExecResult{ExitCode: ei.ExitCode, Stdout: stdout.Bytes(), Stderr: stderr.Bytes(),
		Truncated: stdout.Truncated() || stderr.Truncated()}, nil
}

// WriteFile implements container.Runtime: it sends a tar holding the missing
// parent directories and the file to the engine's archive API.
func (r *Runtime) WriteFile(ctx context.Context, name string, owner container.Owner, p string, content []byte, mode os.FileMode) error {
	op := "write " + strconv.Quote(p) + " in"
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return container.NewError(op, "container", name, container.KindInvalid, errors.New("path must be absolute and name a file"))
	}
	p = path.Clean(p)
	ci, err := r.owned(ctx, op, name, owner)
	if err != nil {
		return err
	}
	// By ID from here on: a container re-created under the same name
	// since the check is not the one that was checked.
	if onTmpfs(ci, p) {
		return r.writeFileByExec(ctx, op, ci.ID, name, p, content, mode)
	}
	// Find the missing parents so existing directories keep their modes.
	var missing []string
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		_, err := r.cli.ContainerStatPath(ctx, ci.ID, dir)
		if err == nil {
			break
		}
		if !cerrdefs.IsNotFound(err) {
			return wrap(op, "container", name, err)
		}
		missing = append(missing, dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for i := len(missing) - 1; i >= 0; i-- {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(missing[i], "/") + "/", Mode: 0o755, ModTime: now}); err != nil {
			return container.NewError(op, "container", name, container.KindUnknown, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: int64(mode.Perm()), Size: int64(len(content)), ModTime: now}); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	if _, err := tw.Write(content); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	if err := tw.Close(); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	return wrap(op, "container", name, r.cli.CopyToContainer(ctx, ci.ID, "/", &buf, dcontainer.CopyToContainerOptions{}))
}

// ReadFile implements container.Runtime. It reads only a container that
// owner owns, and reads the one it checked, by ID.
func (r *Runtime) ReadFile(ctx context.Context, name string, owner container.Owner, p string) ([]byte, error) {
	op := "read " + strconv.Quote(p) + " in"
	ci, err := r.owned(ctx, op, name, owner)
	if err != nil {
		return nil, err
	}
	if onTmpfs(ci, path.Clean(p)) {
		return r.readFileByExec(ctx, op, ci.ID, name, path.Clean(p))
	}
	// The archive API's GET costs the engine a process per call (Docker
	// 20.10 re-executes itself to tar the path: 85 ms of its CPU, measured
	// here), its HEAD a stat in the engine's own process (2 ms). Callers
	// poll for files that are not there yet (each running bootstrap's exit
	// mark, every second), so the path is stat'ed first and read only when
	// it is there.
	st, err := r.cli.ContainerStatPath(ctx, ci.ID, p)
	if err != nil {
		return nil, wrap(op, "container", name, err)
	}
	switch {
	case st.Mode.IsDir():
		return nil, container.NewError(op, "container", name, container.KindInvalid, errors.New("is a directory"))
	case st.Mode.IsRegular() && st.Size > container.MaxFileSize:
		return nil, tooLarge(op, name)
	}
	rc, _, err := r.cli.CopyFromContainer(ctx, ci.ID, p)
	if err != nil {
		return nil, wrap(op, "container", name, err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("archive holds no file")
			}
			return nil, wrap(op, "container", name, err)
		}
		if h.Typeflag == tar.TypeDir {
			return nil, container.NewError(op, "container", name, container.KindInvalid, errors.New("is a directory"))
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > container.MaxFileSize {
				return nil, tooLarge(op, name)
			}
			b, err := io.ReadAll(io.LimitReader(tr, container.MaxFileSize+1))
			if err != nil {
				return nil, wrap(op, "container", name, err)
			}
			if len(b) > container.MaxFileSize {
				return nil, tooLarge(op, name)
			}
			return b, nil
		}
	}
}

// onTmpfs reports whether p lies on one of the container's tmpfs mounts
// (a node's /run and /tmp). The engine's archive API reads and writes the
// container's root file system underneath such mounts, where the container
// does not see them, so files there go through exec instead.
func onTmpfs(info dcontainer.InspectResponse, p string) bool {
	under := func(mount string) bool {
		mount = path.Clean(mount)
		return p == mount || strings.HasPrefix(p, strings.TrimSuffix(mount, "/")+"/")
	}
	if info.HostConfig != nil {
		for mount := range info.HostConfig.Tmpfs {
			if under(mount) {
				return true
			}
		}
	}
	for _, m := range info.Mounts {
		if m.Type == mount.TypeTmpfs && under(m.Destination) {
			return true
		}
	}
	return false
}

// writeFileByExec writes a file with the container's own shell. The path
// and mode are passed as arguments, never spliced into the script.
func (r *Runtime) writeFileByExec(ctx context.Context, op, id, name, p string, content []byte, mode os.FileMode) error {
	res, err := r.exec(ctx, id, name, container.ExecInput{
		Cmd:   []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"`, "sh", p, strconv.FormatUint(uint64(mode.Perm()), 8)},
		Stdin: bytes.NewReader(content),
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return container.NewError(op, "container", name, container.KindUnknown,
			fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr))))
	}
	return nil
}

// readFileByExec reads a file with the container's own cat.
func (r *Runtime) readFileByExec(ctx context.Context, op, id, name, p string) ([]byte, error) {
	res, err := r.exec(ctx, id, name, container.ExecInput{Cmd: []string{"cat", "--", p}, MaxOutput: container.MaxFileSize})
	if err != nil {
		return nil, err
	}
	if res.Truncated {
		return nil, tooLarge(op, name)
	}
	if res.ExitCode != 0 {
		kind := container.KindUnknown
		if strings.Contains(string(res.Stderr), "No such file") {
			kind = container.KindNotFound
		}
		return nil, container.NewError(op, "container", name, kind,
			fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr))))
	}
	return res.Stdout, nil
}

func tooLarge(op, name string) error {
	return container.NewError(op, "container", name, container.KindInvalid,
		fmt.Errorf("the file is larger than %d bytes", container.MaxFileSize))
}
