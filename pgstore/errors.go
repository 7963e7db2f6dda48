package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// translate turns an error of pgx into the error an operation returns,
// prefixed "pgstore: op: ":
//
//   - the server unreachable, the connection lost, the pool closed or
//     exhausted until the context's deadline, a timeout, a server shutting
//     down or out of connections, a lock or statement timeout, a standby
//     refusing writes: wrapped with idem.ErrStoreUnavailable, and the cause;
//   - the caller's context cancelled: its error, wrapped;
//   - any other SQL error (a missing table, a permission): wrapped as is,
//     naming the operation (and Migrate for a missing table).
//
// The cause stays in the chain, so errors.As finds a *pgconn.PgError.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	var scanErr pgx.ScanArgError
	switch {
	case errors.As(err, &pgErr):
		switch {
		case unavailableState(pgErr.Code):
			return fmt.Errorf("pgstore: %s: %w: %w", op, idem.ErrStoreUnavailable, err)
		case pgErr.Code == pgerrcode.UndefinedTable:
			return fmt.Errorf("pgstore: %s: the records table is missing (run pgstore.Migrate): %w", op, err)
		}
		return fmt.Errorf("pgstore: %s: %w", op, err)
	case errors.As(err, &scanErr):
		return fmt.Errorf("pgstore: %s: the records table does not have the expected columns (run pgstore.Migrate): %w", op, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	// Everything else failed before or while talking to the server: dial
	// and TLS errors, a closed connection or pool, I/O errors, deadlines.
	return fmt.Errorf("pgstore: %s: %w: %w", op, idem.ErrStoreUnavailable, err)
}

// unavailableState reports whether a SQLSTATE says the server cannot serve
// the request now, rather than that the request is wrong.
func unavailableState(code string) bool {
	switch code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.QueryCanceled,    // statement_timeout
		pgerrcode.LockNotAvailable, // lock_timeout
		pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected,
		pgerrcode.ReadOnlySQLTransaction: // a standby after failover
		return true
	}
	return pgerrcode.IsConnectionException(code) ||
		pgerrcode.IsInsufficientResources(code) || // too many connections, disk full
		pgerrcode.IsSystemError(code) // I/O
}

// ValueTooLargeError is returned for a value (or cause) longer than
// Config.MaxValueSize: by Complete, Fail and CompleteBatch, which then write
// nothing; and by Claim, ClaimBatch (in the entry's Err) and Get for a
// record whose stored result is longer, which they refuse to read (another
// program, or a Store with a larger MaxValueSize, wrote it). The server does
// not send such a result: the statements leave it out.
type ValueTooLargeError struct {
	Size   int    // the value's length in bytes
	Max    int    // Config.MaxValueSize
	Stored bool   // the value is a stored record's, refused on read
	Key    string // the store key of that record (Stored only)
}

func (e *ValueTooLargeError) Error() string {
	if e.Stored {
		return fmt.Sprintf("pgstore: the record of key %q holds a result of %d bytes, larger than Config.MaxValueSize (%d)", e.Key, e.Size, e.Max)
	}
	return fmt.Sprintf("pgstore: value of %d bytes is larger than Config.MaxValueSize (%d)", e.Size, e.Max)
}

// Unwrap returns idem.ErrValueTooLarge, which the Guard and the adapters
// look for: the outcome cannot be kept (or, read back, replayed).
func (e *ValueTooLargeError) Unwrap() error { return idem.ErrValueTooLarge }

func isValueTooLarge(err error) bool {
	_, ok := errors.AsType[*ValueTooLargeError](err)
	return ok
}
