package realcluster

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Env is where the clusters under test are, as the script that brought them
// up passes it.
type Env struct {
	// MgmtKubeconfig is the management cluster's kubeconfig
	// (REALCLUSTER_MGMT_KUBECONFIG).
	MgmtKubeconfig string
	// Kubeconfig is the workload cluster's (REALCLUSTER_KUBECONFIG).
	Kubeconfig string
	// Cluster and Namespace name the workload Cluster (REALCLUSTER_CLUSTER,
	// REALCLUSTER_NAMESPACE).
	Cluster, Namespace string
	// MgmtName is the management node's container and the value of the
	// quickstart's label on what it made for it (REALCLUSTER_MGMT_NAME).
	MgmtName string
	// Kubectl is the quickstart's kubectl, for exec into pods
	// (REALCLUSTER_KUBECTL): this module has no SPDY client.
	Kubectl string
	// Out is the folder of the run's files, out/<name> (REALCLUSTER_OUT).
	Out string
	// NodeTimeout bounds a wait for Nodes, the quickstart's
	// QUICKSTART_TIMEOUT (REALCLUSTER_NODE_TIMEOUT, seconds).
	NodeTimeout time.Duration
}

// LoadEnv reads Env, failing t with every variable that is missing: the
// tests run only through their make targets, which set them all.
func LoadEnv(t testing.TB, target string) Env {
	t.Helper()
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	env := Env{
		MgmtKubeconfig: get("REALCLUSTER_MGMT_KUBECONFIG"),
		Kubeconfig:     get("REALCLUSTER_KUBECONFIG"),
		Cluster:        get("REALCLUSTER_CLUSTER"),
		Namespace:      get("REALCLUSTER_NAMESPACE"),
		MgmtName:       get("REALCLUSTER_MGMT_NAME"),
		Kubectl:        get("REALCLUSTER_KUBECTL"),
		Out:            get("REALCLUSTER_OUT"),
	}
	if len(missing) > 0 {
		t.Fatalf("%s unset: run this test through make %s, whose script brings the clusters up and sets them", strings.Join(missing, ", "), target)
	}
	env.NodeTimeout = Seconds(t, "REALCLUSTER_NODE_TIMEOUT", 900)
	return env
}

// Seconds reads the variable name as a number of seconds, def when it is
// unset: the scripts' bounds (RESTART_TIMEOUT, LOWERED_WINDOW, ...) keep
// their names and defaults.
func Seconds(t testing.TB, name string, def int) time.Duration {
	t.Helper()
	return time.Duration(Int(t, name, def)) * time.Second
}

// Int reads the variable name as a positive integer, def when it is unset.
func Int(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// RepoRoot is the repository's root, for the scripts the tests run (the
// engine's stop and start).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// QuickstartLabel is the label the quickstart's machinery puts on what it
// makes for a management cluster, valued with its name (QS_LABEL of
// hack/quickstart/lib.sh).
const QuickstartLabel = "io.x-k8s.capct.quickstart"
