package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem/storage"
)

// translate turns an error of pgx into the error an operation returns,
// prefixed "pgstore: op: ":
//
//   - the server unreachable, the connection lost, the pool closed or
//     exhausted until the context's deadline, a timeout, a server shutting
//     down or out of connections, a lock or statement timeout, a standby
//     refusing writes: wrapped with storage.ErrStoreUnavailable, and the cause;
//   - a data exception (SQLSTATE class 22: a value out of a column's
//     range, bytes the server cannot take) refuses this call alone: wrapped
//     with storage.ErrRefused;
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
			return fmt.Errorf("pgstore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
		case pgerrcode.IsDataException(pgErr.Code):
			return fmt.Errorf("pgstore: %s: %w: %w", op, storage.ErrRefused, err)
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
	return fmt.Errorf("pgstore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
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

func isValueTooLarge(err error) bool {
	_, ok := errors.AsType[*storage.ValueTooLargeError](err)
	return ok
}
