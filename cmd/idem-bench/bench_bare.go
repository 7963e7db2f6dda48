package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/storeurl"
)

// A bare row is the limit a store's row is measured against: the same
// handler behind a middleware that makes the two writes any idempotency
// check over that server must make per new key, with the same client
// library, pool and server, and nothing else: a claim (SET NX PX; an
// INSERT) before the handler and the outcome (SET; an UPDATE of the row)
// after it, before the response goes out. What the store's row costs
// beyond its bare row is idem's; what the bare row costs beyond the
// baseline is the server's round trips and commits on this machine.

// bareStore makes the bare writes of one server.
type bareStore interface {
	claim(ctx context.Context, key string, token int64) error
	complete(ctx context.Context, key string, token int64, result []byte) error
	close() error
}

// openBare returns the bare store for the store URL raw (already given a
// pool size), or nil for a store without one (mem://: no server, so no
// limit to show).
func openBare(ctx context.Context, raw string, runID int64) (bareStore, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil // openStore has refused it already
	}
	shown := storeurl.Redact(u.String())
	switch u.Scheme {
	case "redis", "rediss":
		dropParam(u, "prefix")
		opts, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, usageErrorf("idem-bench: --store %s: %v", shown, err)
		}
		return &bareRedis{c: redis.NewClient(opts), prefix: fmt.Sprintf("idem-bench-bare:%d:", runID)}, nil
	case "postgres", "postgresql":
		dropParam(u, "table")
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			return nil, fmt.Errorf("idem-bench: --store %s: %w", shown, err)
		}
		b := &barePostgres{pool: pool, table: pgx.Identifier{fmt.Sprintf("idem_bench_bare_%d", runID)}.Sanitize()}
		// A key, a token, a result and an expiry, keyed as the records
		// table is: a logged table, so each write waits for its commit as
		// the store's do.
		_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+b.table+` (key bytea PRIMARY KEY, token bigint NOT NULL,
			result bytea, expires_at timestamptz NOT NULL)`)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("idem-bench: --store %s: bare table: %w", shown, err)
		}
		return b, nil
	}
	return nil, nil
}

type bareRedis struct {
	c      *redis.Client
	prefix string
}

func (b *bareRedis) claim(ctx context.Context, key string, token int64) error {
	ok, err := b.c.SetNX(ctx, b.prefix+key, token, benchRetention).Result()
	if err == nil && !ok {
		err = errors.New("bare claim: the key is taken")
	}
	return err
}

func (b *bareRedis) complete(ctx context.Context, key string, _ int64, result []byte) error {
	return b.c.Set(ctx, b.prefix+key, result, benchRetention).Err()
}

func (b *bareRedis) close() error { return b.c.Close() }

type barePostgres struct {
	pool  *pgxpool.Pool
	table string
}

func (b *barePostgres) claim(ctx context.Context, key string, token int64) error {
	tag, err := b.pool.Exec(ctx, `INSERT INTO `+b.table+` (key, token, expires_at) VALUES ($1, $2, now() + $3::interval)
		ON CONFLICT (key) DO NOTHING`, []byte(key), token, benchRetention)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("bare claim: the key is taken")
	}
	return err
}

func (b *barePostgres) complete(ctx context.Context, key string, token int64, result []byte) error {
	_, err := b.pool.Exec(ctx, `UPDATE `+b.table+` SET result = $3, expires_at = now() + $4::interval
		WHERE key = $1 AND token = $2`, []byte(key), token, result, benchRetention)
	return err
}

func (b *barePostgres) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.pool.Exec(ctx, `DROP TABLE IF EXISTS `+b.table)
	b.pool.Close()
	return err
}

// bareMiddleware wraps h with the bare writes of s: claim the request's
// key, run h into a buffer, store the body, then send the response. Keys
// are namespaced per round, as the store rows' are.
func bareMiddleware(s bareStore, namespace string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := namespace + "/" + r.Header.Get(idemhttp.DefaultHeader)
		token := rand.Int64()
		if err := s.claim(r.Context(), key, token); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := s.complete(context.WithoutCancel(r.Context()), key, token, rec.Body.Bytes()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}
