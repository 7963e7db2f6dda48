package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgo/idem/storage"
)

// translate turns an error of the driver into the error an operation
// returns, prefixed "sqlitestore: op: ":
//
//   - the database locked past the busy timeout (SQLITE_BUSY,
//     SQLITE_LOCKED), an I/O error, a full disk, a file that cannot be
//     opened or written, the database closed: wrapped with
//     storage.ErrStoreUnavailable, and the cause;
//   - a value too big for SQLite or of the wrong type for its column
//     (SQLITE_TOOBIG, SQLITE_MISMATCH) refuses this call alone: wrapped
//     with storage.ErrRefused;
//   - the caller's context cancelled: its error, wrapped;
//   - any other SQL error (a missing table, a corrupt file): wrapped as
//     is, naming the operation (and Migrate for a missing table).
//
// The cause stays in the chain, so errors.As finds a *sqlite.Error.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return fmt.Errorf("sqlitestore: %s: %w", op, context.Cause(ctx))
	}
	if sqlErr, ok := errors.AsType[*sqlite.Error](err); ok {
		switch code := sqlErr.Code() & 0xff; {
		case unavailableCode(code):
			return fmt.Errorf("sqlitestore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
		case code == sqlite3.SQLITE_TOOBIG, code == sqlite3.SQLITE_MISMATCH:
			return fmt.Errorf("sqlitestore: %s: %w: %w", op, storage.ErrRefused, err)
		case isNoTable(err):
			return fmt.Errorf("sqlitestore: %s: %w: %w", op, errNoTable, err)
		}
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	// Everything else failed around SQLite: a closed database, a
	// deadline, a scan into columns the table does not have.
	if isNoTable(err) {
		return fmt.Errorf("sqlitestore: %s: %w: %w", op, errNoTable, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
}

// unavailableCode reports whether a primary result code says the database
// cannot serve the request now, rather than that the request is wrong.
func unavailableCode(code int) bool {
	switch code {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT,
		sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOLFS:
		return true
	}
	return false
}

// isBusy reports whether err is SQLite's answer to a lock it could not
// take in time.
func isBusy(err error) bool {
	sqlErr, ok := errors.AsType[*sqlite.Error](err)
	return ok && (sqlErr.Code()&0xff == sqlite3.SQLITE_BUSY || sqlErr.Code()&0xff == sqlite3.SQLITE_LOCKED)
}
