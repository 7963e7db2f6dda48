package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of the package, checked with errors.Is.
var (
	// ErrUnavailable wraps the database errors that say the server cannot
	// serve now (unreachable, connection lost, shutting down, timeouts),
	// as opposed to a statement that is wrong (a missing table). A Relay
	// reconnects after them; after any other it stops.
	ErrUnavailable = errors.New("outbox: database unavailable")

	// ErrClosed is returned by [Relay.Run] after [Relay.Close].
	ErrClosed = errors.New("outbox: relay closed")

	// ErrRunning is returned by [Relay.Run] while another Run of the same
	// Relay is in progress.
	ErrRunning = errors.New("outbox: relay already running")
)

// dbError turns an error of pgx into the error op returns: "outbox: op: "
// and, for a server that cannot serve now, ErrUnavailable, then the cause,
// so that errors.As still finds a *pgconn.PgError.
func dbError(op string, err error) error {
	if err == nil {
		return nil
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case transientState(pgErr.Code):
			return fmt.Errorf("outbox: %s: %w: %w", op, ErrUnavailable, err)
		case pgErr.Code == "42P01": // undefined_table
			return fmt.Errorf("outbox: %s: the outbox table is missing (run outbox.Migrate): %w", op, err)
		case pgErr.Code == "42703": // undefined_column: a table of an earlier version
			return fmt.Errorf("outbox: %s: the outbox table is of an earlier version (run outbox.Migrate): %w", op, err)
		}
		return fmt.Errorf("outbox: %s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("outbox: %s: %w", op, err)
	}
	// Dial and TLS errors, a closed connection, I/O errors, deadlines: the
	// server was not reached, or stopped answering.
	return fmt.Errorf("outbox: %s: %w: %w", op, ErrUnavailable, err)
}

// transientState reports whether a SQLSTATE says the server cannot serve
// now: connection exceptions (08), insufficient resources (53), operator
// intervention (57: shutdown, statement timeout), system errors (58), and
// serialization failures, deadlocks, lock timeouts and a read-only standby.
func transientState(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "25006":
		return true
	}
	switch code[:min(2, len(code))] {
	case "08", "53", "57", "58":
		return true
	}
	return false
}
