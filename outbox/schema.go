package outbox

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"strings"

	"github.com/idemgo/idem/internal/pgsql"
)

// DefaultTable is the outbox table used when a Table field is empty.
const DefaultTable = "idem_outbox"

//go:embed migrations/*.sql
var migrations embed.FS

// table is a validated outbox table name and what derives from it.
type table struct {
	name    string // as given
	ident   string // quoted, schema-qualified if given
	pending string // quoted name of the pending rows' index
	sent    string // quoted name of the sent rows' index
	retry   string // quoted name of the retrying rows' index
	dead    string // quoted, schema-qualified if given: the dead rows' table
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
// underscores, not starting with a digit) or in double quotes, at most 48
// bytes (index names add up to 12, and PostgreSQL truncates identifiers
// past 63 bytes).
func parseTable(name string) (table, error) {
	if name == "" {
		name = DefaultTable
	}
	p, err := pgsql.ParseTable(name)
	if err != nil {
		return table{}, err
	}
	ident := p.Ident()
	h := fnv.New64a()
	h.Write([]byte("outbox:" + ident))
	sum := h.Sum64()
	return table{
		name:        name,
		ident:       ident,
		pending:     p.Local("_pending_idx"),
		sent:        p.Local("_sent_idx"),
		retry:       p.Local("_retry_idx"),
		dead:        p.Sibling("_dead"),
		channel:     fmt.Sprintf("outbox_%016x", sum),
		lockClass:   int32(sum >> 32),
		migrateLock: int64(sum),
	}, nil
}

// expand puts the table's quoted names into a statement.
func (t table) expand(sql string) string {
	return strings.NewReplacer("{table}", t.ident, "{pending_idx}", t.pending, "{sent_idx}", t.sent,
		"{retry_idx}", t.retry, "{dead}", t.dead).Replace(sql)
}

// Migrate creates or upgrades the outbox table named table ("" for
// [DefaultTable]; schema.name is accepted, the schema must exist) and its
// indexes, and the table of its dead rows, named after it with "_dead"
// (see [Dead]). It upgrades a table created by an earlier version in place:
// the migrations (migrations/*.sql) only add what is missing. It is idempotent and safe to run from several processes at once:
// its statements run as one transaction that holds an advisory lock for the
// table. With db a pgx.Tx, they run in that transaction.
func Migrate(ctx context.Context, db DB, table string) error {
	t, err := parseTable(table)
	if err != nil {
		return fmt.Errorf("outbox: Migrate: %w", err)
	}
	var script strings.Builder
	fmt.Fprintf(&script, "SELECT pg_advisory_xact_lock(%d);\n", t.migrateLock)
	files, err := fs.Glob(migrations, "migrations/*.sql") // sorted by name
	if err != nil {
		return fmt.Errorf("outbox: Migrate: %w", err)
	}
	for _, f := range files {
		b, err := migrations.ReadFile(f)
		if err != nil {
			return fmt.Errorf("outbox: Migrate: %w", err)
		}
		script.WriteString(t.expand(string(b)))
		script.WriteString("\n")
	}
	// One simple-protocol message: PostgreSQL runs it as one implicit
	// transaction, so the lock is held until the last statement.
	if _, err := db.Exec(ctx, script.String()); err != nil {
		return dbError("Migrate", err)
	}
	return nil
}
