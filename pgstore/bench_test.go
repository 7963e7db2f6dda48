package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// The benchmarks put the store beside bare pgx doing the least the same
// work needs, on the same server, tables of the same shape and the same
// number of goroutines and connections. Run them with
//
//	go test -run '^$' -bench . -benchtime 5s
//
// Each reports keys/s (or ops/s). idem-bench store (cmd/idem-bench) runs the
// same cases in interleaved rounds and prints the ratios.

var benchGoroutines = []int{1, 16, 64}

// runParallel calls op(i) for i in [0, b.N) from g goroutines.
func runParallel(b *testing.B, g int, op func(i int) error) {
	b.ResetTimer()
	testenv.Spread(b, b.N, g, op)
	b.StopTimer()
}

func report(b *testing.B, perOp int, unit string) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), unit)
}

// benchEnv is a schema with the store's table and a bare table of the same
// shape, over a pool of g connections per benchmark.
type benchEnv struct {
	*env
	bare   string // the bare table's quoted name
	prefix string // keys of this run
}

func newBenchEnv(b *testing.B) *benchEnv {
	e := newEnv(b, 4)
	bare := e.schema + ".bare"
	if err := pgstore.Migrate(context.Background(), e.pool, bare); err != nil {
		b.Fatal(err)
	}
	var r [4]byte
	rand.Read(r[:])
	return &benchEnv{env: e, bare: pgx.Identifier{e.schema, "bare"}.Sanitize(), prefix: hex.EncodeToString(r[:])}
}

// pool returns a pool of g connections, closed by done.
func (e *benchEnv) pool(b *testing.B, g int) (pool *pgxpool.Pool, done func()) {
	pool = newPool(b, int32(g))
	return pool, pool.Close
}

// store returns the store over a pool of g connections, and the pool,
// closed by done.
func (e *benchEnv) store(b *testing.B, g int) (s *pgstore.Store, pool *pgxpool.Pool, done func()) {
	pool, done = e.pool(b, g)
	s, err := pgstore.New(pool, pgstore.Config{Table: e.table})
	if err != nil {
		b.Fatal(err)
	}
	return s, pool, done
}

func (e *benchEnv) key(run string, i int) string {
	return fmt.Sprintf("%s-%s-%d", e.prefix, run, i)
}

var (
	benchFingerprint = idem.SHA256Fingerprint(nil, []byte("payload"))
	benchValue       = []byte(`{"status":"charged","id":"ch_3MmlLrLkdIwHu7ix0snN0B15"}`)
)

// BenchmarkClaimComplete: Store.Claim then Store.Complete per key, beside
// bare pgx running INSERT … ON CONFLICT DO NOTHING and UPDATE.
func BenchmarkClaimComplete(b *testing.B) {
	e := newBenchEnv(b)
	var run atomic.Int64
	bareClaim := `INSERT INTO ` + e.bare + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1, 1, $2, 1, $3, now() + interval '30 seconds', interval '24 hours', NULL, now() + interval '24 hours 30 seconds')
		ON CONFLICT (key) DO NOTHING`
	bareComplete := `UPDATE ` + e.bare + ` SET status = 2, result = $3, lease_until = NULL, expires_at = now() + interval '24 hours'
		WHERE key = $1 AND token = $2`
	for _, g := range benchGoroutines {
		s, pool, done := e.store(b, g)
		b.Run(fmt.Sprintf("store/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("s", run.Add(1))
			runParallel(b, g, func(i int) error {
				ctx := context.Background()
				key := e.key(r, i)
				c, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: benchFingerprint, Lease: 30 * time.Second, Retention: 24 * time.Hour})
				if err != nil {
					return err
				}
				if c.Outcome != storage.Acquired {
					return fmt.Errorf("claim %s: %v", key, c.Outcome)
				}
				return s.Complete(ctx, key, c.Token, benchValue, 24*time.Hour)
			})
			report(b, 1, "keys/s")
		})
		b.Run(fmt.Sprintf("bare/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("b", run.Add(1))
			runParallel(b, g, func(i int) error {
				ctx := context.Background()
				key := []byte(e.key(r, i))
				if _, err := pool.Exec(ctx, bareClaim, key, int64(i+1), benchFingerprint); err != nil {
					return err
				}
				_, err := pool.Exec(ctx, bareComplete, key, int64(i+1), benchValue)
				return err
			})
			report(b, 1, "keys/s")
		})
		done()
	}
}

// BenchmarkClaimBatch: ClaimBatch of 100 new keys, beside a bare insert of
// the same 100 rows from unnest arrays.
func BenchmarkClaimBatch(b *testing.B) {
	const size = 100
	e := newBenchEnv(b)
	var run atomic.Int64
	bareInsert := `INSERT INTO ` + e.bare + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		SELECT k, 1, t, 1, f, now() + interval '30 seconds', interval '24 hours', NULL, now() + interval '24 hours 30 seconds'
		FROM unnest($1::bytea[], $2::bigint[], $3::bytea[]) AS u(k, t, f)
		ON CONFLICT (key) DO NOTHING`
	for _, g := range []int{1, 16} {
		s, pool, done := e.store(b, g)
		b.Run(fmt.Sprintf("store/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("s", run.Add(1))
			runParallel(b, g, func(i int) error {
				args := make([]storage.ClaimArgs, size)
				for j := range args {
					args[j] = storage.ClaimArgs{Key: e.key(r, i*size+j), Fingerprint: benchFingerprint, Lease: 30 * time.Second, Retention: 24 * time.Hour}
				}
				got, err := s.ClaimBatch(context.Background(), args)
				if err == nil && got[size-1].Outcome != storage.Acquired {
					err = fmt.Errorf("ClaimBatch: %v", got[size-1].Outcome)
				}
				return err
			})
			report(b, size, "keys/s")
		})
		b.Run(fmt.Sprintf("bare/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("b", run.Add(1))
			runParallel(b, g, func(i int) error {
				keys, tokens, fps := make([][]byte, size), make([]int64, size), make([][]byte, size)
				for j := range keys {
					keys[j], tokens[j], fps[j] = []byte(e.key(r, i*size+j)), int64(i*size+j+1), benchFingerprint
				}
				_, err := pool.Exec(context.Background(), bareInsert, keys, tokens, fps)
				return err
			})
			report(b, size, "keys/s")
		})
		done()
	}
}

// BenchmarkTxDo: TxGuard.Do of one ledger insert per key, beside a bare
// transaction making the same insert.
func BenchmarkTxDo(b *testing.B) {
	e := newBenchEnv(b)
	ledger := pgx.Identifier{e.schema, "ledger"}.Sanitize()
	if _, err := e.env.pool.Exec(context.Background(), "CREATE TABLE "+ledger+" (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	insert := "INSERT INTO " + ledger + " (key, amount) VALUES ($1, 10)"
	var run atomic.Int64
	for _, g := range []int{1, 16} {
		pool, done := e.pool(b, g)
		tg, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "bench"}, pgstore.TxConfig{Table: e.table})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("store/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("s", run.Add(1))
			runParallel(b, g, func(i int) error {
				key := e.key(r, i)
				res, err := tg.Do(context.Background(), key, benchValue, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
					_, err := tx.Exec(ctx, insert, key)
					return benchValue, err
				})
				if err == nil && res.Replayed {
					err = fmt.Errorf("Do %s: replayed", key)
				}
				return err
			})
			report(b, 1, "ops/s")
		})
		b.Run(fmt.Sprintf("bare/g=%d", g), func(b *testing.B) {
			r := fmt.Sprint("b", run.Add(1))
			runParallel(b, g, func(i int) error {
				key := e.key(r, i)
				return pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
					_, err := tx.Exec(context.Background(), insert, key)
					return err
				})
			})
			report(b, 1, "ops/s")
		})
		done()
	}
}
