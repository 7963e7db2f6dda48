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
		// What would end a string literal or a dollar-quoted body the
		// name is put in.
		`"it's"`, `s."a$$b"`, `"a$b"`, `"a\b"`,
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

// TestParseTableOr: an empty name is the default's; the key of a table is
// the same whatever its spelling, so that processes configured with
// "t" and "\"t\"" take the same lock, and differs between tables and
// between packages (prefixes).
func TestParseTableOr(t *testing.T) {
	def, err := pgsql.ParseTableOr("", "idem_records")
	if err != nil || def.Given != "idem_records" || def.Ident() != `"idem_records"` {
		t.Fatalf("ParseTableOr(\"\", default) = %+v, %v; want the default", def, err)
	}
	if _, err := pgsql.ParseTableOr("", "Bad"); err == nil {
		t.Error("ParseTableOr accepted an invalid default")
	}
	quoted, err := pgsql.ParseTableOr(`"idem_records"`, "other")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := pgsql.ParseTable("s.idem_records")
	switch k := def.LockKey("p:"); {
	case quoted.LockKey("p:") != k:
		t.Errorf("LockKey differs between idem_records and its quoted spelling")
	case other.LockKey("p:") == k || def.LockKey("q:") == k:
		t.Errorf("LockKey is the same for another table or another prefix")
	case def.LockKey("pgstore.Migrate:") != -3866026717035681854:
		// Migrate's lock: a process of an earlier build migrating the
		// same table at the same time must take the same one.
		t.Errorf("LockKey(pgstore.Migrate:) of idem_records = %d: the key changed", def.LockKey("pgstore.Migrate:"))
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
		if strings.Count(id, `"`)%2 != 0 || strings.ContainsAny(id, "\x00'$\\") {
			t.Fatalf("ParseTable(%q) renders as %s", name, id)
		}
	})
}
