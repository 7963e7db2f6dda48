package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
)

// TestConformancePeeking runs the conformance suite on Stores that always
// and never peek: the peek changes what a claim costs, never what it
// answers. TestConformance runs the default, PeekAuto.
func TestConformancePeeking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 16)
	for name, peek := range map[string]pgstore.Peek{"always": pgstore.PeekAlways, "never": pgstore.PeekNever} {
		s, err := pgstore.New(e.pool, pgstore.Config{Table: e.table, Peek: peek})
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			idemtest.Run(t, func(t *testing.T) storage.Store { return s })
		})
	}
}

func TestConfigPeekIsValidated(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := pgstore.New(e.pool, pgstore.Config{Table: e.table, Peek: pgstore.PeekNever + 1}); err == nil {
		t.Fatal("New with an unknown Peek: no error")
	}
}

// sqlLog is a DB that logs the statements of its Query and QueryRow
// calls.
type sqlLog struct {
	pgstore.DB
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) log(sql string) {
	l.mu.Lock()
	l.sql = append(l.sql, sql)
	l.mu.Unlock()
}

func (l *sqlLog) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	l.log(sql)
	return l.DB.Query(ctx, sql, args...)
}

func (l *sqlLog) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	l.log(sql)
	return l.DB.QueryRow(ctx, sql, args...)
}

// since returns how many statements logged after the first n were peeks,
// and how many were not.
func (l *sqlLog) since(n int, peek string) (peeks, others int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sql[n:] {
		if s == peek {
			peeks++
		} else {
			others++
		}
	}
	return peeks, others
}

func (l *sqlLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sql)
}

// TestPeekAutoFollowsTheWorkload: under PeekAuto a run of duplicates turns
// claims into plain reads, each answered by the read alone, and a run of
// new keys turns them back into single claim statements; both switches
// within a few claims, and every claim answers right throughout.
func TestPeekAutoFollowsTheWorkload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	stmts, err := pgstore.Statements(e.table)
	if err != nil {
		t.Fatal(err)
	}
	peek := stmts["queries.claimPeek"]
	log := &sqlLog{DB: e.pool}
	s, err := pgstore.New(log, pgstore.Config{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	args := func(k string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: k, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute}
	}
	claim := func(k string, want storage.Outcome) storage.Claim {
		t.Helper()
		c, err := s.Claim(ctx, args(k))
		if err != nil || c.Outcome != want {
			t.Fatalf("Claim(%q) = %v, %v; want %v", k, c.Outcome, err, want)
		}
		return c
	}
	newKeys := func(round, n int) {
		t.Helper()
		for i := range n {
			k := fmt.Sprintf("new-%d-%d", round, i)
			c := claim(k, storage.Acquired)
			if err := s.Complete(ctx, k, c.Token, []byte("v"), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	newKeys(0, 10)
	if p, _ := log.since(0, peek); p != 0 {
		t.Fatalf("%d peeks while every claim was a new key, want 0", p)
	}
	for round := 1; round <= 2; round++ {
		// A storm of duplicates: after a few claims, every one is a peek,
		// answered by it alone.
		n := log.len()
		for i := range 100 {
			if c := claim(fmt.Sprintf("new-0-%d", i%10), storage.Duplicate); string(c.Record.Result) != "v" {
				t.Fatalf("replay: %q", c.Record.Result)
			}
		}
		if p, o := log.since(n, peek); p < 80 || o > 20 {
			t.Fatalf("round %d: 100 duplicates sent %d peeks and %d other statements, want ≥ 80 peeks answering alone", round, p, o)
		}
		// New keys again: the peeks stop after at most the balance's
		// width.
		n = log.len()
		newKeys(round, 100)
		if p, o := log.since(n, peek); p > 20 || o != 100 {
			t.Fatalf("round %d: 100 new keys sent %d peeks and %d other statements, want ≤ 20 peeks and 100 claims", round, p, o)
		}
	}
	// A busy key and another fingerprint are answered by the read too.
	held := claim("held", storage.Acquired)
	for range 40 {
		claim("held", storage.Busy)
	}
	n := log.len()
	if c := claim("held", storage.Busy); c.Token != 0 {
		t.Fatalf("a Busy answer carried the holder's token %v", c.Token)
	}
	reused := args("held")
	reused.Fingerprint = []byte("another")
	if _, err := s.Claim(ctx, reused); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("Claim with another fingerprint: %v, want ErrKeyReused", err)
	}
	if p, o := log.since(n, peek); p != 2 || o != 0 {
		t.Fatalf("a busy key and another fingerprint sent %d peeks and %d other statements, want 2 peeks alone", p, o)
	}
	// A takeover after a peek: the peek finds nothing to answer, and the
	// claim statement takes the released lease over.
	if err := s.Release(ctx, "held", held.Token); err != nil {
		t.Fatal(err)
	}
	if c := claim("held", storage.Acquired); c.Record.Attempt != 2 {
		t.Fatalf("takeover after a peek: attempt %d, want 2", c.Record.Attempt)
	}
}

// A claim that takes over a key past its attempt cap is answered by the
// claim that reads first and the full claim, which stores the cap: two
// statements, not the read three times before it.
func TestCappedTakeoverTakesTwoStatements(t *testing.T) {
	e := newEnv(t, 1)
	ctx := testCtx(t)
	log := &sqlLog{DB: e.pool}
	s, err := pgstore.New(log, pgstore.Config{Table: e.table, Peek: pgstore.PeekNever})
	if err != nil {
		t.Fatal(err)
	}
	a := claimArgs("capped", "fp")
	a.MaxAttempts = 1
	if c, err := s.Claim(ctx, a); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("first claim: %v %v", c.Outcome, err)
	}
	if _, err := e.pool.Exec(ctx, "UPDATE "+s.Table()+" SET lease_until = statement_timestamp() - interval '1 second' WHERE key = $1", []byte(a.Key)); err != nil {
		t.Fatal(err)
	}
	n := log.len()
	c, err := s.Claim(ctx, a)
	if err != nil || c.Outcome != storage.Duplicate || c.Record.Status != storage.StatusFailed {
		t.Fatalf("claim past the cap: %v %+v %v, want a Failed duplicate", c.Outcome, c.Record, err)
	}
	if _, others := log.since(n, ""); others != 2 {
		t.Fatalf("the capped takeover sent %d statements, want 2 (the read, then the full claim)", others)
	}
}
