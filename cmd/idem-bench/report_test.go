package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

// readReport decodes DIR/name.json into v.
func readReport(t *testing.T, dir, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatalf("the report's JSON: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("the report's JSON: %v", err)
	}
}

// wantChartRows checks that DIR/name.svg is an SVG chart with a labelled
// bar per row, and that the progress output names both files.
func wantChartRows(t *testing.T, dir, name, stderr string, labels []string) {
	t.Helper()
	texts := svgTexts(t, filepath.Join(dir, name+".svg"))
	for _, l := range labels {
		if !slices.Contains(texts, l) {
			t.Errorf("%s.svg has no row %q; its texts: %q", name, l, texts)
		}
	}
	want := "idem-bench: report: " + filepath.Join(dir, name+".json") + ", " + filepath.Join(dir, name+".svg") + "\n"
	if !strings.Contains(stderr, want) {
		t.Errorf("the output does not name the report's files (%q):\n%s", want, stderr)
	}
}

// runStoreReport runs idem-bench store with args and checks it
// succeeded; it returns its progress output.
func runStoreReport(t *testing.T, args ...string) (stderr string) {
	t.Helper()
	code, stdout, stderr := clitest.Args(t, run, append([]string{"store"}, args...)...)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	return stderr
}

func TestBenchStoreReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report") // made by the command
	stderr := runStoreReport(t, "--store", "mem://", "--ops", "200", "--rounds", "2", "--goroutines", "1,2",
		"--cases", "do,do-duplicate", "--report", dir)
	var report benchStoreReport
	readReport(t, dir, "store-mem", &report)
	wantRounds(t, report, []string{"do", "do-duplicate"}, []int{1, 2}, 2)
	wantChartRows(t, dir, "store-mem", stderr, []string{
		"Guard.Do, new key: 1 goroutine", "Guard.Do, new key: 2 goroutines",
		"Guard.Do, duplicate: 1 goroutine", "Guard.Do, duplicate: 2 goroutines",
	})
}

func TestBenchStoreReportOneSide(t *testing.T) {
	// With one side there is no ratio to draw: the JSON, and no chart.
	dir := t.TempDir()
	stderr := runStoreReport(t, "--store", "mem://", "--ops", "50", "--rounds", "1", "--goroutines", "1",
		"--cases", "do", "--sides", "store", "--report", dir)
	var report benchStoreReport
	readReport(t, dir, "store-mem", &report)
	if len(report.Rows) != 1 || len(report.Rows[0].StoreOps) != 1 {
		t.Errorf("report rows %+v, want the one case measured once", report.Rows)
	}
	if _, err := os.Stat(filepath.Join(dir, "store-mem.svg")); !os.IsNotExist(err) {
		t.Errorf("a chart without a bare side: %v, want none", err)
	}
	if !strings.Contains(stderr, "idem-bench: report: "+filepath.Join(dir, "store-mem.json")+"\n") {
		t.Errorf("the output does not name the report:\n%s", stderr)
	}
}

func TestBenchStoreReportRedis(t *testing.T) {
	c := redisstoretest.Client(t)
	prefix := redisstoretest.Prefix(t, c)
	raw := storeurltest.WithParam(t, storeurltest.Server(t, "redis"), "prefix", prefix)
	dir := t.TempDir()
	stderr := runStoreReport(t, "--store", raw, "--ops", "40", "--rounds", "1", "--goroutines", "2",
		"--cases", "do,do-duplicate", "--report", dir)
	var report benchStoreReport
	readReport(t, dir, "store-redis", &report)
	wantRounds(t, report, []string{"do", "do-duplicate"}, []int{2}, 1)
	wantChartRows(t, dir, "store-redis", stderr, []string{"Guard.Do, new key: 2 goroutines", "Guard.Do, duplicate: 2 goroutines"})
}

func TestBenchHTTPReport(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := clitest.Args(t, run, "http", "--duration", "100ms", "--rounds", "1", "--clients", "2", "--sleep", "1ms",
		"--stores", "mem://", "--report", dir)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var report benchHTTPReport
	readReport(t, dir, "http", &report)
	var got []string
	for _, r := range report.Rows {
		got = append(got, r.Store+"/"+r.Pass)
		if r.Requests == 0 {
			t.Errorf("%s/%s: no requests in the report", r.Store, r.Pass)
		}
	}
	if want := []string{"baseline/fresh", "mem/fresh", "baseline/repeat", "mem/repeat"}; !slices.Equal(got, want) {
		t.Errorf("report rows %q, want %q", got, want)
	}
	// The chart draws idem's rows; the baselines are its 100% line.
	texts := svgTexts(t, filepath.Join(dir, "http.svg"))
	for _, prefix := range []string{"mem: fresh pass, p99 ", "mem: repeat pass, p99 "} {
		if !slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, prefix) }) {
			t.Errorf("http.svg has no row %q…; its texts: %q", prefix, texts)
		}
	}
	if slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, "baseline") }) {
		t.Errorf("http.svg draws the baseline as a row: %q", texts)
	}
}
