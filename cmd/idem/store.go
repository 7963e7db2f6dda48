package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	_ "github.com/idemgo/idem/storeurl/dynamourl"
	_ "github.com/idemgo/idem/storeurl/pgurl"
	_ "github.com/idemgo/idem/storeurl/redisurl"
	_ "github.com/idemgo/idem/storeurl/sqliteurl"
)

// storeUsage documents the --store URLs, for the flags' help.
const storeUsage = `the idem store's URL:
  mem://                                    in-process memstore (records live as long as the command)
  redis://[user:password@]host:port[/db]    Redis (rediss:// for TLS); ?prefix= sets the key prefix (default idem:);
                                            other options are go-redis's (dial_timeout=, pool_size=, …)
  postgres://user@host:port/db              PostgreSQL (postgresql:// too); ?table=[schema.]name sets the records
                                            table (default idem_records); other options are pgx's (sslmode=, …)
  dynamodb://host:port/table                a DynamoDB-compatible server at http://host:port (dynalite, DynamoDB Local)
  dynamodb:///table                         DynamoDB on AWS (the SDK's default region and credentials); ?region= sets
                                            the region; the table defaults to idem_records
  sqlite://idem.db, sqlite:///abs/idem.db   a SQLite file (sqlitestore), created with its table if missing; ?table=name
                                            sets the records table (default idem_records), ?synchronous=normal trades
                                            durability on power loss for speed (default full)`

// openStore opens the store named by rawURL (a --store flag) with
// storeurl.Open and returns it with the function that closes it. A URL
// storeurl cannot use is a *cli.UsageError; a server that cannot be reached is
// an error naming the URL without its password. With migrate set, a
// PostgreSQL store creates or upgrades its table first, and a DynamoDB
// store creates its table (storeurl.Migrate).
func openStore(ctx context.Context, rawURL string, migrate bool) (storage.Store, func() error, error) {
	var opts []storeurl.Option
	if migrate {
		opts = append(opts, storeurl.Migrate())
	}
	s, closeStore, err := storeurl.Open(ctx, rawURL, opts...)
	if err != nil {
		return nil, nil, storeError(err)
	}
	return s, closeStore, nil
}

// storeError is the CLI's error for an error of storeurl.Open: a usage
// error, naming the --store flag, for a URL it cannot use.
func storeError(err error) error {
	if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
		return usageErrorf("idem: --store %s: %v", ue.URL, ue.Err)
	}
	return fmt.Errorf("idem: %w", err)
}

// go-redis logs every failed dial by itself, to stderr; the command reports
// the error the call returns instead, once, with the store's URL.
func init() { redis.SetLogger(discardRedisLog{}) }

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
