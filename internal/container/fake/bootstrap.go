// Bootstrap: CAPCT's detached bootstrap run, which Exec launches, acted out
// without a shell on the container's in-memory files.

package fake

import (
	"bytes"
	"context"
	"path"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// runBootstrap acts as attempt n of the bootstrap script staged in the
// container id (provisioning.Script) would, without a shell: it marks the
// attempt alive, claims it once, writes the files (appends start from the
// content before the first attempt), runs each command through Exec (so
// the handler sees it and ExecCalls records it), checks the sentinel and
// writes the exit mark. Waiting for systemd and the CRI, undoing an earlier
// attempt and collecting diagnostics need a real node and are left out.
func (r *Runtime) runBootstrap(id string, n int) {
	marks := provisioning.Marks(n)
	script, ok := r.claimBootstrap(id, marks)
	if !ok {
		return
	}
	finish := func(e provisioning.Exit, output []byte) {
		if output != nil {
			r.setFile(id, marks.Output, output)
		}
		if e.Code == 0 {
			r.removeFiles(id, provisioning.RunDir+"/files/", provisioning.ScriptPath)
		}
		r.setFile(id, marks.Exit, []byte(e.String()))
	}
	steps, err := provisioning.ParseScript(script)
	if err != nil {
		finish(provisioning.Exit{Code: 2, Where: provisioning.WhereStep, Step: 1, Label: "run.sh"}, []byte(err.Error()))
		return
	}
	for _, st := range steps {
		if f := st.File; f != nil {
			content, ok := r.file(id, st.Staged)
			if !ok {
				finish(provisioning.Exit{Code: 1, Where: provisioning.WhereFile, Step: st.Index, Label: st.Label}, []byte("no staged content "+st.Staged))
				return
			}
			if f.Append {
				before, ok := r.file(id, st.Staged+".before")
				if !ok {
					before, _ = r.file(id, f.Path)
					r.setFile(id, st.Staged+".before", before)
				}
				content = append(bytes.Clone(before), content...)
			}
			r.setFile(id, f.Path, content)
			continue
		}
		// The script runs inside the container, as its own owner.
		m, err := r.Inspect(context.Background(), id)
		if err != nil {
			return // The container is gone: so is the run.
		}
		res, err := r.Exec(context.Background(), id, container.OwnerOf(m.Labels), container.ExecInput{Cmd: st.Command})
		if err != nil {
			return // The container is gone or stopped: so is the run.
		}
		out := append(bytes.Clone(res.Stdout), res.Stderr...)
		if res.ExitCode != 0 {
			finish(provisioning.Exit{Code: res.ExitCode, Where: provisioning.WhereStep, Step: st.Index, Label: st.Label}, out)
			return
		}
		r.setFile(id, marks.Output, out)
	}
	if _, ok := r.file(id, provisioning.SentinelPath); !ok {
		finish(provisioning.Exit{Code: 1, Where: provisioning.WhereSentinel, Label: "the bootstrap data"}, nil)
		return
	}
	finish(provisioning.Exit{Where: provisioning.WhereDone, Label: "the bootstrap data"}, nil)
}

// claimBootstrap marks the attempt alive and claims it, at most once, as
// the script's mkdir does; it returns the staged script.
func (r *Runtime) claimBootstrap(name string, marks provisioning.AttemptMarks) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok || c.m.State != container.StateRunning {
		return nil, false
	}
	c.files[marks.Alive] = []byte{}
	if _, claimed := c.files[marks.Started]; claimed {
		return nil, false
	}
	c.files[marks.Started] = []byte("1\n")
	return bytes.Clone(c.files[provisioning.ScriptPath]), true
}

func (r *Runtime) file(name, p string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok {
		return nil, false
	}
	b, ok := c.files[path.Clean(p)]
	return bytes.Clone(b), ok
}

func (r *Runtime) setFile(name, p string, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.lookupLocked(name); ok {
		c.files[path.Clean(p)] = bytes.Clone(b)
	}
}

// removeFiles removes the files under each prefix ending in "/" and each
// other path.
func (r *Runtime) removeFiles(name string, paths ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok {
		return
	}
	for f := range c.files {
		for _, p := range paths {
			if f == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(f, p)) {
				delete(c.files, f)
			}
		}
	}
}
