package pgstore_test

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/pgstore"
)

// TestEveryStatementPrepares renders every statement of queries.sql for a
// migrated table and has the server parse and plan it: a definition that
// a template change broke, or that no longer fits the schema, fails here
// rather than on the path that sends it.
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	stmts, err := pgstore.Statements(e.table)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := e.pool.Acquire(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, sql := range stmts {
		if strings.Contains(sql, "{{") || strings.Contains(sql, "<no value>") {
			t.Errorf("%s: not fully rendered:\n%s", name, sql)
			continue
		}
		if strings.Contains(sql, ";") { // several statements: the simple protocol only
			continue
		}
		if _, err := conn.Conn().Prepare(testCtx(t), "", sql); err != nil {
			t.Errorf("%s does not prepare: %v\n%s", name, err, sql)
		}
	}
}

func TestNoUnusedDefinitions(t *testing.T) {
	if unused := pgstore.UnusedDefinitions(); len(unused) > 0 {
		t.Fatalf("queries.sql defines %v, which nothing renders or includes", unused)
	}
}
