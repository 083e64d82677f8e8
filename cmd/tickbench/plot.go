package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
	"time"
)

// writePlot writes a self-contained HTML page: per case, p99 and max lateness per 100 ms of
// scheduled time for each design, on a log scale.
func writePlot(path string, rep ticksReport) error {
	var b strings.Builder
	b.WriteString("<!doctype html><meta charset=utf-8><title>tickbench ticks</title>" +
		"<style>body{font:14px sans-serif;margin:2em}svg{background:#fafafa;border:1px solid #ddd}</style>")
	fmt.Fprintf(&b, "<h1>tickbench ticks: lateness over time</h1><p>%s</p>", html.EscapeString(rep.Machine.String()))
	colors := map[string]string{"engine": "#1f77b4", "ticker": "#d62728"}
	const w, h, left, bottom = 900.0, 320.0, 60.0, 30.0
	byCase := map[tickCase][]tickResult{}
	var order []tickCase
	for _, r := range rep.Results {
		if len(r.Series) == 0 {
			continue
		}
		if _, ok := byCase[r.Case]; !ok {
			order = append(order, r.Case)
		}
		byCase[r.Case] = append(byCase[r.Case], r)
	}
	for _, c := range order {
		rows := byCase[c]
		lo, hi := math.Log10(0.01), math.Log10(1) // ms
		tmax := 0.0
		for _, r := range rows {
			for _, p := range r.Series {
				if v := float64(p.Max) / 1e6; v > 0 {
					hi = math.Max(hi, math.Ceil(math.Log10(v)))
				}
				tmax = math.Max(tmax, p.At+0.1)
			}
		}
		x := func(t float64) float64 { return left + (w-left-10)*t/tmax }
		y := func(v time.Duration) float64 {
			l := math.Log10(math.Max(float64(v)/1e6, 0.01))
			return (h - bottom) - (h-bottom-10)*(l-lo)/(hi-lo)
		}
		fmt.Fprintf(&b, "<h2>%s</h2><svg width=%v height=%v>", html.EscapeString(c.String()), w, h)
		for e := lo; e <= hi; e++ {
			v := time.Duration(math.Pow(10, e) * 1e6)
			fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#ddd /><text x=4 y=%.1f font-size=11>%g ms</text>",
				left, w-10, y(v), y(v), y(v)+4, math.Pow(10, e))
		}
		fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#f90 stroke-dasharray=4 /><text x=%v y=%.1f font-size=11 fill=#f90>2 ms target</text>",
			left, w-10, y(2*time.Millisecond), y(2*time.Millisecond), w-90, y(2*time.Millisecond)-4)
		fmt.Fprintf(&b, "<text x=%v y=%v font-size=11>scheduled time (s) 0 … %.1f</text>", left, h-8, tmax)
		legend := 0
		for _, r := range rows {
			col := colors[r.Design]
			for _, q := range []struct {
				name string
				dash string
				v    func(point) time.Duration
			}{{"p99", "", func(p point) time.Duration { return p.P99 }}, {"max", "3,3", func(p point) time.Duration { return p.Max }}} {
				var pts []string
				for _, p := range r.Series {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.At), y(q.v(p))))
				}
				fmt.Fprintf(&b, "<polyline fill=none stroke=%s stroke-width=1.5 stroke-dasharray=%q points=%q />", col, q.dash, strings.Join(pts, " "))
				fmt.Fprintf(&b, "<text x=%v y=%d font-size=12 fill=%s>%s %s</text>", left+10, 16+14*legend, col, r.Design, q.name)
				legend++
			}
		}
		b.WriteString("</svg>")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
