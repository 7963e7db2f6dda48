package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartResults is the file idem-bench chart reads (docs/bench/results.json):
// the headline rows of BENCHMARKS.md, each copied from the table it names as
// printed there, grouped in families, one chart per family.
type chartResults struct {
	Source   string        `json:"source"`  // the file the rows are copied from
	Machine  string        `json:"machine"` // where they were measured
	Families []chartFamily `json:"families"`
}

// chartFamily is one chart: rows measured against their limits.
type chartFamily struct {
	Name  string `json:"name"` // the chart's file is Name + ".svg"
	Title string `json:"title"`
	Axis  string `json:"axis"` // the x axis's label
	// Unit is "%" (a row's values are percentages of its limit, 100 the
	// limit) or "×" (multiples of it, 1 the limit).
	Unit string `json:"unit"`
	// LowerIsBetter is set where the values are costs (bytes, time), so that
	// a bar under the limit is the better one.
	LowerIsBetter bool `json:"lower_is_better,omitempty"`
	// LimitLabel names, in the legend, what the rows' LimitValue marks.
	LimitLabel string     `json:"limit_label,omitempty"`
	Rows       []chartRow `json:"rows"`
}

// chartRow is one measurement beside its limit. The strings are as
// BENCHMARKS.md prints them; the numbers are those printed figures again,
// for the chart.
type chartRow struct {
	Component string `json:"component"`
	Case      string `json:"case"`
	Idem      string `json:"idem"`           // idem's figure
	Bare      string `json:"bare,omitempty"` // the limit's figure, where the table prints it
	BareName  string `json:"bare_name"`      // what the limit is
	Ratio     string `json:"ratio"`
	// Values are the printed ratio in the family's unit: one, or one per
	// run where the table prints each run's. The bar is drawn at the lowest.
	Values []float64 `json:"values"`
	// Limit and LimitValue are a second limit measured in the same run,
	// against the same reference as Values (e.g. the bare Redis dedupe
	// beside the bare consumer).
	Limit       string   `json:"limit,omitempty"`
	LimitValue  *float64 `json:"limit_value,omitempty"`
	Target      string   `json:"target,omitempty"`
	TargetValue *float64 `json:"target_value,omitempty"`
	// Verdict is the section's own word on the target: "met", "not met",
	// or a sentence where a target has two parts.
	Verdict string `json:"verdict,omitempty"`
	Peer    string `json:"peer,omitempty"`
	Section string `json:"section"` // the heading of the section the row comes from
	Anchor  string `json:"anchor"`  // its anchor in the source file
	Date    string `json:"date"`
	Command string `json:"command"`
	Note    string `json:"note,omitempty"`
}

// label is the row's label on the chart.
func (r chartRow) label() string { return r.Component + ": " + r.Case }

// verdict classifies the row's target for the bar's colour.
func (r chartRow) verdict() string {
	switch {
	case r.Target == "":
		return "none"
	case r.Verdict == "met":
		return "met"
	default:
		return "missed" // not met, or met in part only
	}
}

// chartName is what a family's Name may be: it names a file.
var chartName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// readChartResults reads and checks the results file at path.
func readChartResults(path string) (*chartResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("idem-bench: chart: %w", err)
	}
	r, err := parseChartResults(b)
	if err != nil {
		return nil, fmt.Errorf("idem-bench: chart: %s: %w", path, err)
	}
	return r, nil
}

// parseChartResults decodes a results file and checks every field the
// charts need, so that a bad file is an error naming the field rather than
// a broken chart.
func parseChartResults(b []byte) (*chartResults, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r chartResults
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("not valid JSON: it ends inside a value")
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("not valid JSON, line %d: %w", line, err)
		}
		return nil, fmt.Errorf("not a results file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a results file: more than one JSON value")
	}
	if len(r.Families) == 0 {
		return nil, errors.New("no families: nothing to chart")
	}
	names := map[string]bool{}
	for i, f := range r.Families {
		where := fmt.Sprintf("families[%d]", i)
		switch {
		case !chartName.MatchString(f.Name):
			return nil, fmt.Errorf("%s: name %q: want lower-case letters, digits and dashes (it names the chart's file)", where, f.Name)
		case names[f.Name]:
			return nil, fmt.Errorf("%s: name %q: a second family of that name", where, f.Name)
		case f.Title == "":
			return nil, fmt.Errorf("%s (%s): no title", where, f.Name)
		case f.Unit != "%" && f.Unit != "×":
			return nil, fmt.Errorf("%s (%s): unit %q: want %q or %q", where, f.Name, f.Unit, "%", "×")
		case len(f.Rows) == 0:
			return nil, fmt.Errorf("%s (%s): no rows", where, f.Name)
		}
		names[f.Name] = true
		for j, row := range f.Rows {
			where := fmt.Sprintf("%s (%s), rows[%d]", where, f.Name, j)
			if err := checkChartRow(row); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	return &r, nil
}

func checkChartRow(row chartRow) error {
	switch {
	case row.Component == "" || row.Case == "":
		return errors.New("a row needs a component and a case")
	case row.Idem == "" || row.Ratio == "" || row.BareName == "":
		return fmt.Errorf("%s: a row needs idem, ratio and bare_name", row.label())
	case row.Section == "" || row.Anchor == "" || row.Date == "" || row.Command == "":
		return fmt.Errorf("%s: a row needs the section, anchor, date and command it comes from", row.label())
	case len(row.Values) == 0:
		return fmt.Errorf("%s: no values to chart", row.label())
	case (row.LimitValue == nil) != (row.Limit == ""):
		return fmt.Errorf("%s: limit and limit_value go together", row.label())
	case row.TargetValue != nil && row.Target == "":
		return fmt.Errorf("%s: target_value without its target", row.label())
	}
	for _, v := range append(slices.Clone(row.Values), deref(row.LimitValue), deref(row.TargetValue)) {
		// JSON has no NaN or infinity; a figure this large is a typo.
		if v < 0 || v > 1e6 {
			return fmt.Errorf("%s: value %v: want a figure from 0 to 1e6", row.label(), v)
		}
	}
	return nil
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func runChart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "docs/bench/results.json", "the results file to chart")
	out := fs.String("out", "docs/bench", "the directory the charts are written to, one <family>.svg each")
	table := fs.Bool("table", false, "also print the summary table in Markdown, as BENCHMARKS.md shows it, to stdout")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem-bench chart [-in FILE] [-out DIR] [-table]

Renders one SVG bar chart per family of the results file (docs/bench/results.json:
the headline rows of BENCHMARKS.md, each copied from its table): idem's figure
as a share of its bare limit, the limit as the 100% line, the target where the
section sets one. A bar is green where its target is met, red where it is not,
grey where there is none. make charts runs it from the repository's root.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, err := readChartResults(*in)
	if err != nil {
		return err
	}
	files, err := writeCharts(r, *out)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stderr, "idem-bench: chart: wrote", f)
	}
	if *table {
		fmt.Fprint(stdout, summaryTable(r))
	}
	return nil
}

// writeCharts writes each family's chart into dir and returns the files'
// paths.
func writeCharts(r *chartResults, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("idem-bench: chart: %w", err)
	}
	var files []string
	for _, f := range r.Families {
		var buf bytes.Buffer
		if err := renderChart(&buf, f); err != nil {
			return files, fmt.Errorf("idem-bench: chart: %s: %w", f.Name, err)
		}
		path := filepath.Join(dir, f.Name+".svg")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return files, fmt.Errorf("idem-bench: chart: %w", err)
		}
		files = append(files, path)
	}
	return files, nil
}

// The bars' colours: a target met, a target missed, no target.
var (
	colourMet    = color.RGBA{R: 0x2e, G: 0x7d, B: 0x32, A: 0xff}
	colourMissed = color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff}
	colourNone   = color.RGBA{R: 0x60, G: 0x7d, B: 0x8b, A: 0xff}
	colourTarget = color.RGBA{R: 0xe6, G: 0x51, B: 0x00, A: 0xff}
)

func barColour(verdict string) color.Color {
	switch verdict {
	case "met":
		return colourMet
	case "missed":
		return colourMissed
	}
	return colourNone
}

// renderChart writes f's chart as SVG to w: a horizontal bar per row, the
// first row at the top, the limit as a dashed line, and a legend under the
// plot.
func renderChart(w io.Writer, f chartFamily) error { return drawChart(w, f, "svg") }

// drawChart writes f's chart to w in format, as draw.NewFormattedCanvas
// names them.
func drawChart(w io.Writer, f chartFamily, format string) error {
	n := len(f.Rows)
	ref := 100.0
	if f.Unit == "×" {
		ref = 1
	}
	p := newChartPlot(f, ref)
	marks, err := addChartMarks(p, f, ref)
	if err != nil {
		return err
	}
	legend, entries := chartLegend(f, ref, marks)

	// Taller with more rows; the legend gets a strip of its own under the
	// plot, so that it never hides a bar.
	width := 10 * vg.Inch
	rowsHeight := vg.Length(n)*vg.Points(22) + vg.Points(90)
	legendHeight := vg.Length(entries)*vg.Points(14) + vg.Points(8)
	c, err := draw.NewFormattedCanvas(width, rowsHeight+legendHeight, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, vg.Points(6), -vg.Points(6), legendHeight, 0))
	legendArea := draw.Crop(dc, vg.Points(8), 0, 0, -rowsHeight)
	legend.Draw(legendArea)
	_, err = c.WriteTo(w)
	return err
}

// newChartPlot returns the plot of f's bars, a row each, the first at the
// top, on an axis that reaches past the largest value; ref is the limit's
// value.
func newChartPlot(f chartFamily, ref float64) *plot.Plot {
	n := len(f.Rows)
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.Axis
	labels := make([]string, n)
	xmax := ref
	for i, row := range f.Rows {
		labels[n-1-i] = row.label()
		xmax = max(xmax, slices.Max(row.Values), deref(row.LimitValue), deref(row.TargetValue))
	}
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	p.X.Min, p.X.Max = 0, xmax*1.18 // room for the bars' labels
	p.X.Tick.Marker = unitTicks{unit: f.Unit, ref: ref}
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	grid.Vertical.Color = color.Gray{Y: 0xe0}
	p.Add(grid)
	p.Add(&rowBars{rows: f.Rows})
	return p
}

// chartMarks are what a chart draws over its bars, for its legend: the
// limit's line, each run's figure (nil when every row has one run) and
// the other limits (nil when no row has one).
type chartMarks struct {
	limitLine           *plotter.Line
	runDots, limitMarks *plotter.Scatter
}

// addChartMarks adds to p the limit as a dashed line at ref, the runs'
// figures and the other limits as marks, and each row's figure in text.
func addChartMarks(p *plot.Plot, f chartFamily, ref float64) (chartMarks, error) {
	var m chartMarks
	n := len(f.Rows)
	var err error
	m.limitLine, err = plotter.NewLine(plotter.XYs{{X: ref, Y: -0.6}, {X: ref, Y: float64(n) - 0.4}})
	if err != nil {
		return m, err
	}
	m.limitLine.LineStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	p.Add(m.limitLine)

	// Each run's figure, where a row prints more than one; the other limit.
	var runs, limits plotter.XYs
	var texts []string
	var textXY plotter.XYs
	for i, row := range f.Rows {
		y := float64(n - 1 - i)
		if len(row.Values) > 1 {
			for _, v := range row.Values {
				runs = append(runs, plotter.XY{X: v, Y: y})
			}
		}
		if row.LimitValue != nil {
			limits = append(limits, plotter.XY{X: *row.LimitValue, Y: y})
		}
		textXY = append(textXY, plotter.XY{X: labelX(row, p.X.Max), Y: y})
		texts = append(texts, valuesText(row.Values, f.Unit))
	}
	if len(runs) > 0 {
		if m.runDots, err = plotter.NewScatter(runs); err != nil {
			return m, err
		}
		m.runDots.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(1.8), Shape: draw.CircleGlyph{}}
		p.Add(m.runDots)
	}
	if len(limits) > 0 {
		if m.limitMarks, err = plotter.NewScatter(limits); err != nil {
			return m, err
		}
		m.limitMarks.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: draw.PyramidGlyph{}}
		p.Add(m.limitMarks)
	}
	figures, err := plotter.NewLabels(plotter.XYLabels{XYs: textXY, Labels: texts})
	if err != nil {
		return m, err
	}
	for i := range figures.TextStyle {
		figures.TextStyle[i].YAlign = draw.YCenter
		figures.TextStyle[i].Font.Size = vg.Points(9)
	}
	figures.Offset = vg.Point{X: vg.Points(7)}
	p.Add(figures)
	return m, nil
}

// chartLegend returns the legend of f's chart and how many entries it has.
func chartLegend(f chartFamily, ref float64, m chartMarks) (plot.Legend, int) {
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	legend.Padding = vg.Points(3)
	better := "higher is better"
	if f.LowerIsBetter {
		better = "lower is better"
	}
	entries := 0
	add := func(name string, thumb plot.Thumbnailer) {
		legend.Add(name, thumb)
		entries++
	}
	add("idem, target met ("+better+")", swatch{colourMet})
	add("idem, target not met", swatch{colourMissed})
	add("idem, no target set", swatch{colourNone})
	add("the limit ("+valuesText([]float64{ref}, f.Unit)+")", m.limitLine)
	if slices.ContainsFunc(f.Rows, func(r chartRow) bool { return r.TargetValue != nil }) {
		add("the target", targetMark{})
	}
	if m.runDots != nil {
		add("each run's figure (the bar: the lowest)", m.runDots)
	}
	if m.limitMarks != nil {
		add(cmp.Or(f.LimitLabel, "another limit of the same run"), m.limitMarks)
	}
	return legend, entries
}

// labelX is where a row's figure is written: right of its bar, or of the
// marks just past the bar's end, so that no mark hides it.
func labelX(row chartRow, xmax float64) float64 {
	x := slices.Max(row.Values)
	var marks []float64
	if row.LimitValue != nil {
		marks = append(marks, *row.LimitValue)
	}
	if row.TargetValue != nil {
		marks = append(marks, *row.TargetValue)
	}
	slices.Sort(marks)
	for _, m := range marks {
		if m > x-0.02*xmax && m < x+0.09*xmax {
			x = max(x, m)
		}
	}
	return x
}

// valuesText writes the values as the chart labels them: "97% / 96%".
func valuesText(values []float64, unit string) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = strconv.FormatFloat(v, 'f', -1, 64) + unit
	}
	return strings.Join(parts, " / ")
}

// rowBars draws each row's bar at its lowest value, coloured by its
// target's verdict, and the target as a tick across the bar.
type rowBars struct{ rows []chartRow }

// Plot implements plot.Plotter.
func (b *rowBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	n := len(b.rows)
	for i, row := range b.rows {
		y := float64(n - 1 - i)
		x0, x1 := trX(0), trX(slices.Min(row.Values))
		y0, y1 := trY(y-0.3), trY(y+0.3)
		c.FillPolygon(barColour(row.verdict()), c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		if row.TargetValue != nil {
			tx := trX(*row.TargetValue)
			c.StrokeLine2(targetStyle, tx, trY(y-0.42), tx, trY(y+0.42))
		}
	}
}

var targetStyle = draw.LineStyle{Color: colourTarget, Width: vg.Points(2.5)}

// swatch is a legend entry's filled box.
type swatch struct{ c color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// targetMark is the target's legend entry: the tick the bars carry.
type targetMark struct{}

// Thumbnail implements plot.Thumbnailer.
func (targetMark) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(targetStyle, x, c.Min.Y, x, c.Max.Y)
}

// unitTicks are the x axis's ticks, at round steps of the family's unit
// and labelled in it: 0%, 20%, 40% … or 0×, 0.5×, 1× ….
type unitTicks struct {
	unit string
	ref  float64 // the limit: 100 or 1
}

// Ticks implements plot.Ticker.
func (t unitTicks) Ticks(lo, hi float64) []plot.Tick {
	step := t.ref
	for _, s := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10} {
		if (hi-lo)/(s*t.ref) <= 8 {
			step = s * t.ref
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := i * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) + t.unit})
	}
	return ticks
}

// summaryTable is the Markdown table of BENCHMARKS.md's summary: one line
// per row, grouped by family, each linking to its section.
func summaryTable(r *chartResults) string {
	var b strings.Builder
	b.WriteString("| component | case | idem | bare limit | ratio | target | peer | from |\n")
	b.WriteString("|---|---|---:|---|---:|---|---|---|\n")
	for _, f := range r.Families {
		for _, row := range f.Rows {
			bare := row.BareName
			if row.Bare != "" {
				bare = row.Bare + ": " + row.BareName
			}
			if row.Limit != "" {
				bare += "; " + row.Limit
			}
			target := ""
			switch {
			case row.Target == "":
			case row.Verdict == "met":
				target = row.Target + ": met"
			default:
				target = row.Target + ": **" + row.Verdict + "**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | [%s](#%s) |\n",
				cell(row.Component), cell(row.Case), cell(row.Idem), cell(bare), cell(row.Ratio),
				cell(target), cell(row.Peer), cell(row.Date), row.Anchor)
		}
	}
	return b.String()
}

// cell escapes s for a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
