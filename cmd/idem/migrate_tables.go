package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/idemkafka/kafkapg/offsetstable"
	"github.com/idemgo/idem/outbox"
)

// tablesFlag is a flag that may be given more than once, one table each.
type tablesFlag []string

func (f *tablesFlag) String() string     { return strings.Join(*f, ",") }
func (f *tablesFlag) Set(v string) error { *f = append(*f, v); return nil }

// migrateFlags are migrate's flags for the tables beside the records
// table: every table a configuration needs is created by one command.
type migrateFlags struct {
	outboxes, offsets tablesFlag
}

func (m *migrateFlags) register(fs *flag.FlagSet) {
	fs.Var(&m.outboxes, "outbox", "an outbox table, [schema.]name, to create or upgrade with its dead rows' table (outbox.Migrate); may be repeated")
	fs.Var(&m.offsets, "kafka-offsets", "a kafkapg offsets table, [schema.]name, to create or upgrade (kafkapg.Migrate); may be repeated")
}

// migrateTables creates or upgrades the outbox and offsets tables of m in
// the database of raw, a postgres:// URL (its table= parameter names the
// records table, migrated already), each idempotently and under its own
// advisory lock, and says so on stdout.
func (m *migrateFlags) migrateTables(ctx context.Context, raw string, stdout io.Writer) error {
	if len(m.outboxes)+len(m.offsets) == 0 {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return usageErrorf("idem: migrate: --outbox and --kafka-offsets need a postgres:// --store")
	}
	q := u.Query()
	q.Del("table")
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return usageErrorf("idem: migrate: --store: %v", err)
	}
	defer pool.Close()
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, t := range m.outboxes {
		if err := outbox.Migrate(mctx, pool, t); err != nil {
			return fmt.Errorf("idem: migrate: --outbox %s: %w", t, err)
		}
		fmt.Fprintf(stdout, "idem migrate: outbox %s and its dead rows' table are up to date\n", t)
	}
	for _, t := range m.offsets {
		if err := offsetstable.Migrate(mctx, pool, t); err != nil {
			return fmt.Errorf("idem: migrate: --kafka-offsets %s: %w", t, err)
		}
		fmt.Fprintf(stdout, "idem migrate: offsets table %s is up to date\n", t)
	}
	return nil
}
