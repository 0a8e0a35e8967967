package loadbalancer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// update rewrites the image's built-in configuration from the renderer
// (make generate does, and make verify then fails when it was stale).
var update = flag.Bool("update", false, "rewrite images/haproxy/haproxy.cfg from the renderer")

// imageConfigPath is the configuration the capct/haproxy image starts
// with, relative to this package.
var imageConfigPath = filepath.Join("..", "..", "images", "haproxy", "haproxy.cfg")

// emptyCluster is the configuration CAPCT writes into the load balancer of
// an IPv4 cluster that has no control-plane machine with an address yet.
func emptyCluster(t *testing.T) []byte {
	t.Helper()
	config, _, err := Configuration("", Config{FrontendPort: APIServerPort, BackendPort: APIServerPort})
	if err != nil {
		t.Fatal(err)
	}
	return config
}

// TestImageConfigIsRendered holds the capct/haproxy image's built-in
// configuration equal, byte for byte, to what CAPCT renders for a cluster
// with no control-plane machine yet. CAPCT replaces the built-in one at its
// first reload; were they different, a client or a health check of the
// load balancer would see the endpoints, timeouts or limits change at that
// moment (the rendered configuration once dropped the image's /healthz).
// The file is generated from the renderer rather than written by hand and
// compared line by line with a few chosen ones, because any difference
// between the two is one that nobody chose, and the whole file compared
// leaves none to hide. It is IPv4: the image cannot know a cluster's
// family, and an IPv6 cluster's first sync adds its frontend's v6 bind.
// Being what CAPCT writes, marker included, it also lets CAPCT's first
// sync of such a cluster find nothing to change and reload nothing.
func TestImageConfigIsRendered(t *testing.T) {
	want := emptyCluster(t)
	if *update {
		if err := os.WriteFile(imageConfigPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(imageConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("%s is not what CAPCT renders for a cluster with no control-plane machine; "+
			"run make generate (go test ./internal/loadbalancer -run TestImageConfigIsRendered -update) and rebuild the image (make lb-image).\n"+
			"first difference at line %d:\n  image:    %q\n  rendered: %q",
			imageConfigPath, firstDifference(have, want)+1, line(have, firstDifference(have, want)), line(want, firstDifference(have, want)))
	}
}

// TestRenderedConfigAnswersHealthChecks pins the endpoints of the stats
// frontend that the image's users rely on, so that regenerating the image's
// configuration from a renderer that lost one fails as well: GET /healthz
// on StatsPort answers 200 "ok" (health checks of the load balancer, the
// node-image test) and the statistics page is at StatsPath (reload checks).
func TestRenderedConfigAnswersHealthChecks(t *testing.T) {
	config := string(emptyCluster(t))
	stats := section(config, "frontend stats")
	for _, want := range []string{
		"mode http",
		"bind *:8404",
		"stats uri " + StatsPath,
		`http-request return status 200 content-type text/plain string "ok" if { path /healthz }`,
	} {
		if !strings.Contains(stats, "\n  "+want+"\n") {
			t.Errorf("the stats frontend lacks %q:\n%s", want, stats)
		}
	}
	if StatsPort != 8404 {
		t.Errorf("StatsPort is %d, the configuration binds 8404", StatsPort)
	}
	if cp := section(config, "frontend control-plane"); !strings.Contains(cp, "\n  bind *:6443\n") {
		t.Errorf("the control-plane frontend does not listen on 6443:\n%s", cp)
	}
}

// section returns the header line of config and the indented lines that
// follow it, each ending in a newline.
func section(config, header string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(config, "\n") {
		switch {
		case l == header:
			in = true
		case in && !strings.HasPrefix(l, " "):
			return b.String()
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// firstDifference returns the 0-based index of the first line where a and
// b differ.
func firstDifference(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(la), len(lb)) {
		if i >= len(la) || i >= len(lb) || la[i] != lb[i] {
			return i
		}
	}
	return 0
}

// line returns line i of b, or "" past its end.
func line(b []byte, i int) string {
	lines := strings.Split(string(b), "\n")
	if i < len(lines) {
		return lines[i]
	}
	return ""
}
