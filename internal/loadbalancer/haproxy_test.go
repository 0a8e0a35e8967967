package loadbalancer

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func backends(n int) Config {
	cfg := Config{FrontendPort: 6443, BackendPort: 6443}
	for i := range n {
		cfg.Backends = append(cfg.Backends, Backend{Name: fmt.Sprintf("cp-%d", i), Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Weight: 100})
	}
	return cfg
}

func TestRenderDefaultAndCustom(t *testing.T) {
	out, err := Render("", backends(2))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "server cp-1 10.0.0.2:6443 weight 100") {
		t.Fatalf("the default configuration lacks a backend:\n%s", out)
	}
	custom := `{{ range $i, $b := .Backends }}{{ range $.Backends }}{{ $b.Name }}>{{ .Name }} {{ end }}{{ end }}{{ with .IPv6 }}v6{{ else }}v4{{ end }} {{ JoinHostPort "::1" .BackendPort }}`
	out, err = Render(custom, backends(2))
	if err != nil {
		t.Fatal(err)
	}
	if want := "cp-0>cp-0 cp-0>cp-1 cp-1>cp-0 cp-1>cp-1 v4 [::1]:6443"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

// A custom template written for CAPD, with CAPD's names for the ports and
// the backends and a text port for JoinHostPort, renders with CAPCT.
func TestRenderTemplatesWrittenForCAPD(t *testing.T) {
	cfg := backends(2)
	cfg.Backends[1].Weight = 0
	custom := `frontend control-plane
  bind *:{{ .FrontendControlPlanePort }}
  {{- if .IPv6 }}
  bind :::{{ .FrontendControlPlanePort }};
  {{- end }}
backend kube-apiservers
  {{- range $server, $backend := .BackendServers }}
  server {{ $server }} {{ JoinHostPort $backend.Address $.BackendControlPlanePort }} weight {{ $backend.Weight }} check
  {{- end }}
`
	out, err := Render(custom, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `frontend control-plane
  bind *:6443
backend kube-apiservers
  server cp-0 10.0.0.1:6443 weight 100 check
  server cp-1 10.0.0.2:6443 weight 0 check
`
	if string(out) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
}

// TestRenderRefusesUnboundedTemplates covers what a hostile ConfigMap could
// do to the manager: each is refused quickly with ErrTemplateRefused.
func TestRenderRefusesUnboundedTemplates(t *testing.T) {
	testCases := []struct {
		name     string
		template string
		want     string
	}{
		{name: "text over the size bound", template: strings.Repeat("#", MaxTemplateSize+1), want: "more than 65536"},
		{name: "ranging over a number", template: `{{ range 100000000000 }}{{ end }}`, want: "only .Backends and .BackendServers may be ranged over"},
		{name: "ranging over a variable", template: `{{ $n := 100000000000 }}{{ range $n }}{{ end }}`, want: "only .Backends"},
		{name: "ranges nested three deep", template: `{{ range .Backends }}{{ range .Backends }}{{ range .Backends }}{{ end }}{{ end }}{{ end }}`, want: "nested deeper than 2"},
		{name: "CAPD's names nested three deep", template: `{{ range .BackendServers }}{{ range $.BackendServers }}{{ range $.Backends }}{{ end }}{{ end }}{{ end }}`, want: "nested deeper than 2"},
		{name: "a range hidden in an if", template: `{{ if .IPv6 }}{{ else }}{{ range 5 }}{{ end }}{{ end }}`, want: "only .Backends"},
		{name: "a recursive template", template: `{{ define "a" }}{{ template "a" . }}{{ template "a" . }}{{ end }}{{ template "a" . }}`, want: "defines templates"},
		{name: "output over the size bound", template: `{{ range .Backends }}{{ range $.Backends }}{{ printf "%999999d" 1 }}{{ end }}{{ end }}`, want: "larger than 1048576 bytes"},
		// The render bomb that OOMKilled the manager: a megabyte doubled
		// twelve times in a variable (4 GiB), never written.
		{name: "a value doubled in a variable", template: renderBomb(12), want: "a value of up to 2000002 bytes, more than 1048576"},
		{name: "many values, each within the bound", template: `{{ range .Backends }}{{ range $.Backends }}{{ $x := printf "%0900000d" 0 }}{{ end }}{{ end }}`, want: "builds more than 4194304 bytes of values"},
		{name: "printf width over the value bound", template: `{{ printf "%02000000d" 0 }}`, want: "printf width 2000000 is more than 1048576"},
		{name: "printf precision over the value bound", template: `{{ printf "%.[1]2000000f" 1.0 }}`, want: "printf precision 2000000 is more than 1048576"},
		{name: "printf width from an operand", template: `{{ printf "%*d" 100000000 0 }}`, want: "printf takes a width from an operand (*)"},
		{name: "printf naming one operand many times", template: `{{ $a := printf "%0500000d" 0 }}{{ $b := printf "%[1]s%[1]s%[1]s" $a }}`, want: "more than 1048576"},
		{name: "println of a large value twice", template: `{{ $a := printf "%0600000d" 0 }}{{ $b := println $a $a }}`, want: "more than 1048576"},
		{name: "html escaping a large value", template: `{{ $a := printf "%0200000d" 0 }}{{ $b := html $a }}`, want: "a value of up to 1200006 bytes"},
		{name: "js escaping a large value", template: `{{ $a := printf "%0200000d" 0 }}{{ $b := js $a $a }}`, want: "more than 1048576"},
		{name: "urlquery escaping a large value", template: `{{ $a := printf "%0200000d" 0 }}{{ $b := urlquery $a }}`, want: "more than 1048576"},
		{name: "JoinHostPort of a large host", template: `{{ $a := printf "%01000000d" 0 }}{{ $b := JoinHostPort $a $a }}`, want: "more than 1048576"},
		{name: "call", template: `{{ call .FrontendPort }}`, want: "it uses call"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Render(tc.template, backends(3))
			if !errors.Is(err, ErrTemplateRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal containing %q, got %v", tc.want, err)
			}
			if d := time.Since(start); d > RenderTimeout {
				t.Fatalf("the refusal took %s", d)
			}
		})
	}
}

// renderBomb is the hostile template of the report that took the manager
// down: a megabyte of zeros, then doublings of it in a variable.
func renderBomb(doublings int) string {
	return `{{$a := printf "%01000000d" 0}}` + strings.Repeat(`{{$a = print $a $a}}`, doublings)
}

// TestRenderBoundsMemory measures what a refused render bomb allocated: a
// few times the budget at most, never the gigabytes it asks for.
func TestRenderBoundsMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := Render(renderBomb(12), backends(3)); !errors.Is(err, ErrTemplateRefused) {
		t.Fatalf("want a refusal, got %v", err)
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 4*maxBuilt {
		t.Fatalf("the render allocated %d MiB, more than %d MiB", allocated>>20, 4*maxBuilt>>20)
	}
}

// TestRenderTimesOut shows the time bound: a template within every
// structural bound that is still slow is cut off, and its execution stops at
// its next write.
func TestRenderTimesOut(t *testing.T) {
	slow := `{{ range .Backends }}{{ range $.Backends }}{{ printf "%99999d" 1 }}{{ end }}{{ end }}`
	_, err := render(slow, backends(2000), limits{template: MaxTemplateSize, output: 1 << 40, value: 1 << 40, built: 1 << 40, timeout: 10 * time.Millisecond})
	if !errors.Is(err, ErrTemplateRefused) || !strings.Contains(err.Error(), "longer than 10ms") {
		t.Fatalf("want a timeout refusal, got %v", err)
	}
}
