package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseSeriesName(t *testing.T) {
	tests := []struct {
		base     string
		provider string
		round    int
		phase    string
		ok       bool
	}{
		{"capct-b1-create-series.tsv", "capct", 1, phaseCreate, true},
		{"capd-b12-scale-out-series.tsv", "capd", 12, phaseScaleOut, true},
		{"floor-b3-scale-out-series.tsv", "floor", 3, phaseScaleOut, true},
		{"capct-b2-scale-out-warm-series.tsv", "capct", 2, phaseScaleOutWarm, true},
		{"capct-b1-scale-in-series.tsv", "", 0, "", false}, // no series
		{"capct-b0-create-series.tsv", "", 0, "", false},
		{"capct-1-create-series.tsv", "", 0, "", false},
		{"capct-b1-create-series.tsv~", "", 0, "", false},
		{"capct-b1-create.json", "", 0, "", false},
		{"results.json", "", 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			provider, round, phase, ok := parseSeriesName(tt.base)
			if provider != tt.provider || round != tt.round || phase != tt.phase || ok != tt.ok {
				t.Errorf("parseSeriesName(%q) = %q, %d, %q, %v; want %q, %d, %q, %v",
					tt.base, provider, round, phase, ok, tt.provider, tt.round, tt.phase, tt.ok)
			}
		})
	}
}

func TestParseSeries(t *testing.T) {
	const header = "elapsed_s\tmachines_running\tnodes_registered\tnodes_ready\n"
	tests := []struct {
		name    string
		in      string
		want    []sample
		wantErr string
	}{
		{
			name: "await_up's rows, a count not read once its target is reached",
			in:   header + "0.41\t3\t3\t3\n1.62\t5\t4\t3\n2.90\t13\t12\t11\n4.10\t-\t13\t13\n",
			want: []sample{{0.41, 3, 3, 3}, {1.62, 5, 4, 3}, {2.9, 13, 12, 11}, {4.1, notRead, 13, 13}},
		},
		{
			name: "the floor's rows have no Machines",
			in:   header + "0.9\t-\t3\t3\n",
			want: []sample{{0.9, notRead, 3, 3}},
		},
		{
			name: "columns in another order, comments and blank lines",
			in:   "# a note\nnodes_ready\telapsed_s\n\n2\t1.5\n",
			want: []sample{{1.5, notRead, notRead, 2}},
		},
		{
			name: "columns the charts do not read",
			in:   "elapsed_s\tpods\tnodes_ready\n1\t40\t3\n",
			want: []sample{{1, notRead, notRead, 3}},
		},
		{name: "a header only", in: header, want: nil},
		{name: "empty", in: "", want: nil},
		{name: "no elapsed_s column", in: "seconds\tnodes_ready\n1\t2\n", wantErr: "no elapsed_s column"},
		{name: "a short row", in: header + "1.0\t3\t3\n", wantErr: "line 2: 3 fields, the header has 4"},
		{name: "a count that is not one", in: header + "1.0\t3\t3\tthree\n", wantErr: `nodes_ready "three" is not a count`},
		{name: "a negative count", in: header + "1.0\t3\t-3\t3\n", wantErr: `nodes_registered "-3" is not a count`},
		{name: "seconds that are not", in: header + "soon\t3\t3\t3\n", wantErr: `elapsed_s "soon"`},
		{name: "negative seconds", in: header + "-1\t3\t3\t3\n", wantErr: `elapsed_s "-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSeries(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseSeries: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseSeries: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseSeries = %v, want %v", got, tt.want)
			}
		})
	}
}

// The fixture holds the series of a 2-round run and a stale one of a
// third round (an earlier run's) that results.json has no phase for.
func TestLoadSeriesKeepsOnlyTheRunsPhases(t *testing.T) {
	res, err := loadResults("testdata/run/results.json")
	if err != nil {
		t.Fatal(err)
	}
	all, err := loadSeries("testdata/run", res)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range all {
		got = append(got, fmt.Sprintf("%s %s %d", s.provider, s.phase, s.round))
		if len(s.samples) == 0 {
			t.Errorf("%s %s round %d: no samples", s.provider, s.phase, s.round)
		}
	}
	want := []string{
		"capct create 1", "capct create 2", "capct scale-out 1", "capct scale-out 2",
		"capd create 1", "capd create 2", "capd scale-out 1", "capd scale-out 2",
		"floor scale-out 1", "floor scale-out 2",
		// CAPCT's scale-out from a warm pool is a line of the scale-out's
		// chart.
		"capct-warm scale-out 1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("series = %q, want %q", got, want)
	}
}

func TestRunDate(t *testing.T) {
	tests := []struct {
		name string
		res  results
		want string
	}{
		{"the first phase's day", results{Date: "2026-12-09T10:00:00Z", Phases: []phaseRecord{{Start: 1796536800}, {Start: 1796455635}}}, "2026-12-05"},
		{"no phases: the results' date", results{Date: "2026-12-09T10:00:00Z"}, "2026-12-09"},
		{"neither", results{}, "date unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.res.runDate(); got != tt.want {
				t.Errorf("runDate() = %q, want %q", got, tt.want)
			}
		})
	}
}
