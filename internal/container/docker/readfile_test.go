package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// TestReadFileTarsOnlyWhatIsThere: the engine runs a process for every
// archive GET, and the bootstrap's watch reads a file that is not there yet
// every second for each machine, so ReadFile stats a path (the archive
// API's HEAD, answered in the engine's own process) and asks for the
// archive only of a regular file within MaxFileSize. A fake engine answers
// the owner check and the stats, and counts the GETs.
func TestReadFileTarsOnlyWhatIsThere(t *testing.T) {
	owner := container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1"}
	const name = "capct-c1-node"
	content := []byte("0 done -\n")
	stats := map[string]dcontainer.PathStat{
		"/var/lib/exit": {Name: "exit", Size: int64(len(content)), Mode: 0o644},
		"/var/lib":      {Name: "lib", Mode: os.ModeDir | 0o755},
		"/var/big":      {Name: "big", Size: container.MaxFileSize + 1, Mode: 0o644},
	}
	var gets atomic.Int32
	rt := runtimeOnFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Query().Get("path")
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/containers/"+name+"/json"):
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(dcontainer.InspectResponse{
				ContainerJSONBase: &dcontainer.ContainerJSONBase{ID: "id-" + name, Name: "/" + name, HostConfig: &dcontainer.HostConfig{}},
				Config:            &dcontainer.Config{Labels: owner.Labels()},
			})
		case strings.HasSuffix(r.URL.Path, "/containers/id-"+name+"/archive"):
			st, ok := stats[path]
			if !ok {
				http.Error(w, "Could not find the file "+path+" in container "+name, http.StatusNotFound)
				return
			}
			b, _ := json.Marshal(st)
			w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(b))
			if r.Method == http.MethodHead {
				return
			}
			gets.Add(1)
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: st.Name, Mode: 0o644, Size: int64(len(content))})
			_, _ = tw.Write(content)
			_ = tw.Close()
			w.Header().Set("Content-Type", "application/x-tar")
			_, _ = w.Write(buf.Bytes())
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotImplemented)
		}
	})
	ctx := context.Background()

	for _, c := range []struct {
		path string
		want func(error) bool
		kind string
	}{
		{"/var/lib/attempts/1/exit", container.IsNotFound, "not found"},
		{"/var/lib", container.IsInvalid, "invalid (a directory)"},
		{"/var/big", container.IsInvalid, "invalid (too large)"},
	} {
		if b, err := rt.ReadFile(ctx, name, owner, c.path); !c.want(err) {
			t.Errorf("ReadFile(%s) = %q, %v; want an error of kind %s", c.path, b, err, c.kind)
		}
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("the archive of a missing file, a directory and a file over MaxFileSize was asked for %d times; want 0", n)
	}
	if b, err := rt.ReadFile(ctx, name, owner, "/var/lib/exit"); err != nil || !bytes.Equal(b, content) {
		t.Errorf("ReadFile(/var/lib/exit) = %q, %v; want %q", b, err, content)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("the archive of a file that is there was asked for %d times; want 1", n)
	}
}
