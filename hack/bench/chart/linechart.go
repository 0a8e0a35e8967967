package main

import (
	"fmt"
	"slices"
	"strings"
)

// The line chart's frame: the plot, and the legend to its right.
const (
	lineWidth   = 960.0
	lineHeight  = 560.0
	plotLeft    = 76.0
	plotTop     = 100.0
	plotRight   = 700.0
	plotBottom  = 490.0
	legendLeft  = 728.0
	legendRight = lineWidth - 16
)

// readyPoints are the (seconds, Nodes Ready) of the polls that read Nodes
// Ready; the bench stops reading them once all are.
func readyPoints(samples []sample) [][2]float64 {
	var out [][2]float64
	for _, s := range samples {
		if s.ready != notRead {
			out = append(out, [2]float64{s.elapsed, float64(s.ready)})
		}
	}
	return out
}

// steps turns polls into a step line: a count holds from its poll until
// the poll that read the next one, as far as the bench knows.
func steps(pts [][2]float64) [][2]float64 {
	if len(pts) == 0 {
		return nil
	}
	out := [][2]float64{pts[0]}
	for i := 1; i < len(pts); i++ {
		if pts[i][1] != pts[i-1][1] {
			out = append(out, [2]float64{pts[i][0], pts[i-1][1]})
		}
		out = append(out, pts[i])
	}
	// A run of equal counts needs only its ends.
	return dropCollinear(out)
}

// dropCollinear removes the middle of three points on one horizontal or
// vertical line, which draws the same line with fewer points.
func dropCollinear(pts [][2]float64) [][2]float64 {
	out := make([][2]float64, 0, len(pts))
	for _, p := range pts {
		n := len(out)
		if n >= 2 && ((out[n-2][1] == out[n-1][1] && out[n-1][1] == p[1]) || (out[n-2][0] == out[n-1][0] && out[n-1][0] == p[0])) {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// phaseText is what a phase's chart says about it.
type phaseText struct {
	title, clock, what string
	median             func(medians) *float64
}

func textOf(res *results, phase string) phaseText {
	if phase == phaseCreate {
		return phaseText{
			title:  "Creating a cluster: Nodes Ready over time",
			clock:  "seconds since kubectl apply",
			what:   "the creation of a cluster of 1 control-plane machine and 2 workers",
			median: func(m medians) *float64 { return m.CreateReadyS },
		}
	}
	return phaseText{
		title:  fmt.Sprintf("MachinePool 0 → %d: Nodes Ready over time", res.N),
		clock:  "seconds since the scale (the floor: since its first docker run)",
		what:   fmt.Sprintf("the scale-out of a MachinePool from 0 to %d machines, on a cluster of 3 Nodes", res.N),
		median: func(m medians) *float64 { return m.ScaleOutReadyS },
	}
}

// readyChart draws Nodes Ready over the seconds of each run of the phase:
// one step line per provider and round, a marker at its last poll (all
// Nodes Ready), the providers' medians in the legend. False when no series
// of the phase has a poll of Nodes Ready.
func readyChart(res *results, all []series, phase string) ([]byte, bool) {
	var lines []series
	xmax, ymax := 0.0, 0.0
	for _, s := range all {
		pts := readyPoints(s.samples)
		if s.phase != phase || len(pts) == 0 {
			continue
		}
		lines = append(lines, s)
		for _, p := range pts {
			xmax, ymax = max(xmax, p[0]), max(ymax, p[1])
		}
	}
	if len(lines) == 0 {
		return nil, false
	}
	txt := textOf(res, phase)
	// Half a Node of headroom, so that the markers of all Ready clear the
	// plot's top edge.
	xt, yt := ticks(0, xmax, 10, false), ticks(0, ymax+0.5, 7, true)
	x := linear{xt[0], xt[len(xt)-1], plotLeft, plotRight}
	y := linear{yt[0], yt[len(yt)-1], plotBottom, plotTop}

	doc := newSVG(lineWidth, lineHeight, txt.title+" ("+res.runDate()+")", readyDesc(res, lines, txt))
	doc.text(24, 38, titleSize, txt.title, at("font-weight", "bold"))
	doc.text(24, 66, textSize, fmt.Sprintf("make bench-capd on %s: %d rounds, N = %d; one line per provider and round",
		res.runDate(), res.Rounds, res.N), at("fill", mutedColor))
	axes(doc, x, y, xt, yt, txt.clock, "Nodes Ready")
	doc.start("g", at("class", "lines"), at("fill", "none"), at("stroke-width", 2.5), at("stroke-linejoin", "round"))
	for _, s := range lines {
		drawLine(doc, res, s, x, y)
	}
	doc.end("g")
	readyLegend(doc, res, lines, txt)
	return doc.bytes(), true
}

// axes draws the grid, the axes, their ticks and labels.
func axes(doc *svg, x, y linear, xt, yt []float64, xLabel, yLabel string) {
	xd, yd := decimals(xt[1]-xt[0]), decimals(yt[1]-yt[0])
	doc.start("g", at("class", "grid"), at("stroke", gridColor), at("stroke-width", 1))
	for _, v := range xt[1:] {
		doc.elem("line", at("x1", x.at(v)), at("y1", plotTop), at("x2", x.at(v)), at("y2", plotBottom))
	}
	for _, v := range yt[1:] {
		doc.elem("line", at("x1", plotLeft), at("y1", y.at(v)), at("x2", plotRight), at("y2", y.at(v)))
	}
	doc.end("g")
	doc.start("g", at("class", "axes"), at("stroke", inkColor), at("stroke-width", 1.5))
	doc.elem("line", at("x1", plotLeft), at("y1", plotBottom), at("x2", plotRight), at("y2", plotBottom))
	doc.elem("line", at("x1", plotLeft), at("y1", plotBottom), at("x2", plotLeft), at("y2", plotTop))
	doc.end("g")
	doc.start("g", at("class", "ticks"), at("font-size", tickSize))
	for _, v := range xt {
		doc.textElem("text", formatNumber(v, xd), at("x", x.at(v)), at("y", plotBottom+20), at("text-anchor", "middle"))
	}
	for _, v := range yt {
		doc.textElem("text", formatNumber(v, yd), at("x", plotLeft-10), at("y", y.at(v)+4.5), at("text-anchor", "end"))
	}
	doc.end("g")
	doc.text((plotLeft+plotRight)/2, plotBottom+48, textSize, xLabel, at("text-anchor", "middle"))
	mid := (plotTop + plotBottom) / 2
	doc.text(24, mid, textSize, yLabel, at("text-anchor", "middle"),
		at("transform", fmt.Sprintf("rotate(-90 24 %s)", formatNumber(mid, 1))))
}

// drawLine draws one run's step line and the marker of its last poll.
func drawLine(doc *svg, res *results, s series, x, y linear) {
	st := styleOf(s.provider)
	pts := readyPoints(s.samples)
	px := make([][2]float64, 0, len(pts))
	for _, p := range steps(pts) {
		px = append(px, [2]float64{x.at(p[0]), y.at(p[1])})
	}
	last := pts[len(pts)-1]
	attrs := []attr{at("class", "series"), at("data-provider", s.provider), at("data-round", s.round),
		at("stroke", st.color), at("points", points(px))}
	if st.dash != "" {
		attrs = append(attrs, at("stroke-dasharray", st.dash), at("stroke-linecap", "round"))
	}
	doc.start("polyline", attrs...)
	doc.textElem("title", fmt.Sprintf("%s, round %d: %s Nodes Ready in %s", st.label, s.round,
		formatNumber(last[1], 0), seconds(readyTime(res, s))))
	doc.end("polyline")
	marker(doc, s.round, x.at(last[0]), y.at(last[1]), st.color, at("class", "marker"))
}

// marker draws a round's marker: a circle, square, triangle or diamond for
// rounds 1 to 4, again from the fifth.
func marker(doc *svg, round int, cx, cy float64, fill string, extra ...attr) {
	const r = 6.0
	attrs := append([]attr{at("fill", fill), at("stroke", "#ffffff"), at("stroke-width", 1.5)}, extra...)
	f := func(v float64) string { return formatNumber(v, 1) }
	switch (round - 1) % 4 {
	case 0:
		doc.elem("circle", append(attrs, at("cx", cx), at("cy", cy), at("r", r))...)
	case 1:
		doc.elem("rect", append(attrs, at("x", cx-r+0.5), at("y", cy-r+0.5), at("width", 2*r-1), at("height", 2*r-1))...)
	case 2:
		d := fmt.Sprintf("M%s %sL%s %sL%s %sZ", f(cx), f(cy-r-1), f(cx+r+0.5), f(cy+r-1), f(cx-r-0.5), f(cy+r-1))
		doc.elem("path", append(attrs, at("d", d))...)
	default:
		d := fmt.Sprintf("M%s %sL%s %sL%s %sL%s %sZ", f(cx), f(cy-r-1), f(cx+r+1), f(cy), f(cx), f(cy+r+1), f(cx-r-1), f(cy))
		doc.elem("path", append(attrs, at("d", d))...)
	}
}

// providersOf are the providers of the lines, in the charts' order.
func providersOf(lines []series) []string {
	var out []string
	for _, s := range lines {
		if !slices.Contains(out, s.provider) {
			out = append(out, s.provider)
		}
	}
	return out
}

func roundsOf(lines []series) []int {
	var out []int
	for _, s := range lines {
		if !slices.Contains(out, s.round) {
			out = append(out, s.round)
		}
	}
	slices.Sort(out)
	return out
}

// readyLegend draws the legend: each provider's line and median, each
// round's marker, and what the floor is.
func readyLegend(doc *svg, res *results, lines []series, txt phaseText) {
	doc.start("g", at("class", "legend"))
	yy := plotTop + 4
	doc.text(legendLeft, yy, textSize, "Provider", at("font-weight", "bold"))
	yy += 28
	providers := providersOf(lines)
	for _, p := range providers {
		st := styleOf(p)
		doc.start("g", at("class", "legend-entry"))
		line := []attr{at("x1", legendLeft), at("y1", yy-5), at("x2", legendLeft+legendLineW), at("y2", yy-5),
			at("stroke", st.color), at("stroke-width", 2.5)}
		if st.dash != "" {
			line = append(line, at("stroke-dasharray", st.dash), at("stroke-linecap", "round"))
		}
		doc.elem("line", line...)
		doc.text(legendLeft+legendLineW+10, yy, textSize, st.label)
		if m := txt.median(res.Medians[p]); m != nil {
			doc.text(legendLeft+legendLineW+10, yy+18, smallSize, "median "+seconds(*m), at("fill", mutedColor))
		}
		doc.end("g")
		yy += 44
	}
	yy += 6
	doc.text(legendLeft, yy, textSize, "Round (marker: all Ready)", at("font-weight", "bold"))
	yy += 26
	for _, r := range roundsOf(lines) {
		doc.start("g", at("class", "legend-entry"))
		marker(doc, r, legendLeft+legendLineW/2, yy-5, mutedColor)
		doc.text(legendLeft+legendLineW+10, yy, textSize, fmt.Sprintf("round %d", r))
		doc.end("g")
		yy += 24
	}
	if slices.Contains(providers, "floor") {
		yy += 14
		for _, l := range wrap("The floor: the same nodes joined by a script, with no controllers.", legendRight-legendLeft, smallSize) {
			doc.text(legendLeft, yy, smallSize, l, at("fill", mutedColor))
			yy += 18
		}
	}
	doc.end("g")
}

// readyTime is the seconds to all Nodes Ready of the run of the series: as
// the bench recorded it, else its last poll's.
func readyTime(res *results, s series) float64 {
	provider, phase := s.record()
	for _, p := range res.Phases {
		if p.Provider == provider && p.Round == s.round && p.Phase == phase && p.Ready != nil {
			return *p.Ready
		}
	}
	pts := readyPoints(s.samples)
	return pts[len(pts)-1][0]
}

// readyDesc describes the chart in words, for screen readers: what it
// shows, the medians and each round's time to all Nodes Ready.
func readyDesc(res *results, lines []series, txt phaseText) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Line chart of the Nodes Ready in the workload cluster during %s, polled about once a second, "+
		"over the %s; one line per provider and round, from make bench-capd on %s (%d rounds, N = %d). Seconds to all Ready:",
		txt.what, txt.clock, res.runDate(), res.Rounds, res.N)
	for _, p := range providersOf(lines) {
		st := styleOf(p)
		var rounds []string
		for _, s := range lines {
			if s.provider != p {
				continue
			}
			rounds = append(rounds, fmt.Sprintf("round %d %s", s.round, seconds(readyTime(res, s))))
		}
		fmt.Fprintf(&b, " %s: %s", st.label, strings.Join(rounds, ", "))
		if m := txt.median(res.Medians[p]); m != nil {
			fmt.Fprintf(&b, "; median %s", seconds(*m))
		}
		b.WriteString(".")
	}
	if slices.Contains(providersOf(lines), "floor") {
		b.WriteString(" The floor is the same nodes joined by a script, with no controllers.")
	}
	return b.String()
}

// seconds prints a duration as the bench's tables do: "77.0 s".
func seconds(v float64) string { return fmt.Sprintf("%.1f s", v) }

// wrap breaks a text into lines no wider than width (estimated).
func wrap(text string, width, size float64) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(text) {
		next := w
		if line != "" {
			next = line + " " + w
		}
		if line != "" && textWidth(next, size) > width {
			out = append(out, line)
			next = w
		}
		line = next
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}
