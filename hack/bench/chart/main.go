// Package main draws the charts of docs/bench.md from a run of
// `make bench-capd` (hack/bench/capd-vs-capct.sh): Nodes Ready over the
// seconds of each scale-out and each create, one line per provider and
// round, and the writes per provisioned machine by kind, CAPCT beside
// CAPD. It reads the run's results.json and its series files (one row per
// poll, <provider>-b<round>-<phase>-series.tsv) and writes SVG files that
// GitHub shows inline: standard library only, no scripts, no external
// fonts, a white background so that they read in a dark theme too, and a
// title and description for screen readers.
//
// The bench script runs it at the end of its results step:
//
//	go run ./hack/bench/chart -in out/bench -out docs/bench
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	in := flag.String("in", "out/bench", "the bench's output: results.json and the *-series.tsv files")
	out := flag.String("out", "docs/bench", "directory for the SVG files")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintf(os.Stderr, "chart: %v\n", err)
		os.Exit(1)
	}
}

// The files run writes, relative to its output directory; docs/bench.md
// embeds them by these names.
const (
	scaleOutFile = "scale-out-ready.svg"
	createFile   = "create-ready.svg"
	writesFile   = "writes-per-machine.svg"
)

// run draws every chart the data in dir allows into outDir. A chart whose
// data is missing (a run from before the series or the writes by kind) is
// skipped with a note on stderr, so that the others are still drawn.
func run(dir, outDir string) error {
	res, err := loadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	all, err := loadSeries(dir, res)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", outDir, err)
	}
	charts := []struct {
		file  string
		draw  func() ([]byte, bool)
		empty string
	}{
		{scaleOutFile, func() ([]byte, bool) { return readyChart(res, all, phaseScaleOut) }, "no scale-out series"},
		{createFile, func() ([]byte, bool) { return readyChart(res, all, phaseCreate) }, "no create series"},
		{writesFile, func() ([]byte, bool) { return writesChart(res) }, "no scale_out_writes_per_machine_by_kind in results.json"},
	}
	for _, c := range charts {
		svg, ok := c.draw()
		path := filepath.Join(outDir, c.file)
		if !ok {
			fmt.Fprintf(os.Stderr, "chart: %s not drawn: %s\n", path, c.empty)
			continue
		}
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			return fmt.Errorf("failed to write %s: %w", path, err)
		}
		fmt.Fprintf(os.Stderr, "chart: wrote %s\n", path)
	}
	return nil
}
