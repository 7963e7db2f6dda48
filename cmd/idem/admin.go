package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storeurl"
)

func init() {
	register(command{
		name:    "migrate",
		summary: "create or upgrade pgstore's records table (and outbox and offsets tables), or a DynamoDB table; idempotent",
		run:     runMigrate,
	})
	register(command{
		name:    "reap",
		summary: "delete pgstore's expired records in small batches, for cron",
		run:     runReap,
	})
}

// postgresFlag parses the --store of migrate, reap and outbox stats: a
// postgres:// URL only (runMigrate lets dynamodb:// URLs through before it
// asks); storeWanted says why.
func postgresFlag(fs *flag.FlagSet, raw string) (*url.URL, error) {
	if raw == "" {
		want, _ := storeWanted(fs.Name())
		return nil, usageErrorf("idem: %s: --store is required (%s)", fs.Name(), want)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		want, why := storeWanted(fs.Name())
		return nil, usageErrorf("idem: %s: --store %s: want a %s URL (%s)", fs.Name(), storeurl.Redact(raw), want, why)
	}
	return u, nil
}

// storeWanted says what the --store of migrate, reap and outbox stats may
// be, and why no other store will do, for postgresFlag's errors.
func storeWanted(verb string) (want, why string) {
	switch verb {
	case "migrate":
		return "postgres:// or dynamodb://", "Redis and memstore have no table, and a SQLite file gets its table when a store opens it"
	case "reap":
		return "postgres://", "reap deletes pgstore's expired rows: Redis and DynamoDB's TTL expire records by themselves, and a SQLite store's Reap runs in its program"
	}
	return "postgres://", "the outbox table is in PostgreSQL"
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "the store's URL: postgres://user@host:port/db[?table=[schema.]name] for PostgreSQL, dynamodb://host:port/table or dynamodb:///table (AWS) for DynamoDB, cassandra://host:port/keyspace[?replication=…] for Cassandra")
	var more migrateFlags
	more.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem migrate --store postgres://… [--outbox TABLE]… [--kafka-offsets TABLE]…
       idem migrate --store dynamodb://…
       idem migrate --store cassandra://…

With a postgres:// store, creates pgstore's records table, its expiry index
and its token sequence, or upgrades them to this version's schema; with
--outbox, an outbox table and its dead rows' table; with --kafka-offsets, a
kafkapg offsets table: every table a configuration needs. Each table's
migrations run in one transaction under an advisory lock, so it is
idempotent and several processes may run it at once. The schema of a
schema-qualified table must exist.

With a dynamodb:// store, creates dynamostore's table, or checks and
completes an existing one (idempotent too).

With a cassandra:// store, creates cassandrastore's table, and its keyspace
first when the URL gives the keyspace's replication (replication=
SimpleStrategy:N or NetworkTopologyStrategy:dc1=N,…); idempotent too.

Flags:
`)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*store, "dynamodb:") && !strings.HasPrefix(*store, "cassandra:") {
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
	} else if cs, ok := s.(*cassandrastore.Store); ok {
		table = cs.Config().Keyspace + "." + cs.Config().Table
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
		printFlags(fs)
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
