//go:build engine

package nodeimage

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
)

// cniPluginsScript prints one line per entry of /opt/cni/bin: its name,
// then what it answers to CNI's VERSION command when it is an executable
// file (through a link or not), else nothing.
const cniPluginsScript = `cd /opt/cni/bin || exit 1
for f in * .[!.]*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  printf '%s ' "$f"
  if [ -f "$f" ] && [ -x "$f" ]; then CNI_COMMAND=VERSION "./$f" </dev/null | tr -d '\n'; fi
  echo
done`

// TestNodeImageCNIPlugins checks that the node image's /opt/cni/bin, where
// its containerd looks for CNI plugins, holds exactly the plugins kind's
// node images ship (podnetwork.NodeCNIPlugins: host-local, loopback,
// portmap, ptp) and bridge, which only the configuration of CAPCT releases
// before v0.1.0 uses (the Dockerfile says why it stays). Each plugin must
// also run and support the CNI version of CAPCT's configuration. That the
// pod network needs nothing but kind's plugins is shown by every cluster
// of this package: runNode deletes the others first.
func TestNodeImageCNIPlugins(t *testing.T) {
	conf, err := podnetwork.CNIConfig([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var confVersion struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(conf, &confVersion); err != nil || confVersion.CNIVersion == "" {
		t.Fatalf("the CNI config's version: %v\n%s", err, conf)
	}

	out := must(t, "run", "--rm", "--label", testLabel, "--network", "none", "--entrypoint", "sh", nodeImage, "-c", cniPluginsScript)
	var names []string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		name, version, _ := strings.Cut(line, " ")
		names = append(names, name)
		var v struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal([]byte(version), &v); err != nil {
			t.Errorf("/opt/cni/bin/%s is not a CNI plugin that runs (CNI_COMMAND=VERSION printed %q): %v", name, version, err)
			continue
		}
		if !slices.Contains(v.SupportedVersions, confVersion.CNIVersion) {
			t.Errorf("/opt/cni/bin/%s supports CNI versions %v, not %s, the version of CAPCT's configuration", name, v.SupportedVersions, confVersion.CNIVersion)
		}
	}
	slices.Sort(names)
	want := append(podnetwork.NodeCNIPlugins(), "bridge")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("/opt/cni/bin holds %v, want exactly %v (what kind's node images ship, and bridge)", names, want)
	}
}
