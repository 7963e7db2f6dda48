package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/storage"
)

var (
	// ErrUnknownFormat: a record's row is not one this package wrote (an
	// unknown status). The row is left as it is.
	ErrUnknownFormat = storage.Refusal("cassandrastore: row has an unknown format")

	// ErrInvalidArgs: a store method was called with arguments out of range
	// (a lease or retention that is not positive or longer than a year, a
	// key that is empty or longer than MaxKeyLen, which also wraps
	// storage.ErrInvalidKey, a fingerprint longer than MaxFingerprintLen).
	// Nothing was sent to Cassandra.
	ErrInvalidArgs = storage.Refusal("cassandrastore: invalid arguments")

	// ErrContention: a call met a record that kept changing under it, or
	// writes whose outcome Cassandra could not tell, and gave up after a
	// few rounds. It wraps storage.ErrStoreUnavailable: the Guard fails
	// the call and a retry starts again.
	ErrContention = fmt.Errorf("cassandrastore: the record kept changing, or its writes kept timing out: %w", storage.ErrStoreUnavailable)
)

// translate turns an error of the driver into the error an operation
// returns, prefixed "cassandrastore: op: ":
//
//   - the caller's context cancelled: its error, wrapped;
//   - a keyspace or table that does not exist: wrapped with
//     storage.ErrStoreUnavailable, naming the table and Migrate;
//   - anything else (the network, no host up, a timeout, a node that is
//     unavailable, overloaded or bootstrapping, authentication): wrapped
//     with storage.ErrStoreUnavailable.
//
// The driver's error stays in the chain, so errors.As finds its
// *gocql.RequestErrWriteTimeout and the like.
func (s *Store) translate(op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("cassandrastore: %s: %w", op, err)
	}
	var inv *gocql.RequestErrInvalid
	if errors.As(err, &inv) && strings.Contains(inv.Message(), "unconfigured table") ||
		strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("cassandrastore: %s: table %s does not exist (create it with Migrate): %w: %w", op, s.table, storage.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("cassandrastore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
}

// unknown reports whether err, the answer to a conditional write, leaves
// its outcome unknown: the write may have been applied, or may be applied
// later by the next Paxos round on its partition. Cassandra says so with a
// write timeout (of WriteType CAS for the Paxos phases, SIMPLE or BATCH
// for the commit) or, on protocol v5, CAS_WRITE_UNKNOWN; the driver with a
// request that got no answer. An error that shows the request was refused
// before it ran (unavailable, overloaded, invalid) is not unknown, and
// neither is a connection that could not be had.
func unknown(err error) bool {
	if err == nil {
		return false
	}
	var (
		wt  *gocql.RequestErrWriteTimeout
		wu  *gocql.RequestErrCASWriteUnknown
		wf  *gocql.RequestErrWriteFailure
		rt  *gocql.RequestErrReadTimeout
		un  *gocql.RequestErrUnavailable
		ov  *gocql.RequestErrOverloaded
		bs  *gocql.RequestErrBootstrapping
		inv *gocql.RequestErrInvalid
		sy  *gocql.RequestErrSyntax
		ua  *gocql.RequestErrUnauthorized
	)
	switch {
	case errors.As(err, &wt), errors.As(err, &wu), errors.As(err, &wf), errors.As(err, &rt):
		return true
	case errors.As(err, &un), errors.As(err, &ov), errors.As(err, &bs), errors.As(err, &inv), errors.As(err, &sy), errors.As(err, &ua),
		errors.Is(err, gocql.ErrNoConnections), errors.Is(err, gocql.ErrSessionClosed), errors.Is(err, gocql.ErrUnavailable):
		return false
	}
	// No answer: a timeout, a connection lost with the request on it, the
	// caller's context ended while it waited.
	return true
}
