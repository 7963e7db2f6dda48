package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Replication is the replication of the keyspace [Migrate] creates: a
// strategy and its replica counts, as CREATE KEYSPACE takes them. Build it
// with [SimpleStrategy] or [NetworkTopologyStrategy].
type Replication struct {
	// Class is the strategy: "SimpleStrategy" or "NetworkTopologyStrategy".
	Class string
	// Factors are the replica counts: "replication_factor" for
	// SimpleStrategy, one per datacenter name for NetworkTopologyStrategy.
	Factors map[string]int
}

// SimpleStrategy returns n replicas placed around the ring without regard
// to datacenters: for a single-datacenter cluster, or a test node (n = 1).
func SimpleStrategy(n int) Replication {
	return Replication{Class: "SimpleStrategy", Factors: map[string]int{"replication_factor": n}}
}

// NetworkTopologyStrategy returns replicas per datacenter, by name: what
// production clusters use (three per datacenter lets a QUORUM, and so a
// Paxos round, survive one node down).
func NetworkTopologyStrategy(perDC map[string]int) Replication {
	return Replication{Class: "NetworkTopologyStrategy", Factors: maps.Clone(perDC)}
}

var validDC = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// cql returns r as CQL's replication map, or an error naming what is
// wrong with it.
func (r Replication) cql() (string, error) {
	switch r.Class {
	case "SimpleStrategy":
		if len(r.Factors) != 1 || r.Factors["replication_factor"] < 1 {
			return "", errors.New("SimpleStrategy takes one replication_factor of at least 1")
		}
	case "NetworkTopologyStrategy":
		if len(r.Factors) == 0 {
			return "", errors.New("NetworkTopologyStrategy takes a replica count for at least one datacenter")
		}
	default:
		return "", fmt.Errorf("class %q: want SimpleStrategy or NetworkTopologyStrategy", r.Class)
	}
	parts := []string{"'class': '" + r.Class + "'"}
	for _, name := range slices.Sorted(maps.Keys(r.Factors)) {
		n := r.Factors[name]
		if !validDC.MatchString(name) || n < 0 || n > 100 {
			return "", fmt.Errorf("replicas %q: %d: want a datacenter name and a count from 0 to 100", name, n)
		}
		parts = append(parts, "'"+name+"': '"+strconv.Itoa(n)+"'")
	}
	return "{" + strings.Join(parts, ", ") + "}", nil
}

// String returns r as a store URL's replication= parameter spells it
// (see [ParseURL]): SimpleStrategy:3, NetworkTopologyStrategy:dc1=3,dc2=3.
func (r Replication) String() string {
	if r.Class == "SimpleStrategy" {
		return r.Class + ":" + strconv.Itoa(r.Factors["replication_factor"])
	}
	var dcs []string
	for _, name := range slices.Sorted(maps.Keys(r.Factors)) {
		dcs = append(dcs, name+"="+strconv.Itoa(r.Factors[name]))
	}
	return r.Class + ":" + strings.Join(dcs, ",")
}

// ErrNoKeyspace is Migrate's error when the keyspace does not exist and no
// replication was given to create it.
var ErrNoKeyspace = errors.New("cassandrastore: Migrate: the keyspace does not exist")

// Migrate creates the keyspace cfg.Keyspace with replication r, if it does
// not exist (an existing keyspace keeps its own replication), and in it
// the records table cfg.Table, if it does not exist, then waits until
// every node agrees on the schema. It is idempotent. With the zero
// Replication it creates only the table, in a keyspace that must exist.
// Config fields other than Keyspace and Table are ignored (defaults as in
// [New]).
//
// The table is one partition per record:
//
//	CREATE TABLE idem.idem_records (
//	    k blob PRIMARY KEY, status text, tok bigint, attempt int, fp blob,
//	    lease_until bigint, expires_at bigint, retention bigint, result blob)
//
// Replication is the operator's choice and has no default: a keyspace
// with too few replicas for QUORUM cannot serve a Paxos round.
func Migrate(ctx context.Context, sess *gocql.Session, cfg Config, r Replication) error {
	if sess == nil {
		return errors.New("cassandrastore: Migrate: session is nil")
	}
	s, err := New(sess, Config{Keyspace: cfg.Keyspace, Table: cfg.Table})
	if err != nil {
		return err
	}
	var stmts []string
	if r.Class != "" {
		repl, err := r.cql()
		if err != nil {
			return fmt.Errorf("cassandrastore: Migrate: replication: %w", err)
		}
		stmts = append(stmts, "CREATE KEYSPACE IF NOT EXISTS "+s.cfg.Keyspace+" WITH replication = "+repl)
	} else {
		// The schema tables, not the session's metadata, which may not
		// know yet of a keyspace another session just made.
		var name string
		err := sess.Query("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", s.cfg.Keyspace).
			Idempotent(true).ScanContext(ctx, &name)
		if errors.Is(err, gocql.ErrNotFound) {
			return fmt.Errorf("%w: %s (to create it, give its replication)", ErrNoKeyspace, s.cfg.Keyspace)
		}
		if err != nil {
			return s.translate("Migrate", err)
		}
	}
	for _, stmt := range append(stmts,
		"CREATE TABLE IF NOT EXISTS "+s.table+" ("+ColKey+" blob PRIMARY KEY, "+ColStatus+" text, "+
			ColToken+" bigint, "+ColAttempt+" int, "+ColFinger+" blob, "+ColLeaseUntil+" bigint, "+
			ColExpiresAt+" bigint, "+ColRetention+" bigint, "+ColResult+" blob)",
	) {
		if err := sess.Query(stmt).ExecContext(ctx); err != nil {
			var exists *gocql.RequestErrAlreadyExists
			if !errors.As(err, &exists) {
				return s.translate("Migrate", err)
			}
		}
	}
	if err := sess.AwaitSchemaAgreement(ctx); err != nil {
		return s.translate("Migrate", err)
	}
	return nil
}

// CheckTable reads one row of the records table, to tell that the cluster
// answers and the table exists: an error naming Migrate when it does not,
// wrapping storage.ErrStoreUnavailable.
func (s *Store) CheckTable(ctx context.Context) error {
	err := s.sess.Query("SELECT k FROM " + s.table + " LIMIT 1").Idempotent(true).ExecContext(ctx)
	if err != nil {
		return s.translate("CheckTable", err)
	}
	return nil
}
