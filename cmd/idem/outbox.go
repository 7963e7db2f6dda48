package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
)

func init() {
	register(command{
		name:    "outbox",
		summary: "outbox stats: an outbox table's pending messages, the age of the oldest, its dead rows",
		run:     runOutbox,
	})
}

func runOutbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "stats" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(stdout, "Usage: idem outbox stats --store postgres://… [--table outbox] [--json]\n")
			return flag.ErrHelp
		}
		return usageErrorf("idem: outbox: want a verb: idem outbox stats --store postgres://…")
	}
	fs := flag.NewFlagSet("outbox stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "the PostgreSQL database of the outbox table: postgres://user@host:port/db")
	table := fs.String("table", outbox.DefaultTable, "the outbox table, [schema.]name")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem outbox stats --store postgres://… [--table outbox] [--json]

Shows an outbox table's backlog: the messages not yet published, the age
of the oldest of them (by the database's clock), and the dead rows that
wait for an operator (outbox.Dead, Redrive, Discard).

Flags:
`)
		printFlags(fs)
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	u, err := postgresFlag(fs, *store)
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	lag, err := outbox.ReadLag(ctx, pool, *table)
	if err != nil {
		return fmt.Errorf("idem: outbox stats: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Table         string  `json:"table"`
			Pending       int64   `json:"pending"`
			OldestPending float64 `json:"oldest_pending_seconds"`
			Dead          int64   `json:"dead"`
		}{*table, lag.Pending, lag.OldestPending.Seconds(), lag.Dead})
	}
	fmt.Fprintf(stdout, "table           %s\npending         %d\noldest pending  %v\ndead            %d\n", *table, lag.Pending, lag.OldestPending, lag.Dead)
	return nil
}

// openPool connects a pool to the database of u and checks that it
// answers.
func openPool(ctx context.Context, u *url.URL) (*pgxpool.Pool, error) {
	shown := storeurl.Redact(u.String())
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, usageErrorf("idem: --store %s: %v", shown, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("idem: --store %s: %w", shown, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("idem: --store %s: cannot reach PostgreSQL: %w: %w", shown, storage.ErrStoreUnavailable, err)
	}
	return pool, nil
}
