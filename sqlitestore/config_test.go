package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
)

func TestOpenValidates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.db")
	for field, cfg := range map[string]sqlitestore.Config{
		"Config.Table":        {Table: "a b"},
		"Config.MaxValueSize": {MaxValueSize: sqlitestore.MaxValueSizeLimit + 1},
		"Config.BusyTimeout":  {BusyTimeout: time.Microsecond},
		"Config.Synchronous":  {Synchronous: 7},
		"Config.MaxOpenConns": {MaxOpenConns: -1},
	} {
		if _, err := sqlitestore.Open(testCtx(t), ok, cfg); err == nil || !strings.HasPrefix(err.Error(), "sqlitestore: "+field) {
			t.Errorf("Open with a bad %s: %v, want an error naming it", field, err)
		}
	}
	for _, path := range []string{"", ":memory:", "file:x.db", filepath.Join(dir, "a?b.db"), filepath.Join(dir, "missing", "x.db")} {
		if s, err := sqlitestore.Open(testCtx(t), path, sqlitestore.Config{}); err == nil {
			s.Close()
			t.Errorf("Open(%q): no error", path)
		}
	}
}

// The defaults are the safe ones: WAL, synchronous FULL, a busy timeout.
func TestOpenSettings(t *testing.T) {
	t.Parallel()
	for sync, want := range map[sqlitestore.Synchronous]int{sqlitestore.SyncFull: 2, sqlitestore.SyncNormal: 1} {
		s, _ := newStore(t, sqlitestore.Config{Synchronous: sync})
		ctx := testCtx(t)
		var mode string
		var synchronous, busy int
		for _, q := range []struct {
			pragma string
			dest   any
		}{{"journal_mode", &mode}, {"synchronous", &synchronous}, {"busy_timeout", &busy}} {
			if err := s.DB().QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.dest); err != nil {
				t.Fatal(err)
			}
		}
		if mode != "wal" || synchronous != want || busy != int(sqlitestore.DefaultBusyTimeout.Milliseconds()) {
			t.Errorf("Synchronous %d: journal_mode %q, synchronous %d, busy_timeout %d; want wal, %d, %d",
				sync, mode, synchronous, busy, want, sqlitestore.DefaultBusyTimeout.Milliseconds())
		}
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 {
		if err := sqlitestore.Migrate(testCtx(t), db, "user"); err != nil { // a reserved word: the name is quoted
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := sqlitestore.Migrate(testCtx(t), db, "1t"); err == nil {
		t.Fatal("Migrate with a bad name: no error")
	}
	s := openStore(t, path, sqlitestore.Config{Table: "user"})
	if c, err := s.Claim(testCtx(t), claimArgs("k", "fp")); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim on the migrated table: %v %v", c.Outcome, err)
	}
	// A table dropped under the Store: the error says to migrate, and is
	// not a store outage.
	if _, err := s.DB().ExecContext(testCtx(t), `DROP TABLE "user"`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(testCtx(t), claimArgs("k2", "fp")); err == nil || !strings.Contains(err.Error(), "sqlitestore.Migrate") || errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Claim on a missing table: %v, want an error that names Migrate and is not ErrStoreUnavailable", err)
	}
}

func claimArgs(key, fp string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: []byte(fp), Lease: time.Minute, Retention: time.Hour}
}

func TestValueCapOnWrite(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, sqlitestore.Config{MaxValueSize: 16})
	idemtest.RunValueCapOnWrite(t, s)
}

// A record a Store with a larger limit stored is refused by Claim,
// ClaimBatch and Get with a *storage.ValueTooLargeError naming the key and size.
func TestStoredValueOverTheCapIsRefusedOnRead(t *testing.T) {
	t.Parallel()
	writer, path := newStore(t, sqlitestore.Config{})
	reader := openStore(t, path, sqlitestore.Config{MaxValueSize: 1024})
	idemtest.RunStoredValueOverLimit(t, writer, reader, func(err error, key string, size int) bool {
		tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err)
		return ok && tooLarge.Stored && tooLarge.Key == key && tooLarge.Size == size && tooLarge.Max == 1024
	})
}

// clock is a Config.Now the test moves.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

// Reap deletes the expired records only, in batches, and a claim of an
// expired key starts afresh.
func TestReapDeletesOnlyExpired(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s, _ := newStore(t, sqlitestore.Config{Now: clk.Now})
	ctx := testCtx(t)
	short := func(k string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: k, Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Minute}
	}
	for i := range 25 {
		k := "old" + string(rune('a'+i))
		c, err := s.Claim(ctx, short(k))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Complete(ctx, k, c.Token, []byte("v"), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Advance(2 * time.Minute)
	if _, err := s.Claim(ctx, claimArgs("young", "fp")); err != nil {
		t.Fatal(err)
	}
	n, err := s.Reap(ctx, 10)
	if err != nil || n != 25 {
		t.Fatalf("Reap: %d, %v; want the 25 expired records", n, err)
	}
	var rows int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+s.Table()).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows left (%v), want the young one", rows, err)
	}
	if _, err := s.Get(ctx, "young"); err != nil {
		t.Fatalf("the young record: %v", err)
	}
	// An expired record that was not reaped yet is absent to a claim.
	c, err := s.Claim(ctx, short("again"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	c2, err := s.Claim(ctx, short("again"))
	if err != nil || c2.Outcome != storage.Acquired || c2.Record.Attempt != 1 || c2.Token == c.Token {
		t.Fatalf("claim of an expired key: %v attempt %d, %v; want a new record", c2.Outcome, c2.Record.Attempt, err)
	}
}

// A write that meets the database locked by another process (here
// another Store on the file, in a BEGIN IMMEDIATE transaction) waits at
// most BusyTimeout, then fails with ErrStoreUnavailable instead of
// hanging; a TxGuard's claim gets ErrInProgress. Reads, duplicates among
// them, are answered meanwhile (WAL), and writes go through once the lock
// is given back.
func TestBusyDatabase(t *testing.T) {
	t.Parallel()
	const busy = 300 * time.Millisecond
	s, path := newStore(t, sqlitestore.Config{BusyTimeout: busy})
	ctx := testCtx(t)
	done, err := s.Claim(ctx, claimArgs("done", "fp"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", done.Token, []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, claimArgs("held", "fp"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := sqlitestore.NewTxGuard(s, idem.Config{}, sqlitestore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}

	other := openStore(t, path, sqlitestore.Config{})
	tx, err := other.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for op, write := range map[string]func() error{
		"Claim":    func() error { _, err := s.Claim(ctx, claimArgs("new", "fp")); return err },
		"Complete": func() error { return s.Complete(ctx, "held", held.Token, []byte("v"), time.Hour) },
		"TxGuard.Do": func() error {
			_, err := g.Do(ctx, "tx", nil, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil })
			return err
		},
	} {
		want := idem.ErrStoreUnavailable
		if op == "TxGuard.Do" {
			want = idem.ErrInProgress
		}
		start := time.Now()
		err := write()
		if waited := time.Since(start); !errors.Is(err, want) || waited < busy || waited > 20*time.Second {
			t.Errorf("%s on a locked database: %v after %v; want %v after the busy timeout %v", op, err, waited, want, busy)
		}
	}
	if c, err := s.Claim(ctx, claimArgs("done", "fp")); err != nil || c.Outcome != storage.Duplicate {
		t.Errorf("a duplicate while the database is locked: %v %v, want it answered", c.Outcome, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, claimArgs("new", "fp")); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim once the lock is free: %v %v", c.Outcome, err)
	}
	if err := s.Complete(ctx, "held", held.Token, []byte("v"), time.Hour); err != nil {
		t.Fatalf("Complete once the lock is free: %v", err)
	}
}
