// Package pgstore keeps idem's idempotency records in PostgreSQL, with pgx
// v5, in two modes: a [Store] for the Guard, and [TxGuard], which commits an
// operation's writes and its record in one transaction.
//
//	pool, err := pgxpool.New(ctx, "postgres://…")
//	err = pgstore.Migrate(ctx, pool, pgstore.DefaultTable) // once, or `idem migrate`
//
//	// Side effects elsewhere (a payment provider): lease and token.
//	store, err := pgstore.New(pool, pgstore.Config{})
//	guard, err := idem.New(store, idem.Config{Namespace: "charges"})
//	res, err := guard.Do(ctx, key, payload, charge)
//
//	// Side effects in this database: exactly once, no window.
//	txg, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "orders"}, pgstore.TxConfig{})
//	res, err = txg.Do(ctx, key, payload, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		_, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, $2)", id, amount)
//		return []byte(id), err // committed with the record, or rolled back with it
//	})
//
// The plain mode is a [storage.Store] for the Guard: [New] over a pool, a
// connection or a transaction ([DB]). Each transition of the state machine
// is one SQL statement: Claim reads the key's row and, in the same
// statement, inserts a new key's record or takes over one whose lease
// ended (INSERT … ON CONFLICT (key) DO UPDATE … WHERE … RETURNING), one
// round trip; a claim that finds the key taken (Busy, Duplicate,
// ErrKeyReused) is answered from the read, and writes and locks nothing:
// a replay is a read. Complete, Fail, Release and
// Extend are single UPDATEs fenced by the claim's token. Time is the
// server's; tokens come from a sequence and are never reused (ClaimBatch
// draws 64 random bits instead: unique but for a 2⁻⁶⁴ chance). The plain
// mode guards side effects outside the database by lease and token, as
// every idem store does: a holder that crashes after its side effect and
// before Complete is taken over when its lease ends, and the effect may
// happen again unless it is fenced with the token.
//
// The transactional mode, [TxGuard], closes that window for effects in the
// same database: the claim, the operation's writes and its outcome commit
// in one transaction, or nothing does. A duplicate waits on the record's
// row lock and then reads the committed outcome. [TxGuard.DoTx] does the
// same inside a transaction of the caller's, so a consumer's offset or an
// outbox message commits along.
//
// [Migrate] creates the table (keys are bytea: any bytes, NUL included),
// its expiry index and token sequence; [Store.Reap] and [Reaper] delete
// expired records. Errors are translated at the edge: an unreachable
// server, a lost connection, an exhausted pool or a timeout wrap
// storage.ErrStoreUnavailable.
package pgstore
