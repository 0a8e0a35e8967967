package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The bar chart's frame.
const (
	barChartWidth = 960.0
	barHeight     = 15.0 // one provider's bar
	barGap        = 3.0  // between the bars of one kind
	groupGap      = 16.0 // between kinds
	barsTop       = 160.0
	maxKinds      = 12 // more kinds are summed into one "other" row
)

// barProviders are the providers that have writes, in the charts' order.
var barProviders = []string{"capct", "capd"}

// barRow is one kind's bars: a value per provider, nil where the provider
// had no scale-out.
type barRow struct {
	label  string
	values map[string]*float64
}

func (r barRow) largest() float64 {
	m := 0.0
	for _, v := range r.values {
		if v != nil {
			m = max(m, *v)
		}
	}
	return m
}

// infraResources are the providers' own resources, named as Cluster API's
// contract names their role, so that CAPCT's ContainerMachine writes and
// CAPD's DockerMachine writes share a row.
var infraResources = map[string]string{
	"containermachines":         "InfraMachines",
	"dockermachines":            "InfraMachines",
	"containermachinepools":     "InfraMachinePools",
	"dockermachinepools":        "InfraMachinePools",
	"containerclusters":         "InfraClusters",
	"dockerclusters":            "InfraClusters",
	"containermachinetemplates": "InfraMachineTemplates",
	"dockermachinetemplates":    "InfraMachineTemplates",
	"containerclustertemplates": "InfraClusterTemplates",
	"dockerclustertemplates":    "InfraClusterTemplates",
}

// kindLabel names a kind of write as the audit log does, resource (with
// its subresource) and verb, with a provider's own resource by its role.
func kindLabel(k kindWrites) string {
	resource, sub, _ := strings.Cut(k.Resource, "/")
	if role, ok := infraResources[resource]; ok {
		resource = role
	}
	if resource == "" {
		resource = "(no resource)"
	}
	if sub != "" {
		resource += "/" + sub
	}
	return resource + " " + k.Verb
}

// addTo adds v to a row's value, nil (no scale-out) staying nil only if
// both are.
func addTo(values map[string]*float64, provider string, v *float64) {
	if v == nil {
		return
	}
	sum := *v
	if o := values[provider]; o != nil {
		sum += *o
	}
	values[provider] = &sum
}

// barRows are the kinds by their labels (kindLabel: a row holds CAPCT's
// ContainerMachine and CAPD's DockerMachine patches), largest first (ties
// by label), the limit largest in rows of their own and the rest summed
// into one row, "other kinds".
func barRows(kinds []kindWrites, limit int) []barRow {
	var rows []barRow
	byLabel := map[string]int{}
	for _, k := range kinds {
		label := kindLabel(k)
		i, ok := byLabel[label]
		if !ok {
			i = len(rows)
			byLabel[label] = i
			rows = append(rows, barRow{label: label, values: map[string]*float64{}})
		}
		addTo(rows[i].values, "capct", k.CAPCT)
		addTo(rows[i].values, "capd", k.CAPD)
	}
	slices.SortStableFunc(rows, func(a, b barRow) int {
		if c := cmp.Compare(b.largest(), a.largest()); c != 0 {
			return c
		}
		return strings.Compare(a.label, b.label)
	})
	if limit < 1 || len(rows) <= limit {
		return rows
	}
	other := barRow{label: fmt.Sprintf("other kinds (%d)", len(rows)-limit), values: map[string]*float64{}}
	for _, r := range rows[limit:] {
		for p, v := range r.values {
			addTo(other.values, p, v)
		}
	}
	return append(rows[:limit:limit], other)
}

// writesChart draws the writes per provisioned machine in the scale-outs
// by kind: a group of horizontal bars per kind, one bar per provider.
// False when the results have no writes by kind.
func writesChart(res *results) ([]byte, bool) {
	rows := barRows(res.WritesByKind, maxKinds)
	var providers []string
	for _, p := range barProviders {
		if slices.ContainsFunc(rows, func(r barRow) bool { return r.values[p] != nil }) {
			providers = append(providers, p)
		}
	}
	if len(rows) == 0 || len(providers) == 0 {
		return nil, false
	}
	largest := 0.0
	labelW := 0.0
	for _, r := range rows {
		largest = max(largest, r.largest())
		labelW = max(labelW, textWidth(r.label, textSize))
	}
	barLeft := 24 + min(max(labelW, 140), 380) + 14
	barRight := barChartWidth - 72
	xt := ticks(0, largest, 6, false)
	x := linear{0, xt[len(xt)-1], barLeft, barRight}
	groupH := float64(len(providers))*(barHeight+barGap) - barGap + groupGap
	bottom := barsTop + float64(len(rows))*groupH - groupGap
	height := bottom + 88

	title := "Writes per provisioned machine in a scale-out, by kind"
	doc := newSVG(barChartWidth, height, title+" ("+res.runDate()+")", writesDesc(res, rows, providers))
	doc.text(24, 38, titleSize, title, at("font-weight", "bold"))
	doc.text(24, 66, textSize, fmt.Sprintf("make bench-capd on %s: MachinePool 0 → %d, median of %d rounds; in all: %s",
		res.runDate(), res.N, res.Rounds, totals(res, providers)), at("fill", mutedColor))
	doc.text(24, 88, textSize, fmt.Sprintf("Each manager's writes in the API server's audit log, from the scale to %s s after all Nodes Ready, divided by %d",
		formatNumber(res.SettleS, 1), res.N), at("fill", mutedColor))
	barLegend(doc, providers, barLeft)
	barGrid(doc, x, xt, bottom)
	doc.start("g", at("class", "bars"))
	for i, r := range rows {
		gy := barsTop + float64(i)*groupH
		mid := gy + (groupH-groupGap)/2
		doc.text(barLeft-12, mid+5, textSize, r.label, at("text-anchor", "end"))
		for j, p := range providers {
			drawBar(doc, r, p, x, gy+float64(j)*(barHeight+barGap))
		}
	}
	doc.end("g")
	doc.text((barLeft+barRight)/2, bottom+48, textSize, "writes per provisioned machine", at("text-anchor", "middle"))
	doc.text(24, bottom+76, smallSize, "Infra: the provider's own kinds, ContainerMachines and the like for CAPCT, DockerMachines and the like for CAPD",
		at("fill", mutedColor))
	return doc.bytes(), true
}

// drawBar draws one provider's bar of a kind, its value at its end.
func drawBar(doc *svg, r barRow, provider string, x linear, top float64) {
	v := r.values[provider]
	if v == nil {
		return
	}
	st := styleOf(provider)
	w := max(x.at(*v)-x.r0, 0)
	doc.start("rect", at("class", "bar"), at("data-provider", provider), at("x", x.r0), at("y", top),
		at("width", w), at("height", barHeight), at("fill", st.color))
	doc.textElem("title", fmt.Sprintf("%s: %s, %s per machine", st.label, r.label, formatNumber(*v, 2)))
	doc.end("rect")
	doc.text(x.r0+w+6, top+barHeight-3, smallSize, fmt.Sprintf("%.1f", *v), at("fill", mutedColor))
}

// barGrid draws the value axis: its grid lines and ticks, above the bars.
func barGrid(doc *svg, x linear, xt []float64, bottom float64) {
	d := decimals(xt[1] - xt[0])
	doc.start("g", at("class", "grid"), at("stroke", gridColor), at("stroke-width", 1))
	for _, v := range xt {
		doc.elem("line", at("x1", x.at(v)), at("y1", barsTop-8), at("x2", x.at(v)), at("y2", bottom+8))
	}
	doc.end("g")
	doc.start("g", at("class", "ticks"), at("font-size", tickSize), at("text-anchor", "middle"))
	for _, v := range xt {
		doc.textElem("text", formatNumber(v, d), at("x", x.at(v)), at("y", barsTop-14))
		doc.textElem("text", formatNumber(v, d), at("x", x.at(v)), at("y", bottom+26))
	}
	doc.end("g")
}

// barLegend draws a swatch and name per provider, in a row.
func barLegend(doc *svg, providers []string, left float64) {
	doc.start("g", at("class", "legend"))
	xx := left
	for _, p := range providers {
		st := styleOf(p)
		doc.start("g", at("class", "legend-entry"))
		doc.elem("rect", at("x", xx), at("y", 108), at("width", 16), at("height", 16), at("fill", st.color))
		doc.text(xx+24, 121, textSize, st.label)
		doc.end("g")
		xx += 24 + textWidth(st.label, textSize) + 28
	}
	doc.end("g")
}

// totals are the providers' median writes per machine, all kinds.
func totals(res *results, providers []string) string {
	var parts []string
	for _, p := range providers {
		if m := res.Medians[p].ScaleOutWritesPerMachine; m != nil {
			parts = append(parts, styleOf(p).label+" "+formatNumber(*m, 1))
		}
	}
	if len(parts) == 0 {
		return "not measured"
	}
	return strings.Join(parts, ", ")
}

// writesDesc describes the chart in words, for screen readers.
func writesDesc(res *results, rows []barRow, providers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Bar chart of the writes per provisioned machine of each provider's manager in the scale-out of a MachinePool "+
		"from 0 to %d, by kind (resource and verb), the median of %d rounds of make bench-capd on %s. In all: %s.",
		res.N, res.Rounds, res.runDate(), totals(res, providers))
	for _, r := range rows {
		var vals []string
		for _, p := range providers {
			if v := r.values[p]; v != nil {
				vals = append(vals, styleOf(p).label+" "+formatNumber(*v, 2))
			}
		}
		fmt.Fprintf(&b, " %s: %s.", r.label, strings.Join(vals, ", "))
	}
	b.WriteString(" Infra names the provider's own kinds: ContainerMachines and the like for CAPCT, DockerMachines and the like for CAPD.")
	return b.String()
}
