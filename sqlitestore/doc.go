// Package sqlitestore keeps idem's idempotency records in a SQLite
// database file: one process (or a few on one machine), durable across
// crashes and restarts, no server to run, no cgo (modernc.org/sqlite, a
// pure-Go SQLite). Like pgstore it has two modes: a [Store] for the Guard,
// and [TxGuard], which commits an operation's writes and its record in
// one transaction.
//
//	store, err := sqlitestore.Open(ctx, "idem.db", sqlitestore.Config{}) // creates the file and table
//	defer store.Close()
//
//	// Side effects elsewhere (a payment provider): lease and token.
//	guard, err := idem.New(store, idem.Config{Namespace: "charges"})
//	res, err := guard.Do(ctx, key, payload, charge)
//
//	// Side effects in this database: exactly once, no window.
//	txg, err := sqlitestore.NewTxGuard(store, idem.Config{Namespace: "orders"}, sqlitestore.TxConfig{})
//	res, err = txg.Do(ctx, key, payload, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?, ?)", id, amount)
//		return []byte(id), err // committed with the record, or rolled back with it
//	})
//
// [Open] sets the file up safely by default: WAL mode (reads never wait
// for a write), synchronous FULL (a stored outcome survives a crash of the
// process and of the machine; Config.Synchronous says what NORMAL risks),
// a busy timeout (a write that cannot have SQLite's write lock in time
// fails with storage.ErrStoreUnavailable rather than hanging), and
// transactions that begin IMMEDIATE. It creates the records table
// ([Migrate]): keys are BLOBs, any bytes compared byte for byte; times are
// microseconds of the Store's clock (Config.Now).
//
// A claim reads the key's record first: a duplicate, a busy key or
// another fingerprint is answered from that read and writes nothing. A new
// key, a takeover or the attempt cap is one short BEGIN IMMEDIATE
// transaction. Complete, Fail, Release and Extend are single UPDATEs
// fenced by the claim's token; tokens are 64 random bits, never 0.
// ClaimBatch and CompleteBatch write in one transaction, one sync to disk
// for the batch. [Store.Reap] deletes expired records.
//
// SQLite lets one connection write at a time. The writes of one Store
// queue in the process; those of other processes on the same file, and
// transactions begun on [Store.DB], wait for SQLite's lock, at most
// Config.BusyTimeout. Several processes on one local file work; a file on
// a network file system (NFS, SMB) does not: SQLite's locks are not
// reliable there, and WAL mode needs memory shared between the processes.
package sqlitestore
