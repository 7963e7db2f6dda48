package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
)

// events records what an Observer sees, as "op:outcome" or "op:error".
type events struct {
	mu  sync.Mutex
	got []string
	on  func(idem.Event)
}

func (ev *events) observe(_ context.Context, e idem.Event) {
	s := e.Op.String()
	switch {
	case e.Op == idem.OpClaim && e.Err == nil:
		s += ":" + e.Outcome.String()
	case e.Err != nil:
		s += ":error"
	}
	if e.Namespace != "payments" || e.Key == "" {
		s += " (namespace " + e.Namespace + ", key " + e.Key + ")"
	}
	ev.mu.Lock()
	ev.got = append(ev.got, s)
	on := ev.on
	ev.mu.Unlock()
	if on != nil {
		on(e)
	}
}

func (ev *events) take() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	got := ev.got
	ev.got = nil
	return got
}

// A TxGuard takes the Guard's idem.Config: its Observer sees every step,
// its Logger the outcomes that did not commit, its ValidateKey every key.
func TestTxGuardTakesTheGuardsConfig(t *testing.T) {
	t.Parallel()
	ev := &events{}
	var log bytes.Buffer
	var logMu sync.Mutex
	errNotUUID := errors.New("not a UUID")
	e := newTxEnv(t, 4, txConf{Config: idem.Config{
		Observer: ev.observe,
		Logger:   slog.New(slog.NewTextHandler(&lockedWriter{w: &log, mu: &logMu}, nil)),
		ValidateKey: func(k string) error {
			if strings.HasPrefix(k, "bad") {
				return errNotUUID
			}
			return nil
		},
	}})
	ctx := testCtx(t)
	for name, g := range txGuards(t, e, txConf{Config: e.g.Config()}) {
		key := "k-" + name
		if _, err := g.Do(ctx, key, nil, e.pay(key)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := ev.take(), []string{"claim:Acquired", "run", "complete"}; !slices.Equal(got, want) {
			t.Errorf("%s, first Do: events %q, want %q", name, got, want)
		}
		if res, err := g.Do(ctx, key, nil, e.pay(key)); err != nil || !res.Replayed {
			t.Fatalf("%s, duplicate: %v, %v", name, res, err)
		}
		if got, want := ev.take(), []string{"claim:Duplicate"}; !slices.Equal(got, want) {
			t.Errorf("%s, duplicate: events %q, want %q", name, got, want)
		}
		retry := "r-" + name
		if _, err := g.Do(ctx, retry, nil, func(context.Context, pgx.Tx) ([]byte, error) { return nil, errors.New("later") }); err == nil {
			t.Fatalf("%s: a retryable error was not returned", name)
		}
		if got, want := ev.take(), []string{"claim:Acquired", "run:error", "release"}; !slices.Equal(got, want) {
			t.Errorf("%s, retryable error: events %q, want %q", name, got, want)
		}
		if _, err := g.Do(ctx, "bad-"+name, nil, e.pay("bad")); !errors.Is(err, idem.ErrInvalidKey) || !errors.Is(err, errNotUUID) {
			t.Errorf("%s: a key ValidateKey refuses: %v, want ErrInvalidKey wrapping its error", name, err)
		}
	}
	if n := e.ledgerRows(t, "bad"); n != 0 {
		t.Errorf("a refused key wrote %d ledger rows", n)
	}

	// An outcome that does not commit is logged: fn deletes its own claim.
	_, err := e.g.Do(ctx, "gone", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, "DELETE FROM "+e.table)
		return nil, err
	})
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("fn deleted its claim: %v, want ErrLeaseLost", err)
	}
	if got := ev.take(); !slices.Contains(got, "complete:error") {
		t.Errorf("events %q, want a failed complete", got)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "the outcome was not stored") || !strings.Contains(log.String(), "key=gone") {
		t.Errorf("the log does not tell the outcome was not stored:\n%s", log.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Scopes separate keys in a TxGuard as in a Guard, and a Guard over the
// same table, namespace and scope replays what the TxGuard committed.
func TestTxGuardScopes(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	alice, err := e.g.DoScoped(ctx, "alice", "k", nil, e.pay("alice"))
	if err != nil {
		t.Fatal(err)
	}
	bob, err := e.g.DoScoped(ctx, "bob", "k", nil, e.pay("bob"))
	if err != nil || bob.Replayed || bytes.Equal(bob.Value, alice.Value) {
		t.Fatalf("bob with alice's key: %q (replayed %v), %v; want a run of his own", bob.Value, bob.Replayed, err)
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.g.DoTxScoped(ctx, tx, "alice", "k", nil, e.pay("alice"))
	if err != nil || !again.Replayed || !bytes.Equal(again.Value, alice.Value) {
		t.Fatalf("DoTxScoped for alice's key: %q (replayed %v), %v; want her value replayed", again.Value, again.Replayed, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(e.store, idem.Config{Namespace: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	res, err := g.DoScoped(ctx, "bob", "k", nil, func(context.Context) ([]byte, error) { return nil, errors.New("ran again") })
	if err != nil || !res.Replayed || !bytes.Equal(res.Value, bob.Value) {
		t.Fatalf("a Guard's DoScoped of bob's key: %q, %v; want the TxGuard's value replayed", res.Value, err)
	}
	if n := e.ledgerRows(t, "alice") + e.ledgerRows(t, "bob"); n != 2 {
		t.Fatalf("%d ledger rows, want 2", n)
	}
}

// With Config.Wait, a TxGuard whose key a plain Guard holds polls until
// that holder's outcome is stored, and replays it.
func TestTxGuardWaitsForALeaseHolder(t *testing.T) {
	t.Parallel()
	busy := make(chan struct{}, 1)
	ev := &events{on: func(e idem.Event) {
		if e.Op == idem.OpClaim && e.Outcome == storage.Busy {
			select {
			case busy <- struct{}{}:
			default:
			}
		}
	}}
	e := newTxEnv(t, 4, txConf{Config: idem.Config{Wait: 30 * time.Second, Observer: ev.observe}})
	ctx := testCtx(t)
	key := storage.StoreKey("payments", "held")
	c, err := e.store.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: idem.SHA256Fingerprint(nil, nil), Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatal(c.Outcome, err)
	}
	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := e.g.Do(ctx, "held", nil, e.pay("held"))
		done <- answer{res, err}
	}()
	select {
	case <-busy:
	case a := <-done:
		t.Fatalf("Do returned %v, %v before the holder finished", a.res, a.err)
	}
	if err := e.store.Complete(ctx, key, c.Token, []byte("the holder's"), time.Hour); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !a.res.Replayed || string(a.res.Value) != "the holder's" {
		t.Fatalf("after the holder completed: %q (replayed %v), %v; want its value replayed", a.res.Value, a.res.Replayed, a.err)
	}
	if n := e.ledgerRows(t, "held"); n != 0 {
		t.Fatalf("%d ledger rows, want none: the holder's outcome stands", n)
	}

	// Without Wait the answer is ErrInProgress at once.
	now, err := pgstore.NewTxGuard(e.pool, idem.Config{Namespace: "payments"}, pgstore.TxConfig{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	c, err = e.store.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey("payments", "held2"), Fingerprint: idem.SHA256Fingerprint(nil, nil), Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatal(c.Outcome, err)
	}
	if _, err := now.Do(ctx, "held2", nil, e.pay("held2")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("Wait 0: %v, want ErrInProgress", err)
	}
}
