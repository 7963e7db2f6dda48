package outbox

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// migrated returns a context that ends with t (within 30s), a pool of t's
// own and the name of a migrated outbox table, table in a schema of t's
// own.
func migrated(t *testing.T, table string) (context.Context, *pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pool := pgstoretest.Pool(t, 4)
	name := pgstoretest.Schema(t, pool) + "." + table
	if err := Migrate(ctx, pool, name); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, name
}

// TestEveryStatementPrepares renders every statement of queries.sql for a
// table with a quoted, schema-qualified name, migrated, and has the server
// parse and plan it: a definition that a template change broke, or that no
// longer fits the schema, fails here rather than on the path that sends
// it.
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	ctx, pool, name := migrated(t, `"Out box"`)
	tb, err := parseTable(name)
	if err != nil {
		t.Fatal(err)
	}
	stmts := map[string]string{}
	for _, del := range []bool{false, true} {
		cfg, err := RelayConfig{DeleteSent: del, MinBackoff: time.Millisecond, Retention: 90 * time.Minute}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		q := newRelayQueries(tb, cfg)
		for k, v := range map[string]string{"listen": q.listen, "fetch": q.fetch, "fetch_all": q.fetchAll, "mark": q.mark,
			"kill": q.kill, "record_failures": q.recordFailures, "cleanup": q.cleanup, "lag": q.lag, "join": q.join,
			"members": q.members, "release": q.release, "acquire": q.acquire} {
			if del && k == "mark" {
				k = "mark_delete"
			}
			stmts[k] = v
		}
	}
	o, err := New(Config{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	stmts["insert_one"], stmts["insert_many"], stmts["notify"] = o.insert1, o.insertN, o.notifySQL
	for _, def := range []string{"dead_rows", "redrive", "discard"} {
		stmts[def] = tb.render(def)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Rendering fails (Render panics) on a key a definition misses: what
	// is left to check is what the server says of the text.
	for def, sql := range stmts {
		var err error
		if def == "listen" { // a utility statement, which does not prepare
			_, err = conn.Exec(ctx, sql)
		} else {
			_, err = conn.Conn().Prepare(ctx, "", sql)
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", def, err, sql)
		}
	}
	included := map[string]bool{}
	for _, m := range regexp.MustCompile(`\{\{-?\s*template "([^"]+)"`).FindAllStringSubmatch(queriesSQL, -1) {
		included[m[1]] = true
	}
	for _, d := range sqlTemplates.Templates() {
		if def := d.Name(); def != sqlTemplates.Name() && !included[def] && stmts[def] == "" {
			t.Errorf("queries.sql defines %s, which nothing renders or includes", def)
		}
	}
	if _, err := conn.Exec(ctx, "UNLISTEN *"); err != nil {
		t.Fatal(err)
	}
}
