package main

import (
	"math"
	"strconv"
)

// linear maps the domain [d0, d1] onto the range [r0, r1] (pixels; r1 may
// be below r0, as a y axis is).
type linear struct{ d0, d1, r0, r1 float64 }

func (s linear) at(v float64) float64 {
	if s.d1 == s.d0 {
		return s.r0
	}
	return s.r0 + (v-s.d0)*(s.r1-s.r0)/(s.d1-s.d0)
}

// niceStep is the step of an axis's ticks: 1, 2 or 5 times a power of ten,
// the smallest of those at least span/count, so that about count steps
// cover span and each tick is a round number. An integer axis (counts of
// Nodes) never steps by less than 1.
func niceStep(span float64, count int, integer bool) float64 {
	if count < 1 {
		count = 1
	}
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(count)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		// The tolerance keeps an exact 2 from becoming 5 through rounding.
		if m*mag >= raw*(1-1e-9) {
			step = m * mag
			break
		}
	}
	if integer && step < 1 {
		step = 1
	}
	return step
}

// ticks are an axis's tick values for the data range [lo, hi], about count
// steps of niceStep, from the last tick at or below lo to the first at or
// above hi: the axis's domain is the first and last tick.
func ticks(lo, hi float64, count int, integer bool) []float64 {
	if hi < lo {
		lo, hi = hi, lo
	}
	step := niceStep(hi-lo, count, integer)
	first := math.Floor(lo/step + 1e-9)
	last := math.Ceil(hi/step - 1e-9)
	if last <= first {
		last = first + 1
	}
	out := make([]float64, 0, int(last-first)+1)
	for i := first; i <= last; i++ {
		// A multiple of the step, rounded to its decimals: adding steps up
		// would print 0.30000000000000004.
		out = append(out, roundTo(i*step, decimals(step)))
	}
	return out
}

// decimals is how many decimals a tick of that step needs: 0 for 1, 20,
// 500; 1 for 0.5; 2 for 0.02.
func decimals(step float64) int {
	if step <= 0 || step >= 1 {
		return 0
	}
	return int(math.Ceil(-math.Log10(step) - 1e-9))
}

func roundTo(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

// formatNumber prints v with at most the given decimals, without trailing
// zeros, and never "-0".
func formatNumber(v float64, decimals int) string {
	v = roundTo(v, decimals)
	if v == 0 {
		v = 0 // -0 prints as "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
