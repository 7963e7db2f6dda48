package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

// DefaultTable is the records table used when [Config.Table] is empty.
const DefaultTable = "idem_records"

// maxNamePart is the longest table (or schema) name accepted: the index
// name adds 15 bytes and PostgreSQL truncates identifiers past 63.
const maxNamePart = 48

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the migrations/*.sql files, by name (so in order), parsed
// as the statements of queries.sql are.
var migrations = func() []*template.Template {
	files, err := fs.Glob(migrationFiles, "migrations/*.sql") // sorted by name
	if err != nil {
		panic(err)
	}
	ts := make([]*template.Template, len(files))
	for i, f := range files {
		b, err := migrationFiles.ReadFile(f)
		if err != nil {
			panic(err)
		}
		ts[i] = newSQLTemplate(f, string(b))
	}
	return ts
}()

// table is a validated records table name and the quoted names derived
// from it.
type table struct {
	name  string // as given, for messages
	ident string // quoted, schema-qualified if given: "s"."t"
	index string // quoted, unqualified (an index lives in its table's schema)
	seq   string // quoted, qualified like the table
}

// parseTable validates name: one or two dot-separated parts, each of
// lowercase ASCII letters, digits and underscores, not starting with a
// digit, at most 48 bytes. Nothing else is ever put into SQL text.
func parseTable(name string) (table, error) {
	if name == "" {
		name = DefaultTable
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return table{}, fmt.Errorf("table %q: at most one dot (schema.table)", name)
	}
	for _, p := range parts {
		if err := validName(p); err != nil {
			return table{}, fmt.Errorf("table %q: %w", name, err)
		}
	}
	base := parts[len(parts)-1]
	seq := append(parts[:len(parts)-1:len(parts)-1], base+"_token_seq")
	return table{
		name:  name,
		ident: pgx.Identifier(parts).Sanitize(),
		index: pgx.Identifier{base + "_expires_at_idx"}.Sanitize(),
		seq:   pgx.Identifier(seq).Sanitize(),
	}, nil
}

func validName(p string) error {
	if p == "" {
		return errors.New("empty name")
	}
	if len(p) > maxNamePart {
		return fmt.Errorf("name %q longer than %d bytes", p, maxNamePart)
	}
	for i, c := range []byte(p) {
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return fmt.Errorf("name %q: only lowercase ASCII letters, digits and underscores, not starting with a digit", p)
		}
	}
	return nil
}

// lockKey is the advisory lock Migrate holds for the table: two processes
// migrating the same table at once run one after the other.
func (t table) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("pgstore.Migrate:" + t.ident))
	return int64(h.Sum64())
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
	var script strings.Builder
	script.WriteString(t.render(sqlTemplates, "migrate_lock", "lock_key", strconv.FormatInt(t.lockKey(), 10)) + ";\n")
	for _, m := range migrations {
		script.WriteString(t.render(m, m.Name()) + "\n")
	}
	if _, err := db.Exec(ctx, script.String()); err != nil {
		return translate("migrate", err)
	}
	return nil
}
