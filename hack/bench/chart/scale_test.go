package main

import (
	"slices"
	"testing"
)

func TestNiceStep(t *testing.T) {
	tests := []struct {
		name    string
		span    float64
		count   int
		integer bool
		want    float64
	}{
		{"a scale-out's seconds", 186.5, 10, false, 20},
		{"a create's seconds", 117, 10, false, 20},
		{"13 Nodes", 13.5, 7, true, 2},
		{"3 Nodes", 3.5, 7, true, 1},
		{"a count never steps below 1", 1, 10, true, 1},
		{"a fraction may", 0.35, 7, false, 0.05},
		{"exactly 2 stays 2", 10, 5, false, 2},
		{"exactly 5 stays 5", 50, 10, false, 5},
		{"just above 5 goes to 10", 51, 10, false, 10},
		{"no span", 0, 5, false, 1},
		{"no count", 7, 0, false, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := niceStep(tt.span, tt.count, tt.integer); got != tt.want {
				t.Errorf("niceStep(%v, %d, %v) = %v, want %v", tt.span, tt.count, tt.integer, got, tt.want)
			}
		})
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		name    string
		lo, hi  float64
		count   int
		integer bool
		want    []float64
	}{
		{"seconds", 0, 186.5, 10, false, []float64{0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200}},
		{"ends on a tick", 0, 120, 6, false, []float64{0, 20, 40, 60, 80, 100, 120}},
		{"13 Nodes and headroom", 0, 13.5, 7, true, []float64{0, 2, 4, 6, 8, 10, 12, 14}},
		{"3 Nodes and headroom", 0, 3.5, 7, true, []float64{0, 1, 2, 3, 4}},
		{"no range", 0, 0, 5, true, []float64{0, 1}},
		{"a range not from 0", 12, 38, 6, false, []float64{10, 15, 20, 25, 30, 35, 40}},
		{"reversed", 10, 0, 5, false, []float64{0, 2, 4, 6, 8, 10}},
		{"decimals stay round", 0, 0.3, 3, false, []float64{0, 0.1, 0.2, 0.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ticks(tt.lo, tt.hi, tt.count, tt.integer); !slices.Equal(got, tt.want) {
				t.Errorf("ticks(%v, %v, %d, %v) = %v, want %v", tt.lo, tt.hi, tt.count, tt.integer, got, tt.want)
			}
		})
	}
}

func TestLinear(t *testing.T) {
	tests := []struct {
		name  string
		scale linear
		v     float64
		want  float64
	}{
		{"start", linear{0, 200, 76, 700}, 0, 76},
		{"end", linear{0, 200, 76, 700}, 200, 700},
		{"middle", linear{0, 200, 76, 700}, 100, 388},
		{"a y axis runs up", linear{0, 14, 490, 100}, 7, 295},
		{"a y axis's top", linear{0, 14, 490, 100}, 14, 100},
		{"outside the domain", linear{0, 10, 0, 100}, 15, 150},
		{"an empty domain maps to the start", linear{5, 5, 10, 20}, 5, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.scale.at(tt.v); got != tt.want {
				t.Errorf("%+v.at(%v) = %v, want %v", tt.scale, tt.v, got, tt.want)
			}
		})
	}
}

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		v        float64
		decimals int
		want     string
	}{
		{0, 0, "0"},
		{-0.01, 1, "0"}, // not "-0"
		{0.1 + 0.2, 1, "0.3"},
		{128.25, 1, "128.3"},
		{77, 1, "77"},
		{0.05, 2, "0.05"},
		{434.2857, 1, "434.3"},
	}
	for _, tt := range tests {
		if got := formatNumber(tt.v, tt.decimals); got != tt.want {
			t.Errorf("formatNumber(%v, %d) = %q, want %q", tt.v, tt.decimals, got, tt.want)
		}
	}
}

func TestDecimals(t *testing.T) {
	tests := []struct {
		step float64
		want int
	}{{20, 0}, {1, 0}, {0.5, 1}, {0.1, 1}, {0.05, 2}, {0.02, 2}, {0, 0}}
	for _, tt := range tests {
		if got := decimals(tt.step); got != tt.want {
			t.Errorf("decimals(%v) = %d, want %d", tt.step, got, tt.want)
		}
	}
}
