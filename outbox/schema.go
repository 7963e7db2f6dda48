package outbox

import (
	"context"
	"embed"
	"fmt"
	"strconv"

	"github.com/idemgo/idem/internal/pgsql"
)

// DefaultTable is the outbox table used when a Table field is empty.
const DefaultTable = "idem_outbox"

//go:embed migrations/*.sql
var migrations embed.FS

// queriesSQL holds every statement the package sends, but the migrations:
// see its header for how it is written.
//
//go:embed queries.sql
var queriesSQL string

// sqlTemplates are the definitions of queries.sql. The migrations are
// rendered with the same names (see Migrate).
var sqlTemplates = pgsql.Parse("queries.sql", queriesSQL)

// table is a validated outbox table name and what derives from it.
type table struct {
	name  string // as given
	ident string // quoted, schema-qualified if given
	dead  string // quoted, schema-qualified if given: the dead rows' table
	// pending, sent and retry are the quoted names of the indexes of the
	// pending rows, the sent rows and the retrying rows.
	pending, sent, retry string
	// channel is the LISTEN/NOTIFY channel: a hash of the name, since a
	// schema-qualified name may be longer than a channel name may be.
	channel string
	// lockClass is the first key of the relays' advisory locks.
	lockClass int32
	// migrateLock is Migrate's advisory lock, a single bigint key: another
	// key space than the relays' two int4 keys.
	migrateLock int64
}

// parseTable parses name ("" for [DefaultTable]) as every table name of
// idem's PostgreSQL packages is parsed (internal/pgsql): a name or
// schema.name, each part unquoted (lowercase ASCII letters, digits and
// underscores, not starting with a digit) or in double quotes (no single
// quote, dollar sign or backslash), at most 48 bytes (index names add up
// to 12, and PostgreSQL truncates identifiers past 63 bytes).
func parseTable(name string) (table, error) {
	p, err := pgsql.ParseTableOr(name, DefaultTable)
	if err != nil {
		return table{}, err
	}
	key := p.LockKey("outbox:")
	return table{
		name:        p.Given,
		ident:       p.Ident(),
		dead:        p.Sibling("_dead"),
		pending:     p.Local("_pending_idx"),
		sent:        p.Local("_sent_idx"),
		retry:       p.Local("_retry_idx"),
		channel:     fmt.Sprintf("outbox_%016x", uint64(key)),
		lockClass:   int32(uint64(key) >> 32),
		migrateLock: key,
	}, nil
}

// vars are what every definition of queries.sql and every migration is
// rendered with.
func (t table) vars() map[string]string {
	return map[string]string{"table": t.ident, "dead": t.dead, "pending_idx": t.pending, "sent_idx": t.sent,
		"retry_idx": t.retry, "channel": t.channel}
}

// render returns the definition name of queries.sql rendered for t, with
// the arguments kv (see pgsql.Args).
func (t table) render(name string, kv ...string) string {
	return pgsql.Render("outbox", sqlTemplates, name, t.vars(), kv...)
}

// itoa formats a number of the package's own for a statement.
func itoa[N ~int | ~int64](n N) string { return strconv.FormatInt(int64(n), 10) }

// Migrate creates or upgrades the outbox table named table ("" for
// [DefaultTable]; schema.name is accepted, the schema must exist) and its
// indexes, and the table of its dead rows, named after it with "_dead"
// (see [Dead]). It upgrades a table created by an earlier version in place:
// the migrations (migrations/*.sql) only add what is missing. It is
// idempotent and safe to run from several processes at once: its
// statements run as one transaction that holds an advisory lock for the
// table. With db a pgx.Tx, they run in that transaction.
func Migrate(ctx context.Context, db DB, table string) error {
	t, err := parseTable(table)
	if err != nil {
		return fmt.Errorf("outbox: Migrate: %w", err)
	}
	script, err := pgsql.MigrationScript("outbox", migrations, "migrations/*.sql", t.migrateLock, t.vars())
	if err != nil {
		return fmt.Errorf("outbox: Migrate: %w", err)
	}
	// One simple-protocol message: PostgreSQL runs it as one implicit
	// transaction, so the lock is held until the last statement.
	if _, err := db.Exec(ctx, script); err != nil {
		return dbError("Migrate", err)
	}
	return nil
}
