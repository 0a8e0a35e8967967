package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The phases that have series: the bench polls Nodes Ready in these.
const (
	phaseCreate   = "create"
	phaseScaleOut = "scale-out"
	// phaseScaleOutWarm is CAPCT's scale-out from a warm pool, drawn in
	// the scale-out's chart as a line of its own (lineWarm).
	phaseScaleOutWarm = "scale-out-warm"
)

// lineWarm is the line of CAPCT's scale-out from a warm pool in the
// scale-out's chart.
const lineWarm = "capct-warm"

// results is the part of the bench's results.json that the charts read.
type results struct {
	Date    string             `json:"date"`
	Rounds  int                `json:"rounds"`
	N       int                `json:"n"`
	SettleS float64            `json:"settle_s"`
	Medians map[string]medians `json:"medians"`
	Phases  []phaseRecord      `json:"phases"`
	// WritesByKind is missing in the results of runs before it was added.
	WritesByKind []kindWrites `json:"scale_out_writes_per_machine_by_kind"`
}

// medians holds one provider's medians over the rounds; null (nil) where
// the provider has no such phase (the floor has no create).
type medians struct {
	CreateReadyS             *float64 `json:"create_ready_s"`
	ScaleOutReadyS           *float64 `json:"scale_out_ready_s"`
	WarmScaleOutReadyS       *float64 `json:"warm_scale_out_ready_s"`
	ScaleOutWritesPerMachine *float64 `json:"scale_out_writes_per_machine"`
}

// phaseRecord is one phase of one round, as the bench recorded it.
type phaseRecord struct {
	Provider string  `json:"provider"`
	Round    int     `json:"round"`
	Phase    string  `json:"phase"`
	Start    float64 `json:"start"`
	// Ready is the seconds from Start to all Nodes Ready (create, scale-out).
	Ready *float64 `json:"ready"`
}

// kindWrites is one kind of write ("patch" of "containermachines/status")
// per provisioned machine in the scale-outs, the median over the rounds of
// each provider; nil for a provider without a scale-out.
type kindWrites struct {
	Resource string   `json:"resource"`
	Verb     string   `json:"verb"`
	CAPCT    *float64 `json:"capct"`
	CAPD     *float64 `json:"capd"`
}

func loadResults(path string) (*results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read the bench's results: %w", err)
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", path, err)
	}
	// The warm pool's line has its median as a scale-out's.
	if m := r.Medians["capct"].WarmScaleOutReadyS; m != nil {
		r.Medians[lineWarm] = medians{ScaleOutReadyS: m}
	}
	return &r, nil
}

// runDate is the day the run's first phase started (UTC), which a
// recomputation of the results (whose "date" is its own) keeps.
func (r *results) runDate() string {
	first := math.Inf(1)
	for _, p := range r.Phases {
		if p.Start > 0 && p.Start < first {
			first = p.Start
		}
	}
	if !math.IsInf(first, 1) {
		return time.Unix(int64(first), 0).UTC().Format(time.DateOnly)
	}
	if len(r.Date) >= len(time.DateOnly) {
		return r.Date[:len(time.DateOnly)]
	}
	return "date unknown"
}

// hasPhase reports whether the run recorded that phase: a series file of an
// interrupted phase, or of an earlier run, has none and is not drawn.
func (r *results) hasPhase(provider string, round int, phase string) bool {
	return slices.ContainsFunc(r.Phases, func(p phaseRecord) bool {
		return p.Provider == provider && p.Round == round && p.Phase == phase
	})
}

// notRead marks a count that a poll did not read ("-" in a series file).
const notRead = -1

// sample is one poll of a phase: seconds since the phase's start and the
// counts the poll read.
type sample struct {
	elapsed                    float64
	running, registered, ready int
}

// series is the polls of one phase of one provider in one round. provider
// and phase are the line's and the chart's: CAPCT's scale-out from a warm
// pool is the line lineWarm of the scale-out's chart, whose record is
// phaseScaleOutWarm's (recordPhase).
type series struct {
	provider string
	round    int
	phase    string
	samples  []sample
}

// record is the provider and phase of the series' record in the results.
func (s series) record() (provider, phase string) {
	if s.provider == lineWarm {
		return "capct", phaseScaleOutWarm
	}
	return s.provider, s.phase
}

var seriesName = regexp.MustCompile(`^([a-z][a-z0-9]*)-b([0-9]+)-(` + phaseCreate + `|` + phaseScaleOut + `|` + phaseScaleOutWarm + `)-series\.tsv$`)

// parseSeriesName splits a series file's name,
// <provider>-b<round>-<phase>-series.tsv, as the bench script writes it.
func parseSeriesName(base string) (provider string, round int, phase string, ok bool) {
	m := seriesName.FindStringSubmatch(base)
	if m == nil {
		return "", 0, "", false
	}
	round, err := strconv.Atoi(m[2])
	if err != nil || round < 1 {
		return "", 0, "", false
	}
	return m[1], round, m[3], true
}

// seriesColumns are the columns of a series file that the charts read; the
// header line names them, in any order, among others.
var seriesColumns = []string{"elapsed_s", "machines_running", "nodes_registered", "nodes_ready"}

// parseSeries reads a series file: a header line naming the tab-separated
// columns, then one row per poll. A count of "-" was not read.
func parseSeries(r io.Reader) ([]sample, error) {
	sc := bufio.NewScanner(r)
	var index map[string]int
	width := 0 // the header's number of columns
	var out []sample
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Split(text, "\t")
		if index == nil {
			index = map[string]int{}
			width = len(fields)
			for i, f := range fields {
				index[strings.TrimSpace(f)] = i
			}
			if _, ok := index["elapsed_s"]; !ok {
				return nil, fmt.Errorf("line %d: the header names no elapsed_s column: %q", line, text)
			}
			continue
		}
		if len(fields) != width {
			return nil, fmt.Errorf("line %d: %d fields, the header has %d", line, len(fields), width)
		}
		s, err := parseRow(fields, index)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("failed to read the series: %w", err)
	}
	return out, nil
}

func parseRow(fields []string, index map[string]int) (sample, error) {
	var s sample
	elapsed, err := strconv.ParseFloat(strings.TrimSpace(fields[index["elapsed_s"]]), 64)
	if err != nil || elapsed < 0 || math.IsInf(elapsed, 0) || math.IsNaN(elapsed) {
		return sample{}, fmt.Errorf("elapsed_s %q is not a number of seconds", fields[index["elapsed_s"]])
	}
	s.elapsed = elapsed
	counts := []*int{&s.running, &s.registered, &s.ready}
	for i, name := range seriesColumns[1:] {
		*counts[i] = notRead
		col, ok := index[name]
		if !ok {
			continue
		}
		v := strings.TrimSpace(fields[col])
		if v == "-" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return sample{}, fmt.Errorf("%s %q is not a count", name, v)
		}
		*counts[i] = n
	}
	return s, nil
}

// providerRank orders the providers as the charts show them: CAPCT, CAPD,
// the floor, then any other by name.
func providerRank(p string) int {
	switch p {
	case "capct":
		return 0
	case "capd":
		return 1
	case "floor":
		return 2
	}
	return 3
}

// loadSeries reads every series file in dir that belongs to a phase of the
// run in res, ordered by provider, phase and round.
func loadSeries(dir string, res *results) ([]series, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*-series.tsv"))
	if err != nil {
		return nil, fmt.Errorf("failed to list the series in %s: %w", dir, err)
	}
	var all []series
	for _, path := range paths {
		provider, round, phase, ok := parseSeriesName(filepath.Base(path))
		if !ok || !res.hasPhase(provider, round, phase) {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("failed to open a series: %w", err)
		}
		samples, err := parseSeries(f)
		_ = f.Close() // read only: a failed close loses nothing
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", path, err)
		}
		if provider == "capct" && phase == phaseScaleOutWarm {
			provider, phase = lineWarm, phaseScaleOut
		}
		all = append(all, series{provider: provider, round: round, phase: phase, samples: samples})
	}
	slices.SortFunc(all, func(a, b series) int {
		if c := providerRank(a.provider) - providerRank(b.provider); c != 0 {
			return c
		}
		if c := strings.Compare(a.provider, b.provider); c != 0 {
			return c
		}
		if c := strings.Compare(a.phase, b.phase); c != 0 {
			return c
		}
		return a.round - b.round
	})
	return all, nil
}
