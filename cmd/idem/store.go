package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
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

// connectTimeout bounds opening a store: dialling and the first ping.
const connectTimeout = 10 * time.Second

// openStore opens the store named by rawURL (a --store flag) and returns
// it with the function that closes it. A URL this build cannot parse is a
// usageError; a server that cannot be reached is an error naming the URL
// without its password. With migrate set, a PostgreSQL store creates or
// upgrades its table first (pgstore.Migrate is idempotent), and a DynamoDB
// store creates its table (dynamostore.CreateTable is idempotent too). A
// SQLite store creates its file and table whatever migrate says: it is
// the process's own.
func openStore(ctx context.Context, rawURL string, migrate bool) (storage.Store, func() error, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, nil, usageErrorf("idem: --store %s: not a store URL (want mem://, redis://…, postgres://… or sqlite://…)", redactURL(rawURL))
	}
	switch u.Scheme {
	case "mem":
		if u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Opaque != "" {
			return nil, nil, usageErrorf("idem: --store %s: mem:// takes no host, path or options", redactURL(rawURL))
		}
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "redis", "rediss":
		return openRedis(ctx, u)
	case "postgres", "postgresql":
		s, pool, table, err := openPostgres(ctx, u)
		if err != nil {
			return nil, nil, err
		}
		if migrate {
			if err := migratePostgres(ctx, pool, table); err != nil {
				pool.Close()
				return nil, nil, err
			}
		}
		return s, func() error { pool.Close(); return nil }, nil
	case "dynamodb":
		return openDynamo(ctx, rawURL, migrate)
	case "sqlite":
		return openSQLite(ctx, u)
	}
	return nil, nil, usageErrorf("idem: --store: unsupported scheme %q in %q (supported: mem://, redis://, rediss://, postgres://, postgresql://, dynamodb://, sqlite://)",
		u.Scheme, redactURL(u.String()))
}

// takeParam removes the query parameter name from u and returns its value.
// The store packages' URL parsers refuse (go-redis) or pass to the server
// (pgx) parameters they do not know, so ours must go before they parse.
func takeParam(u *url.URL, name string) (string, bool) {
	q := u.Query()
	v, ok := q[name]
	if !ok {
		return "", false
	}
	q.Del(name)
	u.RawQuery = q.Encode()
	return v[len(v)-1], true
}

func openRedis(ctx context.Context, u *url.URL) (storage.Store, func() error, error) {
	shown := redactURL(u.String())
	prefix, _ := takeParam(u, "prefix")
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, nil, usageErrorf("idem: --store %s: %v", shown, err)
	}
	client := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("idem: --store %s: cannot reach Redis: %w: %w", shown, idem.ErrStoreUnavailable, err)
	}
	// New reads the server's maxmemory-policy: a server that went away
	// since the ping, or one that may evict records, is the server's
	// state, not a usage error.
	s, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		if errors.Is(err, idem.ErrStoreUnavailable) {
			return nil, nil, fmt.Errorf("idem: --store %s: cannot reach Redis: %w", shown, err)
		}
		if _, ok := errors.AsType[*redisstore.EvictionPolicyError](err); ok {
			return nil, nil, fmt.Errorf("idem: --store %s: %w", shown, err)
		}
		return nil, nil, usageErrorf("idem: --store %s: %v", shown, err)
	}
	return s, client.Close, nil
}

// openPostgres connects a pool to the database of u and returns the store
// over it and the records table's name as given ("" for the default);
// closing the pool is the caller's.
func openPostgres(ctx context.Context, u *url.URL) (s *pgstore.Store, pool *pgxpool.Pool, table string, err error) {
	shown := redactURL(u.String())
	table, _ = takeParam(u, "table")
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, nil, "", usageErrorf("idem: --store %s: %v", shown, err)
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("idem: --store %s: %w", shown, err)
	}
	s, err = pgstore.New(pool, pgstore.Config{Table: table})
	if err != nil {
		pool.Close()
		return nil, nil, "", usageErrorf("idem: --store %s: %v", shown, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, "", fmt.Errorf("idem: --store %s: cannot reach PostgreSQL: %w: %w", shown, idem.ErrStoreUnavailable, err)
	}
	return s, pool, table, nil
}

// openSQLite opens the SQLite store of u: sqlite://idem.db and
// sqlite://data/idem.db are relative to the working directory,
// sqlite:///var/lib/app/idem.db is absolute (sqlite:idem.db works too).
// Options: table=, synchronous=full|normal.
func openSQLite(ctx context.Context, u *url.URL) (storage.Store, func() error, error) {
	shown := u.String()
	var cfg sqlitestore.Config
	cfg.Table, _ = takeParam(u, "table")
	switch sync, _ := takeParam(u, "synchronous"); strings.ToLower(sync) {
	case "", "full":
	case "normal":
		cfg.Synchronous = sqlitestore.SyncNormal
	default:
		return nil, nil, usageErrorf("idem: --store %s: synchronous=%q: want full or normal", shown, sync)
	}
	path := u.Opaque
	if path == "" {
		path = u.Host + u.Path
	}
	switch {
	case u.RawQuery != "":
		return nil, nil, usageErrorf("idem: --store %s: unknown options %q (sqlite:// takes table= and synchronous=)", shown, u.RawQuery)
	case u.User != nil || u.Fragment != "":
		return nil, nil, usageErrorf("idem: --store %s: sqlite:// takes a file's path, no user or fragment", shown)
	case path == "":
		return nil, nil, usageErrorf("idem: --store %s: no file (sqlite://idem.db, or sqlite:///absolute/path.db)", shown)
	}
	s, err := sqlitestore.Open(ctx, path, cfg)
	if err != nil {
		if strings.HasPrefix(err.Error(), "sqlitestore: Config.") {
			return nil, nil, usageErrorf("idem: --store %s: %v", shown, err)
		}
		return nil, nil, fmt.Errorf("idem: --store %s: %w", shown, err)
	}
	return s, s.Close, nil
}

// migratePostgres creates or upgrades the records table.
func migratePostgres(ctx context.Context, pool *pgxpool.Pool, table string) error {
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pgstore.Migrate(mctx, pool, table); err != nil {
		return fmt.Errorf("idem: migrate: %w", err)
	}
	return nil
}

// openDynamo opens the DynamoDB store of rawURL. With migrate set it
// creates the table (or checks and completes an existing one); otherwise
// it checks the table, which also shows that DynamoDB answers.
func openDynamo(ctx context.Context, rawURL string, migrate bool) (storage.Store, func() error, error) {
	u, err := dynamostore.ParseURL(rawURL)
	if err != nil {
		return nil, nil, usageErrorf("idem: --store %s: %v", redactURL(rawURL), err)
	}
	client, err := u.NewClient(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("idem: --store %s: %w", redactURL(rawURL), err)
	}
	s, err := dynamostore.New(client, dynamostore.Config{Table: u.Table})
	if err != nil {
		return nil, nil, usageErrorf("idem: --store %s: %v", redactURL(rawURL), err)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute) // a new table takes seconds on AWS
	defer cancel()
	if migrate {
		err = dynamostore.CreateTable(tctx, client, u.Table)
	} else {
		err = dynamostore.CheckTable(tctx, client, u.Table)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idem: --store %s: %w", redactURL(rawURL), err)
	}
	return s, func() error { return nil }, nil
}

// migrateDynamo is idem migrate for a dynamodb:// store: it creates the
// table, or checks an existing one and enables its TTL.
func migrateDynamo(ctx context.Context, raw string, stdout io.Writer) error {
	u, err := dynamostore.ParseURL(raw)
	if err != nil {
		return usageErrorf("idem: migrate: --store %s: %v", redactURL(raw), err)
	}
	if _, _, err := openDynamo(ctx, raw, true); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "idem migrate: %s is up to date\n", u.Table)
	return nil
}

// go-redis logs every failed dial by itself, to stderr; the command reports
// the error the call returns instead, once, with the store's URL.
func init() { redis.SetLogger(discardRedisLog{}) }

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
