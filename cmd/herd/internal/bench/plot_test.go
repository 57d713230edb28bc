package bench

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A curve's plot is well-formed SVG with one panel per measure its points
// hold, every point's size on the axis and its value beside it; a measure
// no point took has no panel.
func TestPlotHasAPanelPerMeasureTaken(t *testing.T) {
	c := Curve{Name: "queue_depth", X: "tasks pending", Points: []CurvePoint{
		{X: 1000, TasksPerSec: 800, RSSMiB: 120}, {X: 100_000, TasksPerSec: 640, RSSMiB: 310}, {X: 1_000_000, TasksPerSec: 410, RSSMiB: 1900},
	}}
	dir := t.TempDir()
	if err := writePlots(dir, []Curve{c}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "queue_depth.svg"))
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(b)))
	var polylines int
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 {
		t.Fatalf("%d panels, want 2 (tasks/s and RSS)", polylines)
	}
	svg := string(b)
	for _, want := range []string{"tasks/s", "RSS (MiB)", ">1k<", ">100k<", ">1M<", ">800<", ">1.9k<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	if strings.Contains(svg, "heap (MiB)") {
		t.Error("a panel for a measure no point took")
	}
	if got := curvePointText(c.Points[0]); got != "800 tasks/s, RSS 120 MiB" {
		t.Errorf("table text %q", got)
	}
}
