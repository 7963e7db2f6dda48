package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storeurl"
)

func init() {
	register(command{
		name:    "migrate",
		summary: "create or upgrade pgstore's records table (idempotent; safe to run from several processes)",
		run:     runMigrate,
	})
	register(command{
		name:    "reap",
		summary: "delete pgstore's expired records in small batches, for cron",
		run:     runReap,
	})
}

// postgresFlag parses the --store of migrate and reap: a postgres:// URL
// only, since neither verb means anything for memstore or Redis (Redis
// expires its keys by itself).
func postgresFlag(fs *flag.FlagSet, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, usageErrorf("idem: %s: --store is required (postgres://…)", fs.Name())
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, usageErrorf("idem: %s: --store %s: want a postgres:// URL (Redis and memstore need neither migrations nor reaping)", fs.Name(), storeurl.Redact(raw))
	}
	return u, nil
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "the PostgreSQL store's URL: postgres://user@host:port/db[?table=[schema.]name]")
	var more migrateFlags
	more.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem migrate --store postgres://… [--outbox TABLE]… [--kafka-offsets TABLE]…

Creates pgstore's records table, its expiry index and its token sequence,
or upgrades them to this version's schema; with --outbox, an outbox table
and its dead rows' table; with --kafka-offsets, a kafkapg offsets table:
every table a configuration needs. Each table's migrations run in one
transaction under an advisory lock, so it is idempotent and several
processes may run it at once. The schema of a schema-qualified table must
exist.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*store, "dynamodb:") {
		if _, err := postgresFlag(fs, *store); err != nil {
			return err
		}
	}
	s, closeStore, err := openStore(ctx, *store, true)
	if err != nil {
		return err
	}
	defer closeStore()
	table := ""
	if pg, ok := s.(*pgstore.Store); ok {
		table = pg.Table()
	} else {
		u, _ := dynamostore.ParseURL(*store) // storeurl opened it
		table = u.Table
	}
	fmt.Fprintf(stdout, "idem migrate: %s is up to date\n", table)
	return more.migrateTables(ctx, *store, stdout)
}

func runReap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "the PostgreSQL store's URL: postgres://user@host:port/db[?table=[schema.]name]")
	batch := fs.Int("batch", pgstore.DefaultReapBatch, "the most rows one DELETE removes")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long the whole reap may take; what is left waits for the next run")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem reap --store postgres://… [flags]

Deletes the expired records of pgstore's table, --batch rows per statement,
until none is left or --timeout passes, and prints how many it deleted.
Expired records are already invisible to idem; reaping gives their space
back. Each DELETE is short and skips rows other transactions hold, so it
is safe beside live traffic and beside other reapers. Run it from cron, or
use pgstore.NewReaper in a long-running process instead.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *batch < 1:
		return usageErrorf("idem: reap: --batch %d: must be at least 1", *batch)
	case *timeout <= 0:
		return usageErrorf("idem: reap: --timeout %v: must be positive", *timeout)
	}
	if _, err := postgresFlag(fs, *store); err != nil {
		return err
	}
	opened, closeStore, err := openStore(ctx, *store, false)
	if err != nil {
		return err
	}
	defer closeStore()
	s := opened.(*pgstore.Store) // postgresFlag let postgres:// URLs only through
	rctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	n, err := s.Reap(rctx, *batch)
	fmt.Fprintf(stdout, "idem reap: deleted %d expired records from %s\n", n, s.Table())
	if err != nil {
		return fmt.Errorf("idem: reap: %w", err)
	}
	return nil
}
