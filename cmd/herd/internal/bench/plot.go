package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// measure is one measure a curve point may hold, as plots and the table
// name it.
type measure struct {
	name string
	get  func(CurvePoint) float64
	// format prints a value with its unit.
	format string
}

var measures = []measure{
	{"tasks/s", func(p CurvePoint) float64 { return p.TasksPerSec }, "%.0f tasks/s"},
	{"submit→start p99 (ms)", func(p CurvePoint) float64 { return p.SubmitToStartP99Ms }, "submit→start p99 %.1f ms"},
	{"CPU (cores)", func(p CurvePoint) float64 { return p.CPUCores }, "%.2f cores"},
	{"leader CPU idle (% of a core)", func(p CurvePoint) float64 { return p.LeaderCPUPct }, "leader %.1f%% idle"},
	{"leader CPU placing (% of a core)", func(p CurvePoint) float64 { return p.LeaderPlacingCPUPct }, "%.1f%% placing"},
	{"RSS (MiB)", func(p CurvePoint) float64 { return p.RSSMiB }, "RSS %.0f MiB"},
	{"heap (MiB)", func(p CurvePoint) float64 { return p.HeapMiB }, "heap %.0f MiB"},
	{"log bytes per task", func(p CurvePoint) float64 { return p.LogBytesPerTask }, "%.0f log bytes per task"},
	{"snapshot (MiB)", func(p CurvePoint) float64 { return p.SnapshotMiB }, "snapshot %.0f MiB"},
	{"snapshot write (s)", func(p CurvePoint) float64 { return p.SnapshotSeconds }, "written in %.2f s"},
	{"restore (s)", func(p CurvePoint) float64 { return p.RestoreSeconds }, "restored in %.2f s"},
	{"false verdicts", func(p CurvePoint) float64 { return float64(p.FalseVerdicts) }, "%.0f false verdicts"},
	{"agents READY", func(p CurvePoint) float64 { return float64(p.Ready) }, "%.0f READY"},
}

// curvePointText is a point's measures as one line of the table.
func curvePointText(p CurvePoint) string {
	var parts []string
	for _, m := range measures {
		if v := m.get(p); v != 0 {
			parts = append(parts, fmt.Sprintf(m.format, v))
		}
	}
	return strings.Join(parts, ", ")
}

// humanCount writes a count as 1k, 10k, 1M, …
func humanCount(x float64) string {
	switch {
	case x >= 1e6 && math.Mod(x, 1e6) == 0:
		return fmt.Sprintf("%.0fM", x/1e6)
	case x >= 1e3 && math.Mod(x, 1e3) == 0:
		return fmt.Sprintf("%.0fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

// writePlots writes one SVG of each curve into dir: a panel per measure
// the curve took, the size on a logarithmic axis, the measure on a
// linear one from zero, each point labelled with its value.
func writePlots(dir string, curves []Curve) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	for _, c := range curves {
		path := filepath.Join(dir, c.Name+".svg")
		if err := os.WriteFile(path, []byte(plotSVG(c)), 0o644); err != nil {
			return fmt.Errorf("plots: %w", err)
		}
	}
	return nil
}

// The layout of a plot: panels of panelW × panelH in two columns.
const (
	panelW, panelH       = 440, 230
	padLeft, padBottom   = 64, 42
	padTop, padRight     = 30, 24
	plotTitleH, plotCols = 34, 2
)

// plotSVG draws one curve.
func plotSVG(c Curve) string {
	var ms []measure
	for _, m := range measures {
		for _, p := range c.Points {
			if m.get(p) != 0 {
				ms = append(ms, m)
				break
			}
		}
	}
	rows := (len(ms) + plotCols - 1) / plotCols
	w, h := plotCols*panelW, plotTitleH+max(rows, 1)*panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="16" font-weight="bold">%s — by %s</text>`+"\n", 12, esc(c.Name), esc(c.X))
	for i, m := range ms {
		x0, y0 := (i%plotCols)*panelW, plotTitleH+(i/plotCols)*panelH
		plotPanel(&b, c, m, x0, y0)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// plotPanel draws measure m of c's points in the panel at (x0, y0).
func plotPanel(b *strings.Builder, c Curve, m measure, x0, y0 int) {
	left, top := float64(x0+padLeft), float64(y0+padTop)
	width, height := float64(panelW-padLeft-padRight), float64(panelH-padTop-padBottom)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, top-10, esc(m.name))
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, p := range c.Points {
		minX, maxX = min(minX, math.Log10(max(p.X, 1))), max(maxX, math.Log10(max(p.X, 1)))
		maxY = max(maxY, m.get(p))
	}
	if maxX == minX {
		maxX = minX + 1
	}
	if maxY == 0 {
		maxY = 1
	}
	maxY = niceCeil(maxY * 1.1)
	px := func(x float64) float64 { return left + (math.Log10(max(x, 1))-minX)/(maxX-minX)*width }
	py := func(y float64) float64 { return top + height - y/maxY*height }
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, top, width, height)
	for i := 0; i <= 4; i++ {
		y := maxY * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", left, py(y), left+width, py(y))
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, axisNumber(y))
	}
	var pts []string
	for _, p := range c.Points {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px(p.X), top+height+18, humanCount(p.X))
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), py(m.get(p))))
	}
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#1f6feb" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
	for i, p := range c.Points {
		v := m.get(p)
		// A value's label sits above its point, inside the panel: the
		// first and last points' to their right and left.
		anchor, dx := "middle", 0.0
		switch i {
		case 0:
			anchor, dx = "start", 6
		case len(c.Points) - 1:
			anchor, dx = "end", -6
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#1f6feb"/>`+"\n", px(p.X), py(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="#333">%s</text>`+"\n", px(p.X)+dx, py(v)-8, anchor, axisNumber(v))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">%s (log scale)</text>`+"\n", left+width/2, top+height+36, esc(c.X))
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*p >= v {
			return f * p
		}
	}
	return 10 * p
}

// axisNumber prints a value briefly: 3 significant digits at most.
func axisNumber(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case math.Abs(v) >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
