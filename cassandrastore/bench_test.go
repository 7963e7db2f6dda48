package cassandrastore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/storage"
)

// The benchmarks compare the store with bare lightweight transactions on
// the same node, through the same session, in the same run: the least a
// Cassandra idempotency check can do. Bare Claim+Complete is an INSERT of
// key and token IF NOT EXISTS, then an UPDATE of the result IF the token
// is still there; a bare replay is the INSERT failing, which returns the
// row with its result. A third side, bare-record, writes the store's
// whole record (every column, the same sizes) with those two bare
// conditions: what the record costs, apart from the store's conditions
// and code. Every side runs at SERIAL and QUORUM, the store's defaults.
// Run them with
//
//	go test -run '^$' -bench . -benchtime 400x -count 5 ./cassandrastore
//
// and compare the sides' keys/s run by run: b.RunParallel runs
// GOMAXPROCS × parallelism goroutines (16 on 2 cores).

// A payment-like key: a 32-byte SHA-256 fingerprint and a 16-byte result.
var (
	benchFP     = sha256.Sum256([]byte("charge 10 EUR to card 4242"))
	benchResult = []byte("charge_012345678")
)

var benchKeys atomic.Int64

func benchKey() string {
	return storage.StoreKey("bench", strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.FormatInt(benchKeys.Add(1), 10))
}

var bareTable sync.Once

// bare returns the session and the bare sides' table, made on first use.
func bare(b *testing.B) (*gocql.Session, string) {
	sess := cassandrastoretest.Session(b)
	table := cassandrastoretest.Keyspace(b) + ".bare"
	bareTable.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sess.Query("CREATE TABLE IF NOT EXISTS " + table + " (k blob PRIMARY KEY, tok bigint, result blob)").ExecContext(ctx); err != nil {
			b.Fatal(err)
		}
		if err := cassandrastore.Migrate(ctx, sess, cassandrastore.Config{Keyspace: cassandrastoretest.Keyspace(b), Table: "bare_record"}, cassandrastore.Replication{}); err != nil {
			b.Fatal(err)
		}
	})
	return sess, table
}

// parallelKeys runs op b.N times on 16 goroutines (8 per core on 2 cores)
// and reports keys/s.
func parallelKeys(b *testing.B, op func() error) {
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

func claimArgs(key string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: benchFP[:], Lease: 30 * time.Second, Retention: time.Hour}
}

func claimComplete(ctx context.Context, s *cassandrastore.Store, key string) error {
	c, err := s.Claim(ctx, claimArgs(key))
	if err != nil {
		return err
	}
	if c.Outcome != storage.Acquired {
		return fmt.Errorf("claim of %q: %v", key, c.Outcome)
	}
	return s.Complete(ctx, key, c.Token, benchResult, time.Hour)
}

func bareClaimComplete(ctx context.Context, sess *gocql.Session, table, key string, tok int64) error {
	applied, err := sess.Query("INSERT INTO "+table+" (k, tok) VALUES (?, ?) IF NOT EXISTS USING TTL 3600", []byte(key), tok).
		SerialConsistency(gocql.Serial).MapScanCASContext(ctx, map[string]any{})
	if err != nil || !applied {
		return fmt.Errorf("bare claim of %q: applied %v, %v", key, applied, err)
	}
	applied, err = sess.Query("UPDATE "+table+" USING TTL 3600 SET result = ? WHERE k = ? IF tok = ?", benchResult, []byte(key), tok).
		SerialConsistency(gocql.Serial).MapScanCASContext(ctx, map[string]any{})
	if err != nil || !applied {
		return fmt.Errorf("bare complete of %q: applied %v, %v", key, applied, err)
	}
	return nil
}

// bareRecordClaimComplete writes the store's record with the bare
// conditions: INSERT of every column IF NOT EXISTS, then UPDATE of every
// column IF the token.
func bareRecordClaimComplete(ctx context.Context, sess *gocql.Session, table, key string, tok int64) error {
	now := time.Now().UnixMilli()
	applied, err := sess.Query("INSERT INTO "+table+" (k, status, tok, attempt, fp, lease_until, expires_at, retention, result)"+
		" VALUES (?, 'in_progress', ?, 1, ?, ?, ?, 3600000, 0x) IF NOT EXISTS USING TTL 3632", []byte(key), tok, benchFP[:], now+30000, now+3630000).
		SerialConsistency(gocql.Serial).MapScanCASContext(ctx, map[string]any{})
	if err != nil || !applied {
		return fmt.Errorf("bare claim of %q: applied %v, %v", key, applied, err)
	}
	applied, err = sess.Query("UPDATE "+table+" USING TTL 3602 SET status = 'completed', tok = ?, attempt = 1, fp = ?, lease_until = 0,"+
		" expires_at = ?, retention = 3600000, result = ? WHERE k = ? IF tok = ?", tok, benchFP[:], now+3600000, benchResult, []byte(key), tok).
		SerialConsistency(gocql.Serial).MapScanCASContext(ctx, map[string]any{})
	if err != nil || !applied {
		return fmt.Errorf("bare complete of %q: applied %v, %v", key, applied, err)
	}
	return nil
}

func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		s := cassandrastoretest.Store(b, cassandrastore.Config{})
		parallelKeys(b, func() error { return claimComplete(ctx, s, benchKey()) })
	})
	b.Run("bare-lwt", func(b *testing.B) {
		sess, table := bare(b)
		parallelKeys(b, func() error { return bareClaimComplete(ctx, sess, table, benchKey(), benchKeys.Add(1)) })
	})
	b.Run("bare-record", func(b *testing.B) {
		sess, table := bare(b)
		table += "_record"
		parallelKeys(b, func() error { return bareRecordClaimComplete(ctx, sess, table, benchKey(), benchKeys.Add(1)) })
	})
}

// BenchmarkClaimReplay claims keys that hold an outcome: the duplicate's
// path, one failed INSERT … IF NOT EXISTS on either side.
func BenchmarkClaimReplay(b *testing.B) {
	ctx := context.Background()
	const keys = 64
	b.Run("store", func(b *testing.B) {
		s := cassandrastoretest.Store(b, cassandrastore.Config{})
		done := make([]string, keys)
		for i := range done {
			done[i] = benchKey()
			if err := claimComplete(ctx, s, done[i]); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		parallelKeys(b, func() error {
			key := done[n.Add(1)%keys]
			c, err := s.Claim(ctx, claimArgs(key))
			if err == nil && c.Outcome != storage.Duplicate {
				err = fmt.Errorf("replay of %q: %v", key, c.Outcome)
			}
			return err
		})
	})
	b.Run("bare-lwt", func(b *testing.B) {
		sess, table := bare(b)
		done := make([]string, keys)
		for i := range done {
			done[i] = benchKey()
			if err := bareClaimComplete(ctx, sess, table, done[i], int64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		parallelKeys(b, func() error {
			key := done[n.Add(1)%keys]
			m := map[string]any{}
			applied, err := sess.Query("INSERT INTO "+table+" (k, tok) VALUES (?, ?) IF NOT EXISTS USING TTL 3600", []byte(key), n.Load()).
				SerialConsistency(gocql.Serial).MapScanCASContext(ctx, m)
			if err == nil && (applied || len(m["result"].([]byte)) == 0) {
				err = fmt.Errorf("bare replay of %q: applied %v, %v", key, applied, m)
			}
			return err
		})
	})
}
