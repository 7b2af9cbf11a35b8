package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/idemguard/idemguard/dashboards"
)

// The page: Grafana's 24-column grid, a row of height 1 per row title, stat
// panels of height 4, the others 8 (as in the generated JSON).
const (
	pageWidth = 1200 * vg.Length(0.75) // 1200 px at 96 dpi, in points
	unit      = vg.Length(17)          // one grid row
	gap       = vg.Length(4)
	dpi       = 96
)

var (
	pageBG   = color.RGBA{0xf4, 0xf5, 0xf5, 0xff}
	panelBG  = color.White
	border   = color.RGBA{0xd8, 0xd9, 0xda, 0xff}
	textDark = color.RGBA{0x24, 0x29, 0x2e, 0xff}
	textSoft = color.RGBA{0x6e, 0x76, 0x80, 0xff}
)

// Grafana's classic palette, and fixed colours for outcomes.
var (
	series = []color.Color{
		rgb(0x73bf69), rgb(0xfade2a), rgb(0x5794f2), rgb(0xff9830), rgb(0xf2495c),
		rgb(0xb877d9), rgb(0x37872d), rgb(0x1f60c4), rgb(0xc4162a), rgb(0x8ab8ff),
	}
	named = map[string]color.Color{
		"executed": rgb(0x73bf69), "replayed": rgb(0x5794f2), "in_progress": rgb(0xfade2a),
		"payload_mismatch": rgb(0xff9830), "error": rgb(0xf2495c), "unguarded": rgb(0xa0a0a0),
		"not_run": rgb(0xb877d9), "p50": rgb(0x73bf69), "p95": rgb(0xfade2a), "p99": rgb(0xf2495c),
		"lease lost": rgb(0xf2495c),
	}
)

func rgb(v uint32) color.Color {
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xff}
}

func height(p dashboards.Panel) int {
	if p.Kind == dashboards.Stat {
		return 4
	}
	return 8
}

// render lays the rows out as the Grafana JSON does and writes the PNG.
func render(out string, rows []drawnRow, from, end time.Time) error {
	total := 1 // the page title
	for _, r := range rows {
		total++
		x, h := 0, 0
		for _, p := range r.panels {
			if x+p.Width > 24 {
				total += h
				x, h = 0, 0
			}
			x += p.Width
			h = max(h, height(p.Panel))
		}
		total += h
	}
	pageHeight := vg.Length(total)*unit + gap
	img := vgimg.NewWith(vgimg.UseWH(pageWidth, pageHeight), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(pageBG)
	dc.Fill(dc.Rectangle.Path())

	col := (pageWidth - gap) / 24
	top := pageHeight - gap
	text(dc, vg.Point{X: gap * 2, Y: top - unit*0.7}, 13, textDark,
		fmt.Sprintf("idemguard — the dashboard's panels over %d minutes of the library's workload (scraped every %s; drawn by dashboards/cmd/render)",
			int(end.Sub(from).Minutes()), scrapeInterval))
	top -= unit
	for _, r := range rows {
		text(dc, vg.Point{X: gap * 2, Y: top - unit*0.7}, 11, textDark, r.title)
		top -= unit
		x, h := 0, 0
		for _, p := range r.panels {
			if x+p.Width > 24 {
				top -= vg.Length(h) * unit
				x, h = 0, 0
			}
			rect := vg.Rectangle{
				Min: vg.Point{X: gap + vg.Length(x)*col, Y: top - vg.Length(height(p.Panel))*unit + gap},
				Max: vg.Point{X: gap + vg.Length(x+p.Width)*col - gap, Y: top},
			}
			if err := drawPanel(draw.Canvas{Canvas: dc.Canvas, Rectangle: rect}, p, from, end); err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			x += p.Width
			h = max(h, height(p.Panel))
		}
		top -= vg.Length(h) * unit
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func text(c draw.Canvas, pt vg.Point, size vg.Length, clr color.Color, s string) {
	sty := draw.TextStyle{Color: clr, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler}
	c.FillText(sty, pt, s)
}

func drawPanel(c draw.Canvas, p drawnPanel, from, end time.Time) error {
	c.SetColor(panelBG)
	c.Fill(c.Rectangle.Path())
	c.SetLineStyle(draw.LineStyle{Color: border, Width: 0.75})
	c.Stroke(c.Rectangle.Path())
	text(c, vg.Point{X: c.Min.X + 6, Y: c.Max.Y - 13}, 9.5, textDark, p.Title)
	inner := draw.Crop(c, 4, -6, 4, -18)
	switch p.Kind {
	case dashboards.Stat:
		return drawStat(inner, p)
	case dashboards.Heatmap:
		return drawHeatmap(inner, p, from, end)
	}
	return drawSeries(inner, p, from, end)
}

// drawStat shows the last value of the panel's first series.
func drawStat(c draw.Canvas, p drawnPanel) error {
	v := math.NaN()
	if len(p.results) > 0 && len(p.results[0].matrix) > 0 {
		pts := p.results[0].matrix[0].Floats
		if len(pts) > 0 {
			v = pts[len(pts)-1].F
		}
	}
	s := "no data"
	switch {
	case math.IsNaN(v):
	case p.Whole:
		s = strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	default:
		s = format(p.Unit, v)
	}
	sty := draw.TextStyle{Color: statColor(p), Font: font.From(plot.DefaultFont, 22), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YCenter}
	c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: (c.Min.Y + c.Max.Y) / 2}, s)
	return nil
}

func statColor(p drawnPanel) color.Color {
	switch p.Title {
	case "Lease losses", "Store errors":
		return rgb(0xe02f44)
	case "Payload mismatches", "In-progress conflicts", "Stuck claims taken over":
		return rgb(0xff780a)
	}
	return rgb(0x37872d)
}

// line is one drawn series.
type line struct {
	name string
	xys  plotter.XYs
}

func drawSeries(c draw.Canvas, p drawnPanel, from, end time.Time) error {
	var lines []line
	for _, r := range p.results {
		for _, s := range r.matrix {
			l := line{name: legendOf(r.query.Legend, s)}
			for _, pt := range s.Floats {
				if !math.IsNaN(pt.F) && !math.IsInf(pt.F, 0) {
					l.xys = append(l.xys, plotter.XY{X: float64(pt.T) / 1000, Y: pt.F})
				}
			}
			if len(l.xys) > 0 {
				lines = append(lines, l)
			}
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].name < lines[j].name })

	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	pl.X.Min, pl.X.Max = float64(from.Unix()), float64(end.Unix())
	pl.Y.Min = 0
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04"}
	pl.Y.Tick.Marker = unitTicks{p.Unit}
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label.Font.Size = 7.5
		a.Tick.Label.Color = textSoft
		a.Color = border
		a.Tick.Color = border
	}
	pl.Add(plotter.NewGrid())
	if p.Stack {
		stack(lines)
	}
	ymax := 0.0
	for i := len(lines) - 1; i >= 0; i-- { // in a stack, the largest first
		l := lines[i]
		pl2, err := plotter.NewLine(l.xys)
		if err != nil {
			return err
		}
		pl2.Color = colorOf(l.name, i)
		pl2.Width = 1.2
		if p.Stack {
			pl2.FillColor = fade(pl2.Color, 0xa0)
		}
		pl.Add(pl2)
		for _, xy := range l.xys {
			ymax = max(ymax, xy.Y)
		}
	}
	if ymax == 0 {
		pl.Y.Max = 1
	} else {
		pl.Y.Max = ymax * 1.1
	}
	if p.Unit == "percentunit" {
		pl.Y.Max = max(pl.Y.Max, 1)
		pl.Y.Max = min(pl.Y.Max, 1.05)
	}
	legendHeight := drawLegend(c, lines)
	pl.Draw(draw.Crop(c, 0, 0, legendHeight, 0))
	return nil
}

// stack makes each line the running sum of the lines before it and itself.
func stack(lines []line) {
	for i := 1; i < len(lines); i++ {
		prev := map[float64]float64{}
		for _, xy := range lines[i-1].xys {
			prev[xy.X] = xy.Y
		}
		for j := range lines[i].xys {
			lines[i].xys[j].Y += prev[lines[i].xys[j].X]
		}
	}
}

// drawLegend draws the legend along the bottom of c and returns its height.
func drawLegend(c draw.Canvas, lines []line) vg.Length {
	const size, rowH = 7.5, 11
	f := font.From(plot.DefaultFont, size)
	sty := draw.TextStyle{Color: textDark, Font: f, Handler: plot.DefaultTextHandler, YAlign: draw.YCenter}
	x, y := c.Min.X+4, c.Min.Y+rowH/2
	rowsUsed := 1
	// Lay out first to know the height, then draw from the top row down.
	type item struct {
		pt   vg.Point
		name string
		clr  color.Color
	}
	var items []item
	for i, l := range lines {
		w := sty.Width(l.name) + 18
		if x+w > c.Max.X && x > c.Min.X+4 {
			x = c.Min.X + 4
			rowsUsed++
		}
		items = append(items, item{vg.Point{X: x, Y: vg.Length(rowsUsed)}, l.name, colorOf(l.name, i)})
		x += w
	}
	if len(items) == 0 {
		return 0
	}
	for _, it := range items {
		py := y + vg.Length(rowsUsed-int(it.pt.Y))*rowH
		c.SetColor(it.clr)
		c.Fill(vg.Rectangle{Min: vg.Point{X: it.pt.X, Y: py - 2.5}, Max: vg.Point{X: it.pt.X + 9, Y: py + 1.5}}.Path())
		c.FillText(sty, vg.Point{X: it.pt.X + 12, Y: py}, it.name)
	}
	return vg.Length(rowsUsed)*rowH + 2
}

func colorOf(name string, i int) color.Color {
	for k, v := range named {
		if name == k || strings.HasPrefix(name, k+" ") {
			return v
		}
	}
	return series[i%len(series)]
}

func fade(c color.Color, a uint8) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), a}
}

var legendLabel = regexp.MustCompile(`\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}`)

// legendOf expands a Grafana legend format ("{{label}} …") with s's labels.
func legendOf(format string, s promql.Series) string {
	if format == "" {
		return s.Metric.String()
	}
	out := legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return s.Metric.Get(strings.TrimSpace(m[2 : len(m)-2]))
	})
	return strings.TrimSpace(out)
}

// drawHeatmap draws the panel's bucket rates (cumulative by le) as cells:
// one column per step, one row per bucket.
func drawHeatmap(c draw.Canvas, p drawnPanel, from, end time.Time) error {
	if len(p.results) == 0 {
		return nil
	}
	type bucket struct {
		le  float64
		pts map[int64]float64
	}
	var buckets []bucket
	steps := map[int64]bool{}
	for _, s := range p.results[0].matrix {
		le, err := strconv.ParseFloat(s.Metric.Get("le"), 64)
		if err != nil || math.IsInf(le, 1) {
			continue // the +Inf bucket has no upper bound to draw
		}
		b := bucket{le: le, pts: map[int64]float64{}}
		for _, pt := range s.Floats {
			b.pts[pt.T] = pt.F
			steps[pt.T] = true
		}
		buckets = append(buckets, b)
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	ts := make([]int64, 0, len(steps))
	for t := range steps {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	// De-accumulate, then keep the rows from the first to the last bucket
	// with calls in them.
	grid := make([][]float64, len(buckets))
	first, last := -1, -1
	for r := range buckets {
		grid[r] = make([]float64, len(ts))
		for ci, t := range ts {
			v := buckets[r].pts[t]
			if r > 0 {
				v -= buckets[r-1].pts[t]
			}
			grid[r][ci] = math.Sqrt(max(v, 0)) // Grafana's exponential scale, exponent 0.5
			if v > 0 {
				if first < 0 {
					first = r
				}
				last = r
			}
		}
	}
	if first < 0 {
		return nil
	}
	g := heatGrid{z: grid[first : last+1], ts: ts}
	var les []float64
	for _, b := range buckets[first : last+1] {
		les = append(les, b.le)
	}
	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	hm := plotter.NewHeatMap(g, oranges(64))
	hm.Min = 0
	hm.Underflow, hm.Overflow = color.White, rgb(0x99000d)
	pl.Add(hm)
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04"}
	pl.Y.Tick.Marker = leTicks(les)
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label.Font.Size = 7.5
		a.Tick.Label.Color = textSoft
		a.Color = border
		a.Tick.Color = border
	}
	pl.Draw(c)
	return nil
}

type heatGrid struct {
	z  [][]float64
	ts []int64
}

func (g heatGrid) Dims() (c, r int)   { return len(g.ts), len(g.z) }
func (g heatGrid) Z(c, r int) float64 { return g.z[r][c] }
func (g heatGrid) X(c int) float64    { return float64(g.ts[c]) / 1000 }
func (g heatGrid) Y(r int) float64    { return float64(r) }

// leTicks labels heatmap rows with their buckets' upper bounds.
type leTicks []float64

func (l leTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	every := (len(l) + 7) / 8 // at most about 8 labels
	for i, le := range l {
		if float64(i) >= min && float64(i) <= max {
			t := plot.Tick{Value: float64(i)}
			if i%every == 0 {
				t.Label = "≤ " + format("s", le)
			}
			out = append(out, t)
		}
	}
	return out
}

// oranges is a white → orange → dark red ramp, like Grafana's "Oranges".
func oranges(n int) palette.Palette {
	stops := []color.RGBA{{0xff, 0xf5, 0xeb, 0xff}, {0xfd, 0x8d, 0x3c, 0xff}, {0x7f, 0x27, 0x04, 0xff}}
	var cs []color.Color
	for i := range n {
		f := float64(i) / float64(n-1) * float64(len(stops)-1)
		k := min(int(f), len(stops)-2)
		t := f - float64(k)
		a, b := stops[k], stops[k+1]
		mix := func(x, y uint8) uint8 { return uint8(float64(x) + (float64(y)-float64(x))*t) }
		cs = append(cs, color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 0xff})
	}
	return ramp(cs)
}

type ramp []color.Color

func (r ramp) Colors() []color.Color { return r }

// unitTicks labels an axis in a Grafana unit.
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = format(u.unit, ticks[i].Value)
		}
	}
	return ticks
}

// format writes v in a Grafana unit.
func format(unit string, v float64) string {
	switch unit {
	case "percentunit":
		return trim(v*100) + "%"
	case "s":
		switch {
		case v == 0:
			return "0"
		case v < 0.001:
			return trim(v*1e6) + " µs"
		case v < 1:
			return trim(v*1e3) + " ms"
		}
		return trim(v) + " s"
	case "reqps":
		return trim(v) + " req/s"
	case "ops":
		return trim(v) + " ops/s"
	}
	return trim(v)
}

func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}
