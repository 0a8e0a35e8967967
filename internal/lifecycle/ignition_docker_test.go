//go:build engine

package lifecycle

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// fakeSystemctl stands in for systemd on the busybox test image, as much as
// CABPK's Ignition needs: it records its calls in /var/systemctl-calls,
// says the system is running, and `enable --now UNIT` runs the unit's
// ExecStart, as systemd would start it.
const fakeSystemctl = `#!/bin/sh
echo "$*" >> /var/systemctl-calls
case "$1" in
is-system-running) echo running ;;
daemon-reload) ;;
enable)
	[ "$2" = --now ] || { echo "only enable --now is faked" >&2; exit 1; }
	unit=/etc/systemd/system/$3
	[ -f "$unit" ] || { echo "Unit $3 not found." >&2; exit 5; }
	start=""
	while IFS= read -r line; do
		case "$line" in ExecStart=*) start=${line#ExecStart=} ;; esac
	done < "$unit"
	[ -n "$start" ] || { echo "$3 has no ExecStart" >&2; exit 1; }
	$start
	;;
*) echo "systemctl $1 is not faked" >&2; exit 1 ;;
esac
`

// ignitionData is Ignition 3.x shaped like CABPK's output, with what a
// user's additions bring: a base64 key with mode 0600 and an owner (by ID: busybox has no /etc/passwd), a
// gzip-compressed file, an append to a file the image has, the node's
// hostname in a file, and the kubeadm script started by its unit.
func ignitionData(t *testing.T) string {
	t.Helper()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write([]byte("compressed config\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	kubeadmSh := "#!/bin/sh\nset -e\nkubeadm join --config /etc/kubeadm.yml\nmkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
	unit := "[Unit]\nDescription=kubeadm\n[Service]\nType=oneshot\nExecStart=/etc/kubeadm.sh\n[Install]\nWantedBy=multi-user.target\n"
	return fmt.Sprintf(`{
  "ignition": {"version": "3.4.0"},
  "storage": {"files": [
    {"path": "/etc/capct/key", "contents": {"source": "data:;base64,%s"}, "mode": 384, "user": {"id": 0}, "group": {"id": 0}},
    {"path": "/etc/capct/compressed", "contents": {"source": "data:;base64,%s", "compression": "gzip"}},
    {"path": "/etc/capct/hostname", "contents": {"source": "data:,{{ ds.meta_data.hostname }}"}},
    {"path": "/etc/hosts", "append": [{"source": "data:,%s"}]},
    {"path": "/etc/kubeadm.sh", "contents": {"source": "data:,%s"}, "mode": 448},
    {"path": "/etc/kubeadm.yml", "contents": {"source": "data:,%s"}, "mode": 384}
  ]},
  "systemd": {"units": [{"name": "kubeadm.service", "enabled": true, "contents": %q}]}
}`, b64([]byte("secret key\n")), b64(gz.Bytes()), url.PathEscape("10.0.0.1 node\n"),
		url.PathEscape(kubeadmSh), url.PathEscape("nodeRegistration:\n  name: {{ ds.meta_data.hostname }}\n"), unit)
}

// TestDockerIgnitionBootstrap runs Ignition bootstrap data end to end in a
// busybox node container: every file lands with its content and mode, the
// append applies once, the unit is written, systemd is reloaded and the
// unit started, and the kubeadm script it runs reports success.
func TestDockerIgnitionBootstrap(t *testing.T) {
	data := ignitionData(t)
	e := newDockerEnv(t, data, map[string]string{"/bin/kubeadm": kubeadmScript(0, 0), "/bin/systemctl": fakeSystemctl})
	ctx := context.Background()
	secret := &corev1.Secret{}
	if err := e.mgmt.Get(ctx, client.ObjectKey{Namespace: "ns", Name: *e.s.BootstrapDataSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["format"] = []byte(provisioning.FormatIgnition)
	if err := e.mgmt.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	hostsBefore, err := e.rt.ReadFile(ctx, e.s.ContainerName(), e.s.Owner(), "/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}

	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)

	name := e.s.ContainerName()
	for _, f := range []struct {
		path, content string
		mode          string
	}{
		{"/etc/capct/key", "secret key\n", "0600"},
		{"/etc/capct/compressed", "compressed config\n", "0644"},
		{"/etc/capct/hostname", name, "0644"},
		{"/etc/hosts", string(hostsBefore) + "10.0.0.1 node\n", ""},
		{"/etc/kubeadm.yml", "nodeRegistration:\n  name: " + name + "\n", "0600"},
		{"/etc/kubeadm.sh", "", "0700"},
		{"/etc/systemd/system/kubeadm.service", "", "0644"},
	} {
		got, err := e.rt.ReadFile(ctx, name, e.s.Owner(), f.path)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		if f.content != "" && string(got) != f.content {
			t.Errorf("%s holds %q, want %q", f.path, got, f.content)
		}
		if f.mode == "" {
			continue
		}
		mode, err := dockertest.FileMode(ctx, e.rt, name, f.path)
		if err != nil {
			t.Fatal(err)
		}
		if m := fmt.Sprintf("%#o", mode); m != f.mode {
			t.Errorf("%s has mode %s, want %s", f.path, m, f.mode)
		}
	}
	calls, err := e.rt.ReadFile(ctx, name, e.s.Owner(), "/var/systemctl-calls")
	if err != nil {
		t.Fatal(err)
	}
	// The script asks whether systemd is up first; then come Ignition's
	// steps.
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	if len(lines) < 2 || strings.Join(lines[len(lines)-2:], "|") != "daemon-reload|enable --now kubeadm.service" {
		t.Fatalf("systemctl calls %q: want daemon-reload, then enable --now kubeadm.service, last", lines)
	}
	if runs := e.lines("/var/kubeadm-runs"); runs != 1 {
		t.Fatalf("the unit ran kubeadm %d times, want once", runs)
	}
}
