// Package clusterctl proves CAPCT's release artifacts with clusterctl itself:
// the repository that `make release-manifests` writes is read by clusterctl's
// own client library, every flavor is rendered, everything rendered is
// dry-run applied to a real API server, and `clusterctl move` discovers and
// moves every CAPCT object of a cluster between two API servers.
//
// The API servers are envtest's (internal/test/envtest): they hold CAPCT's,
// Cluster API core and kubeadm CRDs and run CAPCT's webhooks, but not Cluster
// API's webhooks or controllers. Cluster API objects are therefore validated
// by their CRD schemas only (strict field validation included), and a
// ClusterClass' patches are not executed here.
package clusterctl

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// version is the release the tests build and read back.
const version = "v0.1.0"

var (
	// repoRoot is the module root.
	repoRoot string
	// repository is the clusterctl local repository the release script wrote.
	repository string
	// releaseErr is why the repository could not be built, reported by every
	// test rather than skipping any.
	releaseErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "capct-release-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	repository = dir
	// The release script is what `make release-manifests` runs; the tests
	// build their own copy so that they never read a stale out/.
	cmd := exec.CommandContext(context.Background(), filepath.Join(repoRoot, "hack", "release-manifests.sh"), version, dir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		releaseErr = fmt.Errorf("hack/release-manifests.sh %s failed: %w\n%s", version, err, out)
	}
	return m.Run()
}

func requireRelease(t *testing.T) {
	t.Helper()
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
}

func releaseFile(name string) string {
	return filepath.Join(repository, "infrastructure-container", version, name)
}
