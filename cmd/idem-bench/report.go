package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A run's report (--report DIR) is its JSON, as --json prints it, and a
// chart of the same kind as BENCHMARKS.md's: idem's rows as a share of
// the bare rows of the same run. The files are named after the benchmark
// (and the store), so that the runs of several stores can share a DIR.

// reportUsage is the --report flag's help.
const reportUsage = "write the run's JSON and an SVG chart of idem beside the bare rows of the run into this directory"

// writeStoreReport writes DIR/store-<scheme>.json and .svg for a run of
// idem-bench store, and names them on w (the progress output, so that
// stdout stays the table and --json's JSON).
func writeStoreReport(dir string, r benchStoreReport, w io.Writer) error {
	scheme, _, _ := strings.Cut(r.Store, ":")
	name := "store-" + scheme
	f := chartFamily{
		Name:  name,
		Title: fmt.Sprintf("idem-bench store, %s, %s: the store as a share of its bare side", r.Store, r.Started.Format("2006-01-02 15:04 UTC")),
		Axis:  "% of the bare side's keys/s (median of the rounds' own ratios; 100% = bare)",
		Unit:  "%",
	}
	for _, row := range r.Rows {
		if len(row.Ratios) == 0 {
			continue // one side only: nothing to compare
		}
		f.Rows = append(f.Rows, chartRow{
			Component: row.Title,
			Case:      goroutines(row.Goroutines),
			Values:    []float64{roundTo(median(row.Ratios), 1)},
		})
	}
	return writeReport(dir, name, r, f, w)
}

// writeHTTPReport writes DIR/http.json and http.svg for a run of idem-bench
// http, and names them on w. A bare row is drawn as the mark of the row
// it is the limit of.
func writeHTTPReport(dir string, r benchHTTPReport, w io.Writer) error {
	f := chartFamily{
		Name:       "http",
		Title:      fmt.Sprintf("idem-bench http, %v handler, %d clients: req/s as a share of the baseline", time.Duration(r.SleepMS*float64(time.Millisecond)), r.Clients),
		Axis:       "% of the baseline's req/s, same pass (100% = the handler without idemhttp)",
		Unit:       "%",
		LimitLabel: "the bare row: the same server's two writes per request, without idem",
	}
	bare := map[string]benchRow{}
	for _, row := range r.Rows {
		if name, ok := strings.CutSuffix(row.Store, ", bare"); ok {
			bare[name+"/"+row.Pass] = row
		}
	}
	for _, row := range r.Rows {
		if row.baseline || strings.HasSuffix(row.Store, ", bare") {
			continue
		}
		cr := chartRow{
			Component: row.Store,
			Case:      fmt.Sprintf("%s pass, p99 %+.2fms", row.Pass, row.P99DiffMS),
			Values:    []float64{roundTo(row.RatePct, 1)},
		}
		if b, ok := bare[row.Store+"/"+row.Pass]; ok {
			v := roundTo(b.RatePct, 1)
			cr.Limit, cr.LimitValue = "bare", &v
		}
		f.Rows = append(f.Rows, cr)
	}
	return writeReport(dir, "http", r, f, w)
}

// writeReport writes report as DIR/name.json and f's chart as
// DIR/name.svg (no chart when f has no rows).
func writeReport(dir, name string, report any, f chartFamily, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("idem-bench: --report: %w", err)
	}
	b, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("idem-bench: --report: %w", err)
	}
	path := filepath.Join(dir, name+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("idem-bench: --report: %w", err)
	}
	fmt.Fprintf(w, "idem-bench: report: %s", path)
	if len(f.Rows) > 0 {
		var svg bytes.Buffer
		if err := renderChart(&svg, f); err != nil {
			return fmt.Errorf("idem-bench: --report: chart: %w", err)
		}
		path := filepath.Join(dir, name+".svg")
		if err := os.WriteFile(path, svg.Bytes(), 0o644); err != nil {
			return fmt.Errorf("idem-bench: --report: %w", err)
		}
		fmt.Fprintf(w, ", %s", path)
	}
	fmt.Fprintln(w)
	return nil
}

// roundTo is v rounded to the given number of decimals, for a chart's
// labels.
func roundTo(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

func goroutines(n int) string {
	if n == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", n)
}
