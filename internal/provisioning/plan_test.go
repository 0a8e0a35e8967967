package provisioning

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

const pf = "--ignore-preflight-errors=" + IgnoredPreflightErrors

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(path, content string, mode os.FileMode, owner string, appendMode bool) Step {
	verb := "write "
	if appendMode {
		verb = "append to "
	}
	return Step{Description: verb + path, File: &File{Path: path, Content: []byte(content), Mode: mode, Owner: owner, Append: appendMode}}
}

func cmd(desc string, argv ...string) Step { return Step{Description: desc, Command: argv} }

func sh(desc, script string) Step { return cmd(desc, "/bin/sh", "-c", script) }

// cabpkInit is shaped like CABPK's control plane init output: the jinja
// header, certificates (one base64), the kubeadm config using the hostname
// variable, the placeholder, pre/post commands and modules CAPCT ignores.
var cabpkInit = `## template: jinja
#cloud-config

write_files:
-   path: /etc/kubernetes/pki/ca.crt
    owner: root:root
    permissions: '0640'
    content: |
      -----BEGIN CERTIFICATE-----
      MIIC6jCCAdKgAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl
      -----END CERTIFICATE-----

-   path: /etc/kubernetes/pki/ca.key
    owner: root:root
    permissions: '0600'
    content: |
      -----BEGIN RSA PRIVATE KEY-----
      MIIEpAIBAAKCAQEAx
      -----END RSA PRIVATE KEY-----

-   path: /etc/kubernetes/pki/sa.pub
    encoding: "base64"
    owner: root:root
    permissions: '0640'
    content: |
      ` + b64("-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----\n") + `
-   path: /etc/hosts
    append: true
    content: |
      127.0.0.1 {{ ds.meta_data.hostname }}
-   path: /run/kubeadm/kubeadm.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: ClusterConfiguration
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: InitConfiguration
      nodeRegistration:
        name: '{{ ds.meta_data.local_hostname }}'
        kubeletExtraArgs:
        - name: provider-id
          value: container:///{{ds.meta_data.local_hostname}}
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "This placeholder file is used to create the /run/cluster-api sub directory"
runcmd:
  - "sysctl -w fs.inotify.max_user_watches=1048576"
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
  - [kubectl, --kubeconfig, /etc/kubernetes/admin.conf, label, node, "{{ v1.local_hostname }}", role=cp]
ntp:
  enabled: true
users:
  - name: capi
`

func TestPlanCABPKCloudConfig(t *testing.T) {
	kubeadmYAML := `---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  name: 'node-0'
  kubeletExtraArgs:
  - name: provider-id
    value: container:///node-0
`
	want := []Step{
		file("/etc/kubernetes/pki/ca.crt", "-----BEGIN CERTIFICATE-----\nMIIC6jCCAdKgAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl\n-----END CERTIFICATE-----\n", 0o640, "root:root", false),
		file("/etc/kubernetes/pki/ca.key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----\n", 0o600, "root:root", false),
		file("/etc/kubernetes/pki/sa.pub", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----\n", 0o640, "root:root", false),
		file("/etc/hosts", "127.0.0.1 node-0\n", 0o644, "", true),
		file("/run/kubeadm/kubeadm.yaml", kubeadmYAML, 0o640, "root:root", false),
		file("/run/cluster-api/placeholder", "This placeholder file is used to create the /run/cluster-api sub directory", 0o640, "root:root", false),
		sh("run sysctl -w fs.inotify.max_user_watches=1048576", "sysctl -w fs.inotify.max_user_watches=1048576"),
		sh("run kubeadm init --ignore-preflight-errors=SystemVerification,Swap,FileConte ...",
			"kubeadm init "+pf+" --config /run/kubeadm/kubeadm.yaml  && echo success > "+SentinelPath),
		cmd("run kubectl --kubeconfig /etc/kubernetes/admin.conf label node node-0 role=cp",
			"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "label", "node", "node-0", "role=cp"),
	}
	r, err := Analyze(FormatCloudConfig, []byte(cabpkInit), Vars{Hostname: "node-0"})
	if err != nil {
		t.Fatal(err)
	}
	assertSteps(t, r.Steps, want)
	if got, want := r.Ignored, []string{"ntp", "users"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Ignored = %q, want %q", got, want)
	}
	// Plan is Analyze's steps; an empty format is cloud-config; the
	// headers are optional.
	noHeader := strings.Replace(cabpkInit, "## template: jinja\n#cloud-config\n", "", 1)
	steps, err := Plan("", []byte(noHeader), Vars{Hostname: "node-0"})
	if err != nil {
		t.Fatal(err)
	}
	assertSteps(t, steps, want)
}

func assertSteps(t *testing.T, got, want []Step) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d steps, want %d", len(got), len(want))
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w Step
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("step %d:\n got  %s\n want %s", i, showStep(g), showStep(w))
		}
	}
}

func showStep(s Step) string {
	var b strings.Builder
	b.WriteString("{" + strings.ReplaceAll(s.Description, "\n", `\n`))
	if f := s.File; f != nil {
		b.WriteString(" File{" + f.Path + " " + f.Mode.String() + " owner=" + f.Owner)
		if f.Append {
			b.WriteString(" append")
		}
		b.WriteString(" " + strings.ReplaceAll(string(f.Content), "\n", `\n`) + "}")
	}
	if s.Command != nil {
		b.WriteString(" Command" + strings.Join(quoteAll(s.Command), ","))
	}
	return b.String() + "}"
}

func quoteAll(a []string) []string {
	out := make([]string, len(a))
	for i, s := range a {
		out[i] = "«" + s + "»"
	}
	return out
}

// oneFile plans a cloud-config with a single write_files item (given as the
// YAML mapping's lines) and returns the file.
func oneFile(t *testing.T, item string) (*File, error) {
	t.Helper()
	steps, err := Plan(FormatCloudConfig, []byte("#cloud-config\nwrite_files:\n- path: /f\n"+item), Vars{Hostname: "h", LocalIPv4: "172.18.0.5"})
	if err != nil {
		return nil, err
	}
	if len(steps) != 1 || steps[0].File == nil {
		t.Fatalf("steps = %v, want one file", steps)
	}
	return steps[0].File, nil
}

func TestWriteFilesEncodings(t *testing.T) {
	const text = "hello\nworld\n"
	gzB64 := base64.StdEncoding.EncodeToString(gz(t, text))
	for _, tc := range []struct{ encoding, content string }{
		{"", text},
		{"text/plain", text},
		{"b64", b64(text)},
		{"base64", b64(text)},
		{"BASE64", b64(text)},
		{"base64", b64(text)[:8] + "\n  " + b64(text)[8:]}, // wrapped lines
		{"base64", strings.TrimRight(b64(text), "=")},      // no padding
		{"gz+b64", gzB64},
		{"gzip+base64", gzB64},
		{"gz+base64", gzB64},
		{"gzip+b64", gzB64},
	} {
		item := "  content: " + strconvQuote(tc.content) + "\n"
		if tc.encoding != "" {
			item += "  encoding: " + tc.encoding + "\n"
		}
		f, err := oneFile(t, item)
		if err != nil {
			t.Errorf("encoding %q: %v", tc.encoding, err)
			continue
		}
		if string(f.Content) != text {
			t.Errorf("encoding %q: content %q, want %q", tc.encoding, f.Content, text)
		}
	}
}

// strconvQuote quotes s as a YAML double-quoted scalar.
func strconvQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func TestWriteFilesFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		item string
		want File
	}{
		{"defaults", "  content: x\n", File{Path: "/f", Content: []byte("x"), Mode: 0o644}},
		{"octal string", "  permissions: '0600'\n", File{Path: "/f", Content: []byte{}, Mode: 0o600}},
		{"octal string without zero", "  permissions: \"750\"\n", File{Path: "/f", Content: []byte{}, Mode: 0o750}},
		{"0o string", "  permissions: '0o640'\n", File{Path: "/f", Content: []byte{}, Mode: 0o640}},
		{"YAML 1.1 octal number", "  permissions: 0640\n", File{Path: "/f", Content: []byte{}, Mode: 0o640}},
		{"decimal number is the mode", "  permissions: 420\n", File{Path: "/f", Content: []byte{}, Mode: 0o644}},
		{"setuid and sticky", "  permissions: '04755'\n", File{Path: "/f", Content: []byte{}, Mode: 0o755 | os.ModeSetuid}},
		{"sticky", "  permissions: '1777'\n", File{Path: "/f", Content: []byte{}, Mode: 0o777 | os.ModeSticky}},
		{"owner", "  owner: kube:docker\n", File{Path: "/f", Content: []byte{}, Mode: 0o644, Owner: "kube:docker"}},
		{"append", "  append: true\n  content: more\n", File{Path: "/f", Content: []byte("more"), Mode: 0o644, Append: true}},
		{"append as string", "  append: 'yes'\n", File{Path: "/f", Content: []byte{}, Mode: 0o644, Append: true}},
		{"append false", "  append: false\n", File{Path: "/f", Content: []byte{}, Mode: 0o644}},
		{"hostname everywhere", "  content: \"a {{ds.meta_data.hostname}} b {{  v1.local_hostname }} c {{ ds.meta_data.local_hostname}}\"\n",
			File{Path: "/f", Content: []byte("a h b h c h"), Mode: 0o644}},
		{"address everywhere", "  content: \"a {{ds.meta_data.local_ipv4}} b {{  ds.meta_data.local_ipv4 }}\"\n",
			File{Path: "/f", Content: []byte("a 172.18.0.5 b 172.18.0.5"), Mode: 0o644}},
		{"hostname and address", "  content: \"{{ ds.meta_data.local_ipv4 }} {{ ds.meta_data.local_hostname }}\"\n",
			File{Path: "/f", Content: []byte("172.18.0.5 h"), Mode: 0o644}},
		{"other jinja untouched", "  content: \"{{ ds.meta_data.instance_id }}\"\n", File{Path: "/f", Content: []byte("{{ ds.meta_data.instance_id }}"), Mode: 0o644}},
		// cloud-init has no v1 key for the address: a template using one
		// would not work on a VM either, so it is left for kubeadm to refuse.
		{"v1.local_ipv4 untouched", "  content: \"{{ v1.local_ipv4 }}\"\n", File{Path: "/f", Content: []byte("{{ v1.local_ipv4 }}"), Mode: 0o644}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := oneFile(t, tc.item)
			if err != nil {
				t.Fatal(err)
			}
			if string(f.Content) == "" {
				f.Content = []byte{}
			}
			if !reflect.DeepEqual(*f, tc.want) {
				t.Errorf("got  %s\nwant %s", showStep(Step{File: f}), showStep(Step{File: &tc.want}))
			}
		})
	}
}

// TestSubstituteAddress checks that the address variable the multihost
// flavor uses (templates/cluster-template-multihost.yaml) is replaced
// wherever the data can hold it, as the hostname ones are.
func TestSubstituteAddress(t *testing.T) {
	vars := Vars{Hostname: "node-0", LocalIPv4: "172.18.0.5"}
	for _, tc := range []struct {
		name   string
		format Format
		data   string
		want   []Step
	}{
		{"kubeadm configuration", FormatCloudConfig, `write_files:
- path: /run/kubeadm/kubeadm.yaml
  content: |
    kind: InitConfiguration
    localAPIEndpoint:
      advertiseAddress: '{{ ds.meta_data.local_ipv4 }}'
    nodeRegistration:
      kubeletExtraArgs:
      - name: node-ip
        value: "{{ds.meta_data.local_ipv4}}"
`, []Step{file("/run/kubeadm/kubeadm.yaml", `kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: '172.18.0.5'
nodeRegistration:
  kubeletExtraArgs:
  - name: node-ip
    value: "172.18.0.5"
`, 0o644, "", false)}},
		{"command list", FormatCloudConfig, "runcmd:\n- [ip, route, get, \"{{  ds.meta_data.local_ipv4  }}\"]\n",
			[]Step{cmd("run ip route get 172.18.0.5", "ip", "route", "get", "172.18.0.5")}},
		{"shell command", FormatCloudConfig, "runcmd:\n- echo {{ ds.meta_data.local_ipv4 }} {{ ds.meta_data.hostname }} >> /etc/hosts\n",
			[]Step{sh("run echo 172.18.0.5 node-0 >> /etc/hosts", "echo 172.18.0.5 node-0 >> /etc/hosts")}},
		{"ignition path and content", FormatIgnition,
			`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/{{ds.meta_data.local_ipv4}}","contents":{"source":"data:,{{ds.meta_data.local_ipv4}}"}}]}}`,
			[]Step{file("/etc/172.18.0.5", "172.18.0.5", 0o644, "", false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := Plan(tc.format, []byte(tc.data), vars)
			if err != nil {
				t.Fatal(err)
			}
			assertSteps(t, steps, tc.want)
		})
	}
}

func TestCloudConfigOrder(t *testing.T) {
	// runcmd before write_files in the document; bootcmd last; a deferred
	// file: cloud-init's order is bootcmd, files, deferred files, runcmd.
	data := `#cloud-config
runcmd:
- [echo, run]
write_files:
- {path: /later, defer: true}
- {path: /first}
bootcmd:
- echo boot
`
	steps, err := Plan(FormatCloudConfig, []byte(data), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, s.Description)
	}
	want := []string{"run echo boot", "write /first", "write /later", "run echo run"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestKubeadmPreflight(t *testing.T) {
	all := IgnoredPreflightErrors
	for _, tc := range []struct {
		name string
		item string // a runcmd item in YAML
		want []string
	}{
		{"string, no flag", `"kubeadm init --config /run/kubeadm/kubeadm.yaml"`,
			[]string{"/bin/sh", "-c", "kubeadm init " + pf + " --config /run/kubeadm/kubeadm.yaml"}},
		{"string, join", `"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo ok"`,
			[]string{"/bin/sh", "-c", "kubeadm join " + pf + " --config /run/kubeadm/kubeadm-join-config.yaml && echo ok"}},
		{"string, full path", `"/usr/local/bin/kubeadm join --v=5"`,
			[]string{"/bin/sh", "-c", "/usr/local/bin/kubeadm join " + pf + " --v=5"}},
		{"string, wrapped in sh -c", `"/bin/sh -c 'kubeadm init --config x'"`,
			[]string{"/bin/sh", "-c", "/bin/sh -c 'kubeadm init " + pf + " --config x'"}},
		{"string, existing flag with values", `"kubeadm init --ignore-preflight-errors=Swap,NumCPU --config x"`,
			[]string{"/bin/sh", "-c", "kubeadm init --ignore-preflight-errors=Swap,NumCPU,SystemVerification,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables --config x"}},
		{"string, existing flag with blank and quotes", `"kubeadm join --ignore-preflight-errors 'numcpu' --config x"`,
			[]string{"/bin/sh", "-c", "kubeadm join --ignore-preflight-errors 'numcpu," + all + "' --config x"}},
		{"string, existing flag all", `"kubeadm init --ignore-preflight-errors=all"`,
			[]string{"/bin/sh", "-c", "kubeadm init --ignore-preflight-errors=all"}},
		{"string, existing flag ALL among others", `"kubeadm init --ignore-preflight-errors=Swap,ALL"`,
			[]string{"/bin/sh", "-c", "kubeadm init --ignore-preflight-errors=Swap,ALL"}},
		{"string, flag of a later command is not merged", `"kubeadm init; other --ignore-preflight-errors=x"`,
			[]string{"/bin/sh", "-c", "kubeadm init " + pf + "; other --ignore-preflight-errors=x"}},
		{"string, two commands", `"kubeadm reset -f && kubeadm join --config x || kubeadm join --config y"`,
			[]string{"/bin/sh", "-c", "kubeadm reset -f && kubeadm join " + pf + " --config x || kubeadm join " + pf + " --config y"}},
		{"string, phase is left alone", `"kubeadm init phase upload-config all"`,
			[]string{"/bin/sh", "-c", "kubeadm init phase upload-config all"}},
		{"string, phase preflight", `"kubeadm join phase preflight --config x"`,
			[]string{"/bin/sh", "-c", "kubeadm join phase preflight " + pf + " --config x"}},
		{"string, not kubeadm", `"mykubeadm init; kubeadm initialize; kubeadm version"`,
			[]string{"/bin/sh", "-c", "mykubeadm init; kubeadm initialize; kubeadm version"}},
		{"list, no flag", `[kubeadm, init, --config, /run/kubeadm/kubeadm.yaml]`,
			[]string{"kubeadm", "init", pf, "--config", "/run/kubeadm/kubeadm.yaml"}},
		{"list, full path", `[/usr/local/bin/kubeadm, join]`,
			[]string{"/usr/local/bin/kubeadm", "join", pf}},
		{"list, existing flag", `[kubeadm, join, "--ignore-preflight-errors=Swap"]`,
			[]string{"kubeadm", "join", "--ignore-preflight-errors=Swap,SystemVerification,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"}},
		{"list, existing flag separate value", `[kubeadm, join, "--ignore-preflight-errors", "NumCPU"]`,
			[]string{"kubeadm", "join", "--ignore-preflight-errors", "NumCPU," + all}},
		{"list, all", `[kubeadm, init, "--ignore-preflight-errors=all"]`,
			[]string{"kubeadm", "init", "--ignore-preflight-errors=all"}},
		{"list, phase", `[kubeadm, init, phase, certs, all]`,
			[]string{"kubeadm", "init", "phase", "certs", "all"}},
		{"list, sh -c", `[/bin/bash, -ec, "kubeadm init --config x"]`,
			[]string{"/bin/bash", "-ec", "kubeadm init " + pf + " --config x"}},
		{"list, not kubeadm", `[echo, kubeadm, init]`,
			[]string{"echo", "kubeadm", "init"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := Plan(FormatCloudConfig, []byte("runcmd:\n- "+tc.item+"\n"), Vars{})
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) != 1 || !reflect.DeepEqual(steps[0].Command, tc.want) {
				t.Errorf("got %q\nwant %q", steps[0].Command, tc.want)
			}
		})
	}
}

func TestPreflightNotAppliedToBootcmd(t *testing.T) {
	steps, err := Plan(FormatCloudConfig, []byte("bootcmd:\n- kubeadm init\n"), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if got := steps[0].Command[2]; got != "kubeadm init" {
		t.Errorf("bootcmd changed to %q", got)
	}
}

func TestErrors(t *testing.T) {
	bomb := base64.StdEncoding.EncodeToString(gz(t, strings.Repeat("\x00", maxDecoded+1)))
	for _, tc := range []struct {
		name    string
		format  Format
		data    string
		vars    Vars
		want    error
		message string // a substring of the error
	}{
		{"unknown format", "mime", "#cloud-config\n", Vars{}, ErrUnknownFormat, `"mime"`},
		{"empty cloud-config", FormatCloudConfig, "", Vars{}, ErrMalformed, "malformed cloud-config: empty"},
		{"only headers", FormatCloudConfig, "## template: jinja\n#cloud-config\n", Vars{}, ErrMalformed, "empty"},
		{"empty ignition", FormatIgnition, " \n", Vars{}, ErrMalformed, "malformed ignition: empty"},
		{"malformed YAML", FormatCloudConfig, "write_files: [\n- path: /a\n  content: :", Vars{}, ErrMalformed, "invalid YAML"},
		{"not a mapping", FormatCloudConfig, "- a\n- b\n", Vars{}, ErrMalformed, "not a mapping"},
		{"shell script", FormatCloudConfig, "#!/bin/sh\necho hi\n", Vars{}, ErrMalformed, "script"},
		{"unknown encoding", FormatCloudConfig, "write_files:\n- {path: /a}\n- {path: /b}\n- {path: /c, encoding: b65, content: x}\n", Vars{}, ErrMalformed,
			`malformed cloud-config: write_files[2]: /c: unknown encoding "b65"`},
		{"bad base64", FormatCloudConfig, "write_files:\n- {path: /a, encoding: b64, content: '!!!'}\n", Vars{}, ErrMalformed, "write_files[0]: /a: bad base64"},
		{"bad gzip", FormatCloudConfig, "write_files:\n- {path: /a, encoding: gz+b64, content: " + b64("not gzip") + "}\n", Vars{}, ErrMalformed, "bad gzip"},
		{"truncated gzip", FormatCloudConfig, "write_files:\n- {path: /a, encoding: gz+b64, content: " + base64.StdEncoding.EncodeToString(gz(t, "hello world")[:15]) + "}\n", Vars{}, ErrMalformed, "bad gzip"},
		{"gzip bomb", FormatCloudConfig, "write_files:\n- {path: /a, encoding: gz+b64, content: " + bomb + "}\n", Vars{}, ErrMalformed, "larger than"},
		{"bad permissions", FormatCloudConfig, "write_files:\n- {path: /a, permissions: '0999'}\n", Vars{}, ErrMalformed, `permissions "0999" is not an octal mode`},
		{"permissions out of range", FormatCloudConfig, "write_files:\n- {path: /a, permissions: 99999}\n", Vars{}, ErrMalformed, "out of range"},
		{"permissions a list", FormatCloudConfig, "write_files:\n- {path: /a, permissions: [1]}\n", Vars{}, ErrMalformed, "not a string or a number"},
		{"no path", FormatCloudConfig, "write_files:\n- {content: x}\n", Vars{}, ErrMalformed, "write_files[0]: no path"},
		{"relative path", FormatCloudConfig, "write_files:\n- {path: etc/x}\n", Vars{}, ErrMalformed, "not absolute"},
		{"path not a string", FormatCloudConfig, "write_files:\n- {path: [a]}\n", Vars{}, ErrMalformed, "write_files[0]: path: wrong type"},
		{"write_files not a list", FormatCloudConfig, "write_files: {path: /a}\n", Vars{}, ErrMalformed, "write_files: not a list"},
		{"bad append", FormatCloudConfig, "write_files:\n- {path: /a, append: maybe}\n", Vars{}, ErrMalformed, "append is not a boolean"},
		{"source URI", FormatCloudConfig, "write_files:\n- {path: /a, source: {uri: 'http://x'}}\n", Vars{}, ErrMalformed, "not supported"},
		{"runcmd not a list", FormatCloudConfig, "runcmd: echo\n", Vars{}, ErrMalformed, "runcmd: not a list"},
		{"runcmd item a map", FormatCloudConfig, "runcmd:\n- echo\n- {a: b}\n", Vars{}, ErrMalformed, "runcmd[1]: not a string or a list"},
		{"runcmd empty list", FormatCloudConfig, "runcmd:\n- []\n", Vars{}, ErrMalformed, "runcmd[0]: empty command"},
		{"runcmd nested list", FormatCloudConfig, "runcmd:\n- [echo, [x]]\n", Vars{}, ErrMalformed, "runcmd[0][1]: not a string"},
		{"hostname needed", FormatCloudConfig, "runcmd:\n- echo {{ ds.meta_data.hostname }}\n", Vars{}, ErrMissingHostname, "{{ ds.meta_data.hostname }}"},
		{"address needed in a command", FormatCloudConfig, "runcmd:\n- [echo, \"{{ds.meta_data.local_ipv4}}\"]\n", Vars{Hostname: "h"}, ErrMissingAddress,
			`command "run echo {{ds.meta_data.local_ipv4}}" uses {{ds.meta_data.local_ipv4}}`},
		{"address needed in a file", FormatCloudConfig, "write_files:\n- {path: /a, content: 'node-ip: {{ ds.meta_data.local_ipv4 }}'}\n", Vars{Hostname: "h"}, ErrMissingAddress,
			"file /a uses {{ ds.meta_data.local_ipv4 }}"},
		{"address needed in a path", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/{{ds.meta_data.local_ipv4}}"}]}}`, Vars{Hostname: "h"}, ErrMissingAddress,
			"path /etc/{{ds.meta_data.local_ipv4}} uses"},
		{"hostname needed though the address is given", FormatCloudConfig, "runcmd:\n- echo {{ v1.local_hostname }} {{ ds.meta_data.local_ipv4 }}\n", Vars{LocalIPv4: "10.0.0.1"},
			ErrMissingHostname, "{{ v1.local_hostname }}"},
		{"ignition not JSON", FormatIgnition, "{", Vars{}, ErrMalformed, "not a JSON object"},
		{"ignition no version", FormatIgnition, `{"storage":{}}`, Vars{}, ErrMalformed, "no ignition section"},
		{"ignition old version", FormatIgnition, `{"ignition":{"version":"1.0.0"}}`, Vars{}, ErrMalformed, `unsupported ignition.version "1.0.0"`},
		{"ignition http source", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"source":"https://example.com/a"}}]}}`, Vars{}, ErrMalformed,
			"storage.files[0]: /a: source \"https://example.com/a\" is not a data URL"},
		{"ignition bad base64", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:;base64,!!"}}]}}`, Vars{}, ErrMalformed, "bad base64"},
		{"ignition bad gzip", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:,abc","compression":"gzip"}}]}}`, Vars{}, ErrMalformed, "bad gzip"},
		{"ignition unknown compression", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:,abc","compression":"xz"}}]}}`, Vars{}, ErrMalformed, `unsupported compression "xz"`},
		{"ignition bad mode", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","mode":"0644"}]}}`, Vars{}, ErrMalformed, "storage.files[0]: mode: wrong type"},
		{"ignition mode out of range", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","mode":-1}]}}`, Vars{}, ErrMalformed, "out of range"},
		{"ignition unit path traversal", FormatIgnition, `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"../../etc/passwd","contents":"x"}]}}`, Vars{}, ErrMalformed, "invalid name"},
		{"ignition v3 append bool", FormatIgnition, `{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/a","append":true}]}}`, Vars{}, ErrMalformed,
			"storage.files[0]: append: wrong type (bool) for spec 3.x"},
		{"ignition v2 append list", FormatIgnition, `{"ignition":{"version":"2.3.0"},"storage":{"files":[{"path":"/a","append":[]}]}}`, Vars{}, ErrMalformed,
			"storage.files[0]: append: wrong type (array) for spec 2.x"},
		{"ignition user id a string", FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","user":{"id":"0"}}]}}`, Vars{}, ErrMalformed,
			"storage.files[0]: user.id: wrong type (string) for spec 3.x"},
		{"ignition dropin name a number", FormatIgnition, `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"a.service","dropins":[{"name":1}]}]}}`, Vars{}, ErrMalformed,
			"systemd.units: dropins.name: wrong type (number) for spec 3.x"},
		{"ignition no path", FormatIgnition, `{"ignition":{"version":"2.3.0"},"storage":{"files":[{"filesystem":"root"}]}}`, Vars{}, ErrMalformed, "storage.files[0]: no path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := Plan(tc.format, []byte(tc.data), tc.vars)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v (steps %v), want %v", err, steps, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("err = %q, want it to contain %q", err, tc.message)
			}
			if steps != nil {
				t.Errorf("steps = %v with an error", steps)
			}
		})
	}
}

func TestDescriptionTruncated(t *testing.T) {
	long := "echo " + strings.Repeat("x", 200)
	steps, err := Plan(FormatCloudConfig, []byte("runcmd:\n- "+long+"\n- \"echo a\\necho b\"\n"), Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if d := steps[0].Description; len([]rune(d)) != maxDescription || !strings.HasSuffix(d, " ...") {
		t.Errorf("long description %q (%d runes)", d, len([]rune(d)))
	}
	if d := steps[1].Description; d != "run echo a ..." {
		t.Errorf("multi-line description %q", d)
	}
}
