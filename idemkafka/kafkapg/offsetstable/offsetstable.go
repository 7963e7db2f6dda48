// Package offsetstable creates and upgrades kafkapg's offsets table. It is
// a package of its own, which imports no Kafka client, so that a program
// that only migrates tables (the idem command's migrate) links none;
// kafkapg.Migrate is the same call.
package offsetstable

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemgo/idem/internal/pgsql"
	"github.com/idemgo/idem/pgstore"
)

// Default is the offsets table used when kafkapg.WithOffsetsTable is not
// given.
const Default = "idem_kafka_offsets"

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate creates or upgrades the offsets table named table ("" for
// [Default]; schema.table accepted, the schema must exist): one row per
// consumer group, topic and partition, holding the next offset to
// consume. It is idempotent, and safe when several processes run it at
// once: its statements (migrations/*.sql) run as one transaction holding
// an advisory lock for the table. The records table is pgstore's: create
// it with pgstore.Migrate (idem migrate creates both).
func Migrate(ctx context.Context, db pgstore.DB, table string) error {
	p, err := pgsql.ParseTableOr(table, Default)
	if err != nil {
		return fmt.Errorf("kafkapg: Migrate: %w", err)
	}
	vars := map[string]string{"table": p.Ident()}
	script, err := pgsql.MigrationScript("kafkapg", migrations, "migrations/*.sql", p.LockKey("kafkapg.Migrate:"), vars)
	if err != nil {
		return fmt.Errorf("kafkapg: Migrate: %w", err)
	}
	if _, err := db.Exec(ctx, script); err != nil {
		return fmt.Errorf("kafkapg: Migrate %s: %w", p.Given, err)
	}
	return nil
}
