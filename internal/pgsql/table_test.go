package pgsql_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgo/idem/internal/pgsql"
)

func TestParseTable(t *testing.T) {
	long := strings.Repeat("a", pgsql.MaxNameLen)
	for _, c := range []struct {
		name, ident, schema, table string
	}{
		{"idem_records", `"idem_records"`, "", "idem_records"},
		{"s.t", `"s"."t"`, "s", "t"},
		{"_t1", `"_t1"`, "", "_t1"},
		{"select", `"select"`, "", "select"}, // reserved words are quoted
		{long, `"` + long + `"`, "", long},
		{long + "." + long, `"` + long + `"."` + long + `"`, long, long},
		{`"Orders"`, `"Orders"`, "", "Orders"},
		{`"My Schema"."Order ""Items"""`, `"My Schema"."Order ""Items"""`, "My Schema", `Order "Items"`},
		{`s."a.b"`, `"s"."a.b"`, "s", "a.b"},
		{`"1st"`, `"1st"`, "", "1st"},
		{`"é"`, `"é"`, "", "é"},
	} {
		tb, err := pgsql.ParseTable(c.name)
		if err != nil {
			t.Errorf("ParseTable(%q): %v", c.name, err)
			continue
		}
		if tb.Ident() != c.ident || tb.Schema != c.schema || tb.Name != c.table || tb.Given != c.name {
			t.Errorf("ParseTable(%q) = %+v (ident %s), want schema %q, name %q, ident %s", c.name, tb, tb.Ident(), c.schema, c.table, c.ident)
		}
	}
}

func TestParseTableRefuses(t *testing.T) {
	for _, name := range []string{
		"", ".", "a.", ".a", "a..b", "a.b.c", "Orders", "1t", "s.1t", "a-b", "a b", "a;drop", `a"b`,
		strings.Repeat("a", pgsql.MaxNameLen+1), "s." + strings.Repeat("a", pgsql.MaxNameLen+1),
		`""`, `"a`, `"a"b`, `"a""`, "\"a\x00\"", "\"a\n\"", "\"\xff\"", `"a".`, `"` + strings.Repeat("é", pgsql.MaxNameLen/2+1) + `"`,
	} {
		_, err := pgsql.ParseTable(name)
		var ne *pgsql.NameError
		if !errors.As(err, &ne) || ne.Name != name || ne.Reason == "" {
			t.Errorf("ParseTable(%q) = %v, want a *NameError naming it", name, err)
		}
	}
}

func TestDerivedNames(t *testing.T) {
	tb, err := pgsql.ParseTable(`s."T"`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Sibling("_dead"), `"s"."T_dead"`; got != want {
		t.Errorf("Sibling = %s, want %s", got, want)
	}
	if got, want := tb.Local("_idx"), `"T_idx"`; got != want {
		t.Errorf("Local = %s, want %s", got, want)
	}
	tb, _ = pgsql.ParseTable("t")
	if got, want := tb.Sibling("_seq"), `"t_seq"`; got != want {
		t.Errorf("Sibling = %s, want %s", got, want)
	}
}

// FuzzParseTable: whatever the input, ParseTable accepts a name whose
// parts are within the limits and renders as one identifier, and parsing
// its rendering gives the same table back.
func FuzzParseTable(f *testing.F) {
	for _, s := range []string{"idem_records", "s.t", `"A"."b ""c"""`, "a.b.c", `"a`, "\"\x00\"", "1a", `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		tb, err := pgsql.ParseTable(name)
		if err != nil {
			var ne *pgsql.NameError
			if !errors.As(err, &ne) {
				t.Fatalf("ParseTable(%q) error %T, want *NameError", name, err)
			}
			return
		}
		for _, p := range []string{tb.Schema, tb.Name} {
			if len(p) > pgsql.MaxNameLen || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
				t.Fatalf("ParseTable(%q) accepted part %q", name, p)
			}
		}
		if tb.Name == "" {
			t.Fatalf("ParseTable(%q) accepted an empty name", name)
		}
		again, err := pgsql.ParseTable(tb.Ident())
		if err != nil || again.Schema != tb.Schema || again.Name != tb.Name {
			t.Fatalf("ParseTable(%q) = %+v; its rendering %s parses as %+v, %v", name, tb, tb.Ident(), again, err)
		}
		// A rendering is one identifier: its quotes pair up, so no
		// caller's text ends it early.
		id := tb.Ident()
		if strings.Count(id, `"`)%2 != 0 || strings.ContainsRune(id, 0) {
			t.Fatalf("ParseTable(%q) renders as %s", name, id)
		}
	})
}
