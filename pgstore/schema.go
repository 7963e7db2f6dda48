package pgstore

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemgo/idem/internal/pgsql"
)

// DefaultTable is the records table used when [Config.Table] is empty.
const DefaultTable = "idem_records"

//go:embed migrations/*.sql
var migrations embed.FS

// table is a validated records table name and the quoted names derived
// from it.
type table struct {
	name  string // as given, for messages
	ident string // quoted, schema-qualified if given: "s"."t"
	index string // quoted, unqualified (an index lives in its table's schema)
	seq   string // quoted, qualified like the table
	// lockKey is the advisory lock Migrate holds for the table: two
	// processes migrating the same table at once run one after the other.
	lockKey int64
}

// parseTable parses name ("" for [DefaultTable]) as every table name of
// idem's PostgreSQL packages is parsed (see Config.Table): nothing else is
// ever put into SQL text.
func parseTable(name string) (table, error) {
	p, err := pgsql.ParseTableOr(name, DefaultTable)
	if err != nil {
		return table{}, err
	}
	return table{
		name:    p.Given,
		ident:   p.Ident(),
		index:   p.Local("_expires_at_idx"),
		seq:     p.Sibling("_token_seq"),
		lockKey: p.LockKey("pgstore.Migrate:"),
	}, nil
}

// Migrate creates or upgrades the records table named table ("" for
// [DefaultTable]; schema-qualified names are accepted, the schema must
// exist) and its index and token sequence. It is idempotent, and safe when
// several processes run it at once: all statements run as one transaction
// holding a transaction-level advisory lock for the table. With db a
// pgx.Tx, they run in that transaction and the lock is held until it ends.
func Migrate(ctx context.Context, db DB, table string) error {
	t, err := parseTable(table)
	if err != nil {
		return fmt.Errorf("pgstore: Migrate: %w", err)
	}
	// One simple-protocol message (Exec without arguments): PostgreSQL runs
	// its statements as one implicit transaction, so the lock is held until
	// the last migration is applied.
	script, err := pgsql.MigrationScript("pgstore", migrations, "migrations/*.sql", t.lockKey, t.vars())
	if err != nil {
		return fmt.Errorf("pgstore: Migrate: %w", err)
	}
	if _, err := db.Exec(ctx, script); err != nil {
		return translate("migrate", err)
	}
	return nil
}
