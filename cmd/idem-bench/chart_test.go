package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/idemgo/idem/internal/cli/clitest"
)

// chartFixture is a small results file: two families, one with a target
// met, one missed, a row with a figure per run and a second limit.
const chartFixture = `{
  "source": "BENCHMARKS.md",
  "machine": "a test",
  "families": [
    {
      "name": "stores",
      "title": "Stores",
      "axis": "% of the bare limit",
      "unit": "%",
      "limit_label": "another limit",
      "rows": [
        {"component": "memstore", "case": "new key & more", "idem": "403,702 keys/s", "bare": "1,193,538 keys/s",
         "bare_name": "sync.Map", "ratio": "34%", "values": [34], "target": "≥ 30%", "target_value": 30, "verdict": "met",
         "section": "Guard.Do on memstore", "anchor": "guarddo-on-memstore", "date": "2026-11-26 12:44 UTC", "command": "make bench"},
        {"component": "Redis", "case": "duplicate", "idem": "79,403 / 64,300 keys/s", "bare_name": "one GET",
         "ratio": "87% / 88%", "values": [87, 88], "limit": "bare-redis: 90%", "limit_value": 90,
         "target": "≥ 95%", "target_value": 95, "verdict": "not met",
         "section": "redisstore", "anchor": "redisstore", "date": "2026-11-27 02:19 UTC", "command": "make bench"}
      ]
    },
    {
      "name": "batch",
      "title": "Bytes",
      "axis": "× the limit",
      "unit": "×",
      "lower_is_better": true,
      "rows": [
        {"component": "Guard.DoBatch", "case": "64 keys", "idem": "103,495 B", "bare": "53,725 B", "bare_name": "the store's calls",
         "ratio": "1.93", "values": [1.93], "section": "Guard.DoBatch", "anchor": "guarddobatch", "date": "2026-11-27 03:27 UTC", "command": "go test"}
      ]
    }
  ]
}`

// svgTexts parses an SVG file as XML and returns the text of its <text>
// elements; it fails the test if the file is not well-formed SVG.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	var root string
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element <%s>, want <svg>", path, root)
	}
	return texts
}

func TestChartRendersEachFamily(t *testing.T) {
	in := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(in, []byte(chartFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "charts") // made by the command
	code, stdout, stderr := clitest.Args(t, run, "chart", "-in", in, "-out", out, "-table")
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstderr:\n%s", code, stderr)
	}
	for name, labels := range map[string][]string{
		"stores": {"memstore: new key & more", "Redis: duplicate", "34%", "87% / 88%", "the target", "another limit"},
		"batch":  {"Guard.DoBatch: 64 keys", "1.93×", "1×"},
	} {
		texts := svgTexts(t, filepath.Join(out, name+".svg"))
		for _, l := range labels {
			if !slices.Contains(texts, l) {
				t.Errorf("%s.svg has no text %q; its texts: %q", name, l, texts)
			}
		}
	}
	if entries, err := os.ReadDir(out); err != nil || len(entries) != 2 {
		t.Errorf("%s holds %d files (%v), want the two charts", out, len(entries), err)
	}
	// The table links each row to its section and says a missed target
	// is missed.
	for _, want := range []string{
		"| memstore | new key & more | 403,702 keys/s | 1,193,538 keys/s: sync.Map | 34% | ≥ 30%: met |  | [2026-11-26 12:44 UTC](#guarddo-on-memstore) |",
		"| 87% / 88% | ≥ 95%: **not met** |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table has no %q:\n%s", want, stdout)
		}
	}
}

func TestChartRefusesBadResults(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, json, want string
	}{
		{"empty", ``, "not a results file: EOF"},
		{"cut short", `{"families": [`, "not valid JSON: it ends inside a value"},
		{"not JSON", `families: []`, "not valid JSON, line 1"},
		{"syntax error on line 3", "{\n\"families\": [\n}", "not valid JSON, line 3"},
		{"a list", `[1, 2]`, "not a results file"},
		{"unknown field", `{"famlies": []}`, `unknown field "famlies"`},
		{"two values", `{} {}`, "more than one JSON value"},
		{"no family", `{"families": []}`, "no families"},
		{"bad name", strings.Replace(chartFixture, `"name": "batch"`, `"name": "../x"`, 1), `families[1]: name "../x"`},
		{"same name", strings.Replace(chartFixture, `"name": "batch"`, `"name": "stores"`, 1), `a second family of that name`},
		{"bad unit", strings.Replace(chartFixture, `"unit": "×"`, `"unit": "x"`, 1), `families[1] (batch): unit "x"`},
		{"no rows", `{"families": [{"name": "a", "title": "A", "unit": "%", "rows": []}]}`, "families[0] (a): no rows"},
		{"no values", strings.Replace(chartFixture, `"values": [1.93]`, `"values": []`, 1), "rows[0]: Guard.DoBatch: 64 keys: no values to chart"},
		{"negative", strings.Replace(chartFixture, `"values": [34]`, `"values": [-34]`, 1), "value -34"},
		{"a string", strings.Replace(chartFixture, `"values": [34]`, `"values": ["34%"]`, 1), "cannot unmarshal string"},
		{"no anchor", strings.Replace(chartFixture, `"anchor": "redisstore"`, `"anchor": ""`, 1), "Redis: duplicate: a row needs the section, anchor, date and command"},
		{"a limit without its figure", strings.Replace(chartFixture, `, "limit_value": 90`, ``, 1), "limit and limit_value go together"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := os.WriteFile(in, []byte(tt.json), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out-"+filepath.Base(in))
			code, stdout, stderr := clitest.Args(t, run, "chart", "-in", in, "-out", out)
			if code != 1 || stdout != "" || !strings.Contains(stderr, "idem-bench: chart: "+in+": ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit status %d, want 1 with an error naming the file and %q\nstdout:\n%s\nstderr:\n%s", code, tt.want, stdout, stderr)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a bad file left %s behind (%v), want nothing written", out, err)
			}
		})
	}
	code, _, stderr := clitest.Args(t, run, "chart", "-in", filepath.Join(dir, "missing.json"))
	if code != 1 || !strings.Contains(stderr, "missing.json: no such file") {
		t.Errorf("a missing file: exit status %d, stderr %q; want 1 naming the file", code, stderr)
	}
}

// The tests below hold the repository's summary to its sources: every
// row of docs/bench/results.json is copied from the BENCHMARKS.md section
// it names, BENCHMARKS.md's summary table is the one the rows make, and
// the committed charts are the ones the rows draw.

const (
	resultsPath    = "../../docs/bench/results.json"
	benchmarksPath = "../../BENCHMARKS.md"
	regenerate     = "regenerate with: make charts; go run ./cmd/idem-bench chart -table prints the table"
)

// mdSection is a section of a Markdown file: its heading and its text up
// to the next heading, and the text of the section it is a part of, if
// any (what a ### section says in the ## section above it).
type mdSection struct{ heading, text, parent string }

// mdSections returns the sections of a Markdown file by their GitHub
// anchors; a repeated anchor gets -1, -2 … as on GitHub.
func mdSections(t *testing.T, path string) map[string]mdSection {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]mdSection{}
	seen := map[string]int{}
	anchor, fence := "", false
	var top string // the anchor of the last ## heading
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
			anchor = githubAnchor(heading)
			if n := seen[anchor]; n > 0 {
				anchor = fmt.Sprintf("%s-%d", anchor, n)
			}
			seen[githubAnchor(heading)]++
			sections[anchor] = mdSection{heading: heading}
			switch {
			case strings.HasPrefix(line, "### "):
				s := sections[anchor]
				s.parent = top
				sections[anchor] = s
			case strings.HasPrefix(line, "## "):
				top = anchor
			}
			continue
		}
		if anchor != "" {
			s := sections[anchor]
			s.text += line
			sections[anchor] = s
		}
	}
	return sections
}

// githubAnchor is the anchor GitHub gives a heading: lower case, letters,
// digits, dashes and underscores kept, spaces made dashes, the rest
// dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// figure matches a printed figure: 1,193,538 or 0.50 or 97%.
var figure = regexp.MustCompile(`\d+(?:,\d{3})*(?:\.\d+)?%?`)

// clock matches a time of day in a row's date.
var clock = regexp.MustCompile(`\d\d:\d\d`)

func TestResultsAreCopiedFromBenchmarks(t *testing.T) {
	r, err := readChartResults(resultsPath)
	if err != nil {
		t.Fatal(err)
	}
	sections := mdSections(t, benchmarksPath)
	file, err := os.ReadFile(benchmarksPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Families {
		for _, row := range f.Rows {
			s, ok := sections[row.Anchor]
			if !ok {
				t.Errorf("%s: anchor #%s is no heading of %s", row.label(), row.Anchor, benchmarksPath)
				continue
			}
			if s.heading != row.Section {
				t.Errorf("%s: section %q, but #%s is the heading %q", row.label(), row.Section, row.Anchor, s.heading)
			}
			// Every figure the row prints is printed in its section (or in
			// the section it is a part of).
			text := s.heading + "\n" + s.text + sections[s.parent].text
			for field, value := range map[string]string{"idem": row.Idem, "bare": row.Bare, "ratio": row.Ratio, "limit": row.Limit, "peer": row.Peer} {
				for _, fig := range figure.FindAllString(value, -1) {
					if !strings.Contains(text, fig) {
						t.Errorf("%s: %s %q: %s is not printed in the section %q", row.label(), field, value, fig, row.Section)
					}
				}
			}
			// A target may be stated once for several sections.
			for _, fig := range figure.FindAllString(row.Target, -1) {
				if !strings.Contains(string(file), fig) {
					t.Errorf("%s: target %q: %s is not in %s", row.label(), row.Target, fig, benchmarksPath)
				}
			}
			for _, c := range clock.FindAllString(row.Date, -1) {
				if !strings.Contains(text, c) {
					t.Errorf("%s: date %q: %s is not in the section %q", row.label(), row.Date, c, row.Section)
				}
			}
			// The charted numbers are the printed ratio, in the family's unit.
			for _, v := range row.Values {
				if !printedAs(row.Ratio, v, f.Unit) {
					t.Errorf("%s: value %v is not the printed ratio %q", row.label(), v, row.Ratio)
				}
			}
			if row.LimitValue != nil && !printedAs(row.Limit, *row.LimitValue, f.Unit) {
				t.Errorf("%s: limit_value %v is not printed in %q", row.label(), *row.LimitValue, row.Limit)
			}
			if row.TargetValue != nil && !printedAs(row.Target, *row.TargetValue, f.Unit) {
				t.Errorf("%s: target_value %v is not printed in %q", row.label(), *row.TargetValue, row.Target)
			}
			if row.Target != "" && row.Verdict == "" {
				t.Errorf("%s: a target without the section's verdict", row.label())
			}
		}
	}
}

// printedAs reports whether text prints v: as a percentage (34%, 99.5%),
// or as a fraction (0.50 for 50%), or as a multiple for unit ×.
func printedAs(text string, v float64, unit string) bool {
	figs := figure.FindAllString(text, -1)
	forms := []string{strconv.FormatFloat(v, 'f', -1, 64) + "%"}
	if unit == "%" {
		forms = append(forms, strconv.FormatFloat(v/100, 'f', 2, 64))
	} else {
		forms = append(forms, strconv.FormatFloat(v, 'f', -1, 64))
	}
	for _, f := range forms {
		if slices.Contains(figs, f) {
			return true
		}
	}
	return false
}

func TestBenchmarksSummaryIsCurrent(t *testing.T) {
	r, err := readChartResults(resultsPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(benchmarksPath)
	if err != nil {
		t.Fatal(err)
	}
	if table := summaryTable(r); !strings.Contains(string(b), table) {
		t.Errorf("%s does not hold the summary table of %s (%s):\n%s", benchmarksPath, resultsPath, regenerate, table)
	}
	for _, f := range r.Families {
		link := "(docs/bench/" + f.Name + ".svg)"
		if !strings.Contains(string(b), link) {
			t.Errorf("%s does not show the chart %s", benchmarksPath, link)
		}
		var want bytes.Buffer
		if err := renderChart(&want, f); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(filepath.Dir(resultsPath), f.Name+".svg"))
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("docs/bench/%s.svg is not the chart of %s (%v): %s", f.Name, resultsPath, err, regenerate)
		}
	}
}
