package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// node is an element of a parsed SVG.
type node struct {
	name     string
	attrs    map[string]string
	text     string
	children []*node
}

func parseSVG(t *testing.T, path string) *node {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dec := xml.NewDecoder(f)
	var stack []*node
	var root *node
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			if len(stack) == 0 {
				root = n
			} else {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tok)
			}
		}
	}
	return root
}

// walk calls f for n and every element under it, with the font size in
// effect (inherited from the enclosing groups).
func walk(n *node, size float64, f func(n *node, size float64)) {
	if s, ok := n.attrs["font-size"]; ok {
		size, _ = strconv.ParseFloat(s, 64)
	}
	f(n, size)
	for _, c := range n.children {
		walk(c, size, f)
	}
}

// count counts the elements of that name whose class is class ("" for any).
func count(root *node, name, class string) int {
	c := 0
	walk(root, 0, func(n *node, _ float64) {
		if n.name == name && (class == "" || n.attrs["class"] == class) {
			c++
		}
	})
	return c
}

// checkAccessible checks what every chart must have: a title and a
// description first, a size GitHub can lay out, nothing it would strip or
// fetch, and no text below 12 px.
func checkAccessible(t *testing.T, root *node) {
	t.Helper()
	if root.name != "svg" || root.attrs["viewBox"] == "" || root.attrs["role"] != "img" {
		t.Errorf("root: %s %v, want an svg with a viewBox and role img", root.name, root.attrs)
	}
	if len(root.children) < 2 || root.children[0].name != "title" || root.children[1].name != "desc" {
		t.Fatalf("the first children are not a title and a desc")
	}
	if strings.TrimSpace(root.children[0].text) == "" || len(root.children[1].text) < 100 {
		t.Errorf("title %q, desc %q: want a title and a description of the data", root.children[0].text, root.children[1].text)
	}
	walk(root, 0, func(n *node, size float64) {
		switch n.name {
		case "script", "foreignObject", "image", "style", "a":
			t.Errorf("a <%s> element: GitHub's renderer strips or blocks it", n.name)
		case "text":
			if size < 12 {
				t.Errorf("text %q at %v px: too small to read", n.text, size)
			}
		}
		for k, v := range n.attrs {
			if k == "href" || strings.HasPrefix(k, "on") || (k != "xmlns" && strings.Contains(v, "://")) {
				t.Errorf("<%s %s=%q>: nothing external, no scripts", n.name, k, v)
			}
		}
	})
}

func TestRenderFixture(t *testing.T) {
	out := t.TempDir()
	if err := run("testdata/run", out); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file          string
		lines         int
		markers       int
		legendEntries int
		providers     []string
	}{
		// 2 rounds of CAPCT, CAPD and the floor, and one of CAPCT from a
		// warm pool; the legend: 4 lines, 2 rounds.
		{scaleOutFile, 7, 7, 6, []string{"capct", "capct", "capd", "capd", "floor", "floor", lineWarm}},
		// No floor in a create.
		{createFile, 4, 4, 4, []string{"capct", "capct", "capd", "capd"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			root := parseSVG(t, filepath.Join(out, tt.file))
			checkAccessible(t, root)
			if got := count(root, "polyline", "series"); got != tt.lines {
				t.Errorf("%d lines, want %d", got, tt.lines)
			}
			if got := count(root, "circle", "marker") + count(root, "rect", "marker") + count(root, "path", "marker"); got != tt.markers {
				t.Errorf("%d markers, want %d", got, tt.markers)
			}
			if got := count(root, "g", "legend-entry"); got != tt.legendEntries {
				t.Errorf("%d legend entries, want %d", got, tt.legendEntries)
			}
			var providers []string
			walk(root, 0, func(n *node, _ float64) {
				if n.name == "polyline" {
					providers = append(providers, n.attrs["data-provider"])
					checkInPlot(t, n.attrs["points"])
				}
			})
			if strings.Join(providers, " ") != strings.Join(tt.providers, " ") {
				t.Errorf("lines of %v, want %v", providers, tt.providers)
			}
		})
	}
	t.Run(writesFile, func(t *testing.T) {
		root := parseSVG(t, filepath.Join(out, writesFile))
		checkAccessible(t, root)
		// The fixture's kinds pair into 9 rows (leases, InfraMachines'
		// status and patches, events, ...), a bar each for CAPCT and CAPD.
		if got := count(root, "rect", "bar"); got != 18 {
			t.Errorf("%d bars, want 18", got)
		}
		if got := count(root, "g", "legend-entry"); got != 2 {
			t.Errorf("%d legend entries, want 2", got)
		}
		if desc := root.children[1].text; !strings.Contains(desc, "InfraMachines/status patch: CAPCT ") {
			t.Errorf("the description names no InfraMachines/status patch: %q", desc)
		}
	})
}

// checkInPlot fails when a line leaves the plot area.
func checkInPlot(t *testing.T, pts string) {
	t.Helper()
	for _, p := range strings.Fields(pts) {
		xs, ys, _ := strings.Cut(p, ",")
		x, errx := strconv.ParseFloat(xs, 64)
		y, erry := strconv.ParseFloat(ys, 64)
		if errx != nil || erry != nil || x < plotLeft || x > plotRight || y < plotTop || y > plotBottom {
			t.Errorf("point %q is outside the plot", p)
			return
		}
	}
}

// A run from before the series and the writes by kind still has its
// results: run draws nothing and does not fail.
func TestRunWithoutSeriesOrKinds(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "results.json"),
		[]byte(`{"rounds":1,"n":3,"phases":[{"provider":"capct","round":1,"phase":"create","start":1796455635}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("drew %d files without data, want none", len(entries))
	}
}

func TestRunWithoutResults(t *testing.T) {
	if err := run(t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "failed to read the bench's results") {
		t.Errorf("run without results.json: %v, want an error", err)
	}
}
