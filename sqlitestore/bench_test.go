package sqlitestore_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/sqlitestore"
)

// BenchmarkDo puts idem's Guard.Do on a Store beside the least the same
// work needs from SQLite, on the same file, in one run:
//
//   - new: Do of a new key (its claim, the operation, its outcome) beside
//     a bare INSERT … ON CONFLICT DO NOTHING of the key's row and an
//     UPDATE storing its value, two statements of their own (two commits,
//     as Do's claim and outcome are);
//   - duplicate: Do of a key with a stored outcome beside a bare SELECT of
//     its value.
//
// The bare statements run on a table of the records table's shape in the
// Store's database (WAL, synchronous FULL). Run with
//
//	go test -run '^$' -bench BenchmarkDo -count 5 ./sqlitestore
func BenchmarkDo(b *testing.B) {
	for _, sync := range []struct {
		name string
		s    sqlitestore.Synchronous
	}{{"full", sqlitestore.SyncFull}, {"normal", sqlitestore.SyncNormal}} {
		s, _ := newStore(b, sqlitestore.Config{Synchronous: sync.s})
		ctx := context.Background()
		if err := sqlitestore.Migrate(ctx, s.DB(), "bare"); err != nil {
			b.Fatal(err)
		}
		g := idemtest.Guard(b, s, idem.Config{Namespace: "bench"})
		payload := bytes.Repeat([]byte("p"), 70)
		value := bytes.Repeat([]byte("v"), 64)
		fp := idem.SHA256Fingerprint(nil, payload)
		fn := func(context.Context) ([]byte, error) { return value, nil }
		const bareInsert = `INSERT INTO bare (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
VALUES (?1, 1, ?2, 1, ?3, unixepoch('subsec') * 1000000 + 30000000, 86400000000, NULL, unixepoch('subsec') * 1000000 + 86430000000)
ON CONFLICT (key) DO NOTHING`
		const bareUpdate = `UPDATE bare SET status = 2, result = ?3, lease_until = NULL, expires_at = unixepoch('subsec') * 1000000 + 86400000000
WHERE key = ?1 AND token = ?2`
		const bareRead = `SELECT result FROM bare WHERE key = ?1`
		run := 0
		key := func(i int) string { return strconv.Itoa(run) + "-" + strconv.Itoa(i) }

		b.Run("sync="+sync.name+"/new/idem", func(b *testing.B) {
			run++
			for i := 0; b.Loop(); i++ {
				if _, err := g.Do(ctx, key(i), payload, fn); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("sync="+sync.name+"/new/bare", func(b *testing.B) {
			run++
			for i := 0; b.Loop(); i++ {
				k := []byte(key(i))
				if _, err := s.DB().ExecContext(ctx, bareInsert, k, int64(i+1), fp); err != nil {
					b.Fatal(err)
				}
				if _, err := s.DB().ExecContext(ctx, bareUpdate, k, int64(i+1), value); err != nil {
					b.Fatal(err)
				}
			}
		})
		// Duplicates: keys whose outcome is stored, in both tables.
		const dups = 1000
		dupKey := func(i int) string { return "dup-" + strconv.Itoa(i%dups) }
		for i := range dups {
			if _, err := g.Do(ctx, dupKey(i), payload, fn); err != nil {
				b.Fatal(err)
			}
			if _, err := s.DB().ExecContext(ctx, bareInsert, []byte(dupKey(i)), int64(i+1), fp); err != nil {
				b.Fatal(err)
			}
			if _, err := s.DB().ExecContext(ctx, bareUpdate, []byte(dupKey(i)), int64(i+1), value); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("sync="+sync.name+"/duplicate/idem", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if res, err := g.Do(ctx, dupKey(i), payload, fn); err != nil || !res.Replayed {
					b.Fatal(res.Replayed, err)
				}
			}
		})
		b.Run("sync="+sync.name+"/duplicate/bare", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				var v []byte
				if err := s.DB().QueryRowContext(ctx, bareRead, []byte(dupKey(i))).Scan(&v); err != nil || len(v) != len(value) {
					b.Fatal(err)
				}
			}
		})
	}
}
