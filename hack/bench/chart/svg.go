package main

import (
	"encoding/xml"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The look every chart shares. Sizes are in SVG pixels at the chart's
// natural width (GitHub scales it down to the page): no text below 12.
const (
	fontFamily  = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
	inkColor    = "#222222"
	mutedColor  = "#555555"
	gridColor   = "#e3e3e3"
	titleSize   = 20.0
	textSize    = 14.0
	smallSize   = 13.0
	tickSize    = 13.0
	legendLineW = 30.0
)

// style is how a provider is drawn: its colour and dash pattern, the same
// in every chart. The colours are Okabe and Ito's, told apart with the
// common colour-vision deficiencies, and the dashes tell them apart in
// grey too.
type style struct {
	label string
	color string
	dash  string // stroke-dasharray; "" is solid
}

func styleOf(provider string) style {
	switch provider {
	case "capct":
		return style{label: "CAPCT", color: "#0072B2"}
	case "capd":
		return style{label: "CAPD", color: "#D55E00", dash: "10 5"}
	case "floor":
		return style{label: "floor", color: "#333333", dash: "1 5"}
	case lineWarm:
		return style{label: "CAPCT, warm pool", color: "#56B4E9", dash: "6 3"}
	}
	return style{label: provider, color: "#009E73", dash: "4 3 1 3"}
}

// attr is one attribute of an SVG element.
type attr struct{ name, value string }

// at formats an attribute: numbers with one decimal at most, so that the
// files stay small and stable.
func at(name string, value any) attr {
	switch v := value.(type) {
	case float64:
		return attr{name, formatNumber(v, 1)}
	case int:
		return attr{name, fmt.Sprint(v)}
	case string:
		return attr{name, v}
	}
	return attr{name, fmt.Sprint(value)}
}

// svg writes one SVG document.
type svg struct{ b strings.Builder }

// newSVG starts a document of that size with its title and description,
// which screen readers read and GitHub shows as the image's tooltip, and a
// white background, so that the dark ink reads in a dark theme too.
func newSVG(width, height float64, title, desc string) *svg {
	s := &svg{}
	s.b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.start("svg", at("xmlns", "http://www.w3.org/2000/svg"), at("width", width), at("height", height),
		at("viewBox", fmt.Sprintf("0 0 %s %s", formatNumber(width, 1), formatNumber(height, 1))),
		at("role", "img"), at("aria-labelledby", "title desc"), at("font-family", fontFamily), at("fill", inkColor))
	s.textElem("title", title, at("id", "title"))
	s.textElem("desc", desc, at("id", "desc"))
	s.elem("rect", at("width", width), at("height", height), at("fill", "#ffffff"))
	return s
}

func (s *svg) attrs(attrs []attr) {
	for _, a := range attrs {
		s.b.WriteString(" " + a.name + `="`)
		escape(&s.b, a.value)
		s.b.WriteString(`"`)
	}
}

// start opens an element that end closes.
func (s *svg) start(name string, attrs ...attr) {
	s.b.WriteString("<" + name)
	s.attrs(attrs)
	s.b.WriteString(">\n")
}

func (s *svg) end(name string) { s.b.WriteString("</" + name + ">\n") }

// elem writes an element without content.
func (s *svg) elem(name string, attrs ...attr) {
	s.b.WriteString("<" + name)
	s.attrs(attrs)
	s.b.WriteString("/>\n")
}

// textElem writes an element whose content is text.
func (s *svg) textElem(name, text string, attrs ...attr) {
	s.b.WriteString("<" + name)
	s.attrs(attrs)
	s.b.WriteString(">")
	escape(&s.b, text)
	s.b.WriteString("</" + name + ">\n")
}

// text writes a text at (x, y), its baseline.
func (s *svg) text(x, y float64, size float64, text string, attrs ...attr) {
	s.textElem("text", text, append([]attr{at("x", x), at("y", y), at("font-size", size)}, attrs...)...)
}

func (s *svg) bytes() []byte {
	s.end("svg")
	return []byte(s.b.String())
}

func escape(b *strings.Builder, text string) {
	// xml.EscapeText writes to a strings.Builder, which never fails.
	_ = xml.EscapeText(b, []byte(text))
}

// textWidth estimates how wide a text is in a sans-serif font of that size:
// the charts leave room for labels without measuring fonts they do not
// ship.
func textWidth(text string, size float64) float64 {
	return float64(utf8.RuneCountInString(text)) * size * 0.56
}

// points formats a polyline's points.
func points(xy [][2]float64) string {
	var b strings.Builder
	for i, p := range xy {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(formatNumber(p[0], 1) + "," + formatNumber(p[1], 1))
	}
	return b.String()
}
