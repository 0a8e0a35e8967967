package provisioning

import (
	"encoding/base64"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
)

// cabpkIgnition is shaped like CABPK's Ignition output (spec 2.3, from its
// Container Linux Config): a base64 certificate with owner names, the
// kubeadm script and config, and the kubeadm unit.
var cabpkIgnition = `{
  "ignition": {"config": {}, "security": {"tls": {}}, "timeouts": {}, "version": "2.3.0"},
  "networkd": {},
  "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}]},
  "storage": {
    "files": [
      {"filesystem": "root", "path": "/etc/kubernetes/pki/ca.crt",
       "contents": {"source": "data:;base64,` + b64("-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n") + `", "verification": {}},
       "mode": 416, "user": {"name": "root"}, "group": {"name": "root"}},
      {"filesystem": "root", "path": "/etc/kubeadm.sh",
       "contents": {"source": "data:,` + url.PathEscape("#!/bin/bash\nset -e\n\nkubeadm init --config /etc/kubeadm.yml \nmkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\nmv /etc/kubeadm.yml /tmp/\n") + `", "verification": {}},
       "mode": 448},
      {"filesystem": "root", "path": "/etc/kubeadm.yml",
       "contents": {"source": "data:,` + url.PathEscape("---\nnodeRegistration:\n  name: {{ ds.meta_data.hostname }}\n") + `", "verification": {}},
       "mode": 384}
    ]
  },
  "systemd": {
    "units": [
      {"name": "kubeadm.service", "enabled": true,
       "contents": "[Unit]\nDescription=kubeadm\nConditionPathExists=/etc/kubeadm.yml\n[Service]\nType=oneshot\nExecStart=/etc/kubeadm.sh\n[Install]\nWantedBy=multi-user.target\n"}
    ]
  }
}`

func TestPlanCABPKIgnition(t *testing.T) {
	unit := "[Unit]\nDescription=kubeadm\nConditionPathExists=/etc/kubeadm.yml\n[Service]\nType=oneshot\nExecStart=/etc/kubeadm.sh\n[Install]\nWantedBy=multi-user.target\n"
	want := []Step{
		file("/etc/kubernetes/pki/ca.crt", "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n", 0o640, "root:root", false),
		file("/etc/kubeadm.sh", "#!/bin/bash\nset -e\n\nkubeadm init "+pf+" --config /etc/kubeadm.yml \nmkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\nmv /etc/kubeadm.yml /tmp/\n", 0o700, "", false),
		file("/etc/kubeadm.yml", "---\nnodeRegistration:\n  name: node-1\n", 0o600, "", false),
		file("/etc/systemd/system/kubeadm.service", unit, 0o644, "", false),
		cmd("run systemctl daemon-reload", "systemctl", "daemon-reload"),
		cmd("run systemctl enable --now kubeadm.service", "systemctl", "enable", "--now", "kubeadm.service"),
	}
	r, err := Analyze(FormatIgnition, []byte(cabpkIgnition), Vars{Hostname: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	assertSteps(t, r.Steps, want)
	if got, want := r.Ignored, []string{"passwd"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Ignored = %q, want %q", got, want)
	}
}

func TestIgnitionV3(t *testing.T) {
	gzipped := base64.StdEncoding.EncodeToString(gz(t, "compressed\n"))
	data := `{
  "ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://example.com/x.ign"}]}},
  "kernelArguments": {"shouldExist": ["quiet"]},
  "storage": {
    "directories": [{"path": "/var/lib/x"}],
    "files": [
      {"path": "/etc/pct", "contents": {"source": "data:text/plain;charset=utf-8,a%20b%0Ac+d%25"}, "mode": 420},
      {"path": "/etc/gz", "contents": {"source": "data:;base64,` + gzipped + `", "compression": "gzip"}},
      {"path": "/etc/empty"},
      {"path": "/etc/owned", "contents": {"source": "data:,x"}, "user": {"id": 1000}, "group": {"name": "docker"}},
      {"path": "/etc/useronly", "contents": {"source": "data:,x"}, "user": {"name": "core"}},
      {"path": "/etc/setuid", "contents": {"source": "data:,x"}, "mode": 2541},
      {"path": "/etc/appended", "contents": {"source": "data:,base\n"}, "append": [{"source": "data:,one%0A"}, {"source": "data:;base64,` + b64("two\n") + `"}]},
      {"path": "/etc/onlyappend", "append": [{"source": "data:,more"}], "overwrite": false},
      {"path": "/etc/host", "contents": {"source": "data:,{{ds.meta_data.local_hostname}}"}}
    ]
  },
  "systemd": {
    "units": [
      {"name": "containerd.service", "enabled": true},
      {"name": "a.service", "contents": "[Service]\nExecStart=/bin/true\n", "enabled": false,
       "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=1\n"}, {"name": "20-empty.conf"}]},
      {"name": "b.service", "contents": "[Service]\n", "enabled": true},
      {"name": "c.service", "mask": true}
    ]
  }
}`
	want := []Step{
		file("/etc/pct", "a b\nc+d%", 0o644, "", false),
		file("/etc/gz", "compressed\n", 0o644, "", false),
		file("/etc/empty", "", 0o644, "", false),
		file("/etc/owned", "x", 0o644, "1000:docker", false),
		file("/etc/useronly", "x", 0o644, "core:root", false),
		file("/etc/setuid", "x", 0, "", false), // mode set below
		file("/etc/appended", "base\n", 0o644, "", false),
		file("/etc/appended", "one\n", 0o644, "", true),
		file("/etc/appended", "two\n", 0o644, "", true),
		file("/etc/onlyappend", "more", 0o644, "", true),
		file("/etc/host", "n", 0o644, "", false),
		file("/etc/systemd/system/a.service", "[Service]\nExecStart=/bin/true\n", 0o644, "", false),
		file("/etc/systemd/system/a.service.d/10-env.conf", "[Service]\nEnvironment=A=1\n", 0o644, "", false),
		file("/etc/systemd/system/b.service", "[Service]\n", 0o644, "", false),
		cmd("run systemctl daemon-reload", "systemctl", "daemon-reload"),
		cmd("run systemctl enable --now containerd.service", "systemctl", "enable", "--now", "containerd.service"),
		cmd("run systemctl enable --now b.service", "systemctl", "enable", "--now", "b.service"),
	}
	// mode 2541 decimal is 04755.
	want[5].File.Mode = 0o755 | os.ModeSetuid
	r, err := Analyze(FormatIgnition, []byte(data), Vars{Hostname: "n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Steps {
		if s.File != nil && len(s.File.Content) == 0 {
			s.File.Content = []byte{}
		}
	}
	assertSteps(t, r.Steps, want)
	wantIgnored := []string{"ignition.config", "kernelArguments", "storage.directories", "systemd.units.mask"}
	if !reflect.DeepEqual(r.Ignored, wantIgnored) {
		t.Errorf("Ignored = %q, want %q", r.Ignored, wantIgnored)
	}
}

func TestIgnitionV2Append(t *testing.T) {
	data := `{"ignition":{"version":"2.2.0"},"storage":{"files":[{"filesystem":"root","path":"/etc/hosts","append":true,"contents":{"source":"data:,1.2.3.4%20x%0A"}}]},
"systemd":{"units":[{"name":"old.service","enable":true}]}}`
	want := []Step{
		file("/etc/hosts", "1.2.3.4 x\n", 0o644, "", true),
		cmd("run systemctl enable --now old.service", "systemctl", "enable", "--now", "old.service"),
	}
	steps, err := Plan(FormatIgnition, []byte(data), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	assertSteps(t, steps, want)
}

func TestIgnitionKubeadmScriptMergesFlag(t *testing.T) {
	script := "#!/bin/bash\nkubeadm join --config /etc/kubeadm.yml --ignore-preflight-errors=all\n"
	data := `{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/kubeadm.sh","contents":{"source":"data:,` + url.PathEscape(script) + `"}}]}}`
	steps, err := Plan(FormatIgnition, []byte(data), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(steps[0].File.Content); got != script {
		t.Errorf("script changed to %q", got)
	}
	// Only /etc/kubeadm.sh is adapted.
	data = strings.Replace(data, "/etc/kubeadm.sh", "/etc/other.sh", 1)
	data = strings.Replace(data, url.PathEscape("--ignore-preflight-errors=all"), "", 1)
	steps, err = Plan(FormatIgnition, []byte(data), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(steps[0].File.Content); strings.Contains(got, "preflight") {
		t.Errorf("other script changed to %q", got)
	}
}

// TestIgnitionAsIgnitionDoes: what Ignition's own types and semantics
// decide. A unit with empty contents is not written (spec 2.x's types
// cannot tell empty from absent, nor can a 2.x dropin's); in 3.x, a file
// whose contents have no source is only appended to.
func TestIgnitionAsIgnitionDoes(t *testing.T) {
	enable := cmd("run systemctl enable --now a.service", "systemctl", "enable", "--now", "a.service")
	reload := cmd("run systemctl daemon-reload", "systemctl", "daemon-reload")
	for _, tc := range []struct {
		name string
		data string
		want []Step
	}{
		{"3.x unit with empty contents", `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"a.service","contents":"","enabled":true}]}}`,
			[]Step{enable}},
		{"2.x unit with empty contents", `{"ignition":{"version":"2.3.0"},"systemd":{"units":[{"name":"a.service","contents":"","enable":true}]}}`,
			[]Step{enable}},
		{"3.x empty dropin", `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"a.service","dropins":[{"name":"x.conf","contents":""},{"name":"y.conf"}]}]}}`,
			[]Step{file("/etc/systemd/system/a.service.d/x.conf", "", 0o644, "", false), reload}},
		{"2.x empty dropin", `{"ignition":{"version":"2.3.0"},"systemd":{"units":[{"name":"a.service","dropins":[{"name":"x.conf","contents":""}]}]}}`,
			nil},
		{"3.x contents without a source", `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"compression":"gzip"},"append":[{"source":"data:,x"}]}]}}`,
			[]Step{file("/a", "x", 0o644, "", true)}},
		{"2.x owner by id and name", `{"ignition":{"version":"2.3.0"},"storage":{"files":[{"filesystem":"root","path":"/a","user":{"id":7},"group":{"name":"g","id":8}}]}}`,
			[]Step{file("/a", "", 0o644, "7:g", false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := Plan(FormatIgnition, []byte(tc.data), Vars{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range steps {
				if s.File != nil && len(s.File.Content) == 0 {
					s.File.Content = []byte{}
				}
			}
			assertSteps(t, steps, tc.want)
		})
	}
}

func TestJSONKeys(t *testing.T) {
	for _, tc := range []struct{ field, want string }{
		{"FileEmbedded1.mode", "mode"},
		{"Node.user.id", "user.id"},
		{"FileEmbedded1.contents.source", "contents.source"},
		{"dropins.name", "dropins.name"},
		{"", ""},
	} {
		if got := jsonKeys(tc.field); got != tc.want {
			t.Errorf("jsonKeys(%q) = %q, want %q", tc.field, got, tc.want)
		}
	}
}
