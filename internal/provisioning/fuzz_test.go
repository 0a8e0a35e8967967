package provisioning

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzPlan checks that no input panics, that errors are the typed ones, and
// that every plan is well formed and deterministic. `go test` runs the seeds;
// `go test -fuzz=FuzzPlan ./internal/provisioning` explores further.
func FuzzPlan(f *testing.F) {
	for _, seed := range []struct {
		format Format
		data   string
	}{
		{FormatCloudConfig, cabpkInit},
		{FormatCloudConfig, "runcmd:\n- [echo, '{{ds.meta_data.local_ipv4}}', '{{ v1.local_hostname }}']\n"},
		{"", "#cloud-config\nruncmd:\n- [kubeadm, join, --ignore-preflight-errors, Swap]\n- kubeadm init phase preflight\n"},
		{FormatCloudConfig, "write_files:\n- {path: /a, encoding: gz+b64, content: H4sIAAAAAAAA/w==}\n"},
		{FormatCloudConfig, "write_files:\n- {path: /a, permissions: 0o7777, append: on, defer: true}\n"},
		{FormatCloudConfig, "bootcmd: [[a, 1, true]]\nruncmd: ['sh -c \"kubeadm join --ignore-preflight-errors=\"']\n"},
		{FormatCloudConfig, "- a\n"},
		{FormatCloudConfig, ""},
		{FormatIgnition, cabpkIgnition},
		{FormatIgnition, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/a","contents":{"source":"data:;base64,QQ==","compression":"gzip"},"append":[{"source":"data:,%zz"}]}]}}`},
		{FormatIgnition, `{"ignition":{"version":"2.0"},"systemd":{"units":[{"name":"x","dropins":[{"name":"y","contents":"z"}],"enable":true}]}}`},
		{FormatIgnition, `[]`},
		{"other", "x"},
	} {
		f.Add(string(seed.format), []byte(seed.data), "node-0", "172.18.0.2")
	}
	f.Fuzz(func(t *testing.T, format string, data []byte, hostname, localIPv4 string) {
		orig := bytes.Clone(data)
		vars := Vars{Hostname: hostname, LocalIPv4: localIPv4}
		r, err := Analyze(Format(format), data, vars)
		if !bytes.Equal(data, orig) {
			t.Fatal("Analyze modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownFormat) && !errors.Is(err, ErrMissingHostname) &&
				!errors.Is(err, ErrMissingAddress) {
				t.Fatalf("untyped error %v", err)
			}
			if r.Steps != nil || r.Ignored != nil {
				t.Fatalf("result %v with error %v", r, err)
			}
			return
		}
		for i, s := range r.Steps {
			if (s.File == nil) == (s.Command == nil) {
				t.Fatalf("step %d: want exactly one of File and Command: %+v", i, s)
			}
			if s.Description == "" || utf8.RuneCountInString(s.Description) > maxDescription || strings.Contains(s.Description, "\n") {
				t.Fatalf("step %d: bad description %q", i, s.Description)
			}
			if s.File != nil && (!strings.HasPrefix(s.File.Path, "/") || s.File.Mode&^(0o777|modeSpecial) != 0) {
				t.Fatalf("step %d: bad file %q mode %v", i, s.File.Path, s.File.Mode)
			}
			if s.Command != nil && len(s.Command) == 0 {
				t.Fatalf("step %d: empty command", i)
			}
		}
		again, err := Analyze(Format(format), data, vars)
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("not deterministic: %v", err)
		}
	})
}
