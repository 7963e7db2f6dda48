// Package servers gives the integration tests stores on the real Redis and
// PostgreSQL servers and on dynalite (a DynamoDB-compatible server), each
// isolated so that parallel tests and concurrent test runs never see one
// another's records: a Redis store under a key prefix of its own, a
// PostgreSQL store in a schema of its own, a DynamoDB store in a table of
// its own. All are cleaned up when the test ends.
//
// The servers' addresses come from IDEM_REDIS_ADDR (default
// 127.0.0.1:6379), IDEM_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and
// IDEM_DYNAMODB_URL (default http://127.0.0.1:8000). A server that
// cannot be reached skips the test, or fails it when
// IDEM_REQUIRE_SERVICES=1 (as make test sets it), so a plain go test works
// on a machine without them and CI cannot pass by skipping.
package servers

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
)

// The environment variables that hold the servers' addresses.
const (
	RedisEnv    = "IDEM_REDIS_ADDR"
	PostgresEnv = "IDEM_POSTGRES_URL"
	DynamoDBEnv = "IDEM_DYNAMODB_URL"
	RequireEnv  = "IDEM_REQUIRE_SERVICES"
)

// RedisAddr is the Redis server's host:port, from IDEM_REDIS_ADDR.
func RedisAddr() string { return cmp.Or(os.Getenv(RedisEnv), "127.0.0.1:6379") }

// PostgresURL is the PostgreSQL server's URL, from IDEM_POSTGRES_URL.
func PostgresURL() string {
	return cmp.Or(os.Getenv(PostgresEnv), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// connectTimeout bounds dialling a server and its first ping.
const connectTimeout = 5 * time.Second

// cleanupTimeout bounds setting up a test's schema, deleting its keys or
// dropping its schema.
const cleanupTimeout = 30 * time.Second

// unreachable skips t, or fails it under IDEM_REQUIRE_SERVICES=1.
func unreachable(t testing.TB, what, env, addr string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s at %s (%s) is unreachable: %v", what, addr, env, err)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
	}
	t.Skipf("%s; skipping (set %s to its address, or %s=1 to fail instead)", msg, env, RequireEnv)
}

// random returns n random bytes in lowercase hex.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Redis returns a store on the Redis server under a random key prefix
// "idemtest:<random>:". When t ends, the keys under the prefix are deleted
// and the client is closed.
func Redis(t testing.TB) *redisstore.Store {
	t.Helper()
	addr := RedisAddr()
	if err := pingRedis(addr); err != nil {
		unreachable(t, "Redis", RedisEnv, addr, err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })

	prefix := "idemtest:" + random(6) + ":"
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() {
		if err := deleteKeys(c, prefix); err != nil {
			t.Errorf("deleting the test's Redis keys %s*: %v", prefix, err)
		}
	})
	return s
}

// pingRedis pings the server at addr once, without go-redis's retries, so
// an unreachable server is reported at once.
func pingRedis(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// deleteKeys deletes the keys under prefix.
func deleteKeys(c *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := c.Unlink(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// SchemaPrefix starts the name of every schema Postgres creates:
// idemtest_<unix seconds>_<random>, as pgstore's own tests name theirs, so
// that either one drops the other's leftovers.
const SchemaPrefix = "idemtest_"

// staleAfter is the age from which a test schema is taken for one a dead
// run left behind.
const staleAfter = time.Hour

var dropStale sync.Once

// Postgres returns a store on the PostgreSQL server, in a new schema of
// its own named idemtest_<unix seconds>_<random>, with its records table
// <schema>.idem_records created by pgstore.Migrate. When t ends, the
// schema is dropped and the pool closed. The first call of a test binary
// also drops the test schemas older than an hour, left by runs that died.
func Postgres(t testing.TB) *pgstore.Store {
	t.Helper()
	url := PostgresURL()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("%s %q: %v", PostgresEnv, url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		unreachable(t, "PostgreSQL", PostgresEnv, redactedURL(cfg), err)
	}
	t.Cleanup(pool.Close)
	dropStale.Do(func() { dropStaleSchemas(t, pool) })

	ctx, cancel = context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	schema := fmt.Sprintf("%s%d_%s", SchemaPrefix, time.Now().Unix(), random(6))
	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			t.Errorf("dropping the test's schema %s: %v", schema, err)
		}
	})
	table := schema + ".idem_records"
	if err := pgstore.Migrate(ctx, pool, table); err != nil {
		t.Fatalf("pgstore.Migrate(%s): %v", table, err)
	}
	s, err := pgstore.New(pool, pgstore.Config{Table: table})
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	return s
}

// redactedURL names the server of cfg without its password.
func redactedURL(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

// dropStaleSchemas drops the test schemas created more than staleAfter
// ago. A failure is only logged: it leaves garbage, not a wrong result.
func dropStaleSchemas(t testing.TB, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, SchemaPrefix)
	if err != nil {
		t.Logf("listing stale test schemas: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("listing stale test schemas: %v", err)
		return
	}
	for _, n := range names {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(n, SchemaPrefix), "_")
		sec, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) < staleAfter {
			continue
		}
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("dropping stale test schema %s: %v", n, err)
		}
	}
}

// DynamoDBURL is the DynamoDB-compatible server's endpoint, from
// IDEM_DYNAMODB_URL.
func DynamoDBURL() string { return cmp.Or(os.Getenv(DynamoDBEnv), "http://127.0.0.1:8000") }

// TablePrefix starts the name of every table DynamoDB creates:
// idemtest_<unix seconds>_<random>, as dynamostore's own tests name theirs,
// so that either one deletes the other's leftovers.
const TablePrefix = "idemtest_"

var dropStaleTables sync.Once

// DynamoDB returns a store on the DynamoDB-compatible server, in a new
// table of its own named idemtest_<unix seconds>_<random>, made by
// dynamostore.CreateTable, through a client with static dummy credentials.
// When t ends, the table is deleted and the client's connections closed.
// The first call of a test binary also deletes the test tables older than
// an hour, left by runs that died.
func DynamoDB(t testing.TB) *dynamostore.Store {
	t.Helper()
	endpoint := DynamoDBURL()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections) // runs last: after the table is deleted
	c := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("idemtest", "idemtest", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	tables, err := c.ListTables(ctx, &dynamodb.ListTablesInput{}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		unreachable(t, "A DynamoDB-compatible server", DynamoDBEnv, endpoint, err)
	}
	dropStaleTables.Do(func() {
		for _, name := range tables.TableNames {
			stamp, _, _ := strings.Cut(strings.TrimPrefix(name, TablePrefix), "_")
			sec, err := strconv.ParseInt(stamp, 10, 64)
			if strings.HasPrefix(name, TablePrefix) && err == nil && time.Since(time.Unix(sec, 0)) > staleAfter {
				c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
			}
		}
	})

	ctx, cancel = context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	table := fmt.Sprintf("%s%d_%s", TablePrefix, time.Now().Unix(), random(6))
	if err := dynamostore.CreateTable(ctx, c, table); err != nil {
		t.Fatalf("dynamostore.CreateTable(%s): %v", table, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
			t.Errorf("deleting the test's table %s: %v", table, err)
		}
	})
	s, err := dynamostore.New(c, dynamostore.Config{Table: table})
	if err != nil {
		t.Fatalf("dynamostore.New: %v", err)
	}
	return s
}
