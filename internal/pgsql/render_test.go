package pgsql_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemgo/idem/internal/pgsql"
)

func TestRender(t *testing.T) {
	tmpl := pgsql.Parse("q.sql", `-- a comment outside definitions
{{define "cond"}}a = {{.v}}{{end}}
{{define "q"}}
SELECT * FROM {{.table}} WHERE {{template "cond" args . "v" "$1"}} LIMIT {{.n}}
{{end}}`)
	got := pgsql.Render("pkg", tmpl, "q", map[string]string{"table": `"t"`}, "n", "5")
	if want := `SELECT * FROM "t" WHERE a = $1 LIMIT 5`; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "pkg: rendering q") {
			t.Errorf("Render without n: panic %v, want one naming the package and the statement", r)
		}
	}()
	pgsql.Render("pkg", tmpl, "q", map[string]string{"table": `"t"`})
}

func TestMigrationScript(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("ALTER TABLE {{.table}} ADD COLUMN IF NOT EXISTS b int;\n")},
		"m/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS {{.table}} (a int);\n")},
	}
	got, err := pgsql.MigrationScript("pkg", fsys, "m/*.sql", 42, map[string]string{"table": `"s"."t"`})
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT pg_advisory_xact_lock(42);\n" +
		`CREATE TABLE IF NOT EXISTS "s"."t" (a int);` + "\n" +
		`ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS b int;` + "\n"
	if got != want {
		t.Errorf("MigrationScript =\n%s\nwant\n%s", got, want)
	}
	if _, err := pgsql.MigrationScript("pkg", fsys, "m/*.sql", 42, nil); err == nil {
		t.Error("MigrationScript without the table's name: no error")
	}
	if _, err := pgsql.MigrationScript("pkg", fsys, "none/*.sql", 42, nil); err == nil {
		t.Error("MigrationScript without migrations: no error")
	}
}
