package cassandrastore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/storage"
)

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// Keyspace is the keyspace of the records table. Default "idem".
	Keyspace string

	// Table is the records table's name (see [Migrate] for its shape).
	// Default "idem_records".
	Table string

	// SerialConsistency is the consistency of the Paxos phase of every
	// conditional write, and of the reads that Get and a write whose
	// outcome is unknown make: gocql.Serial (default), a majority of all
	// the replicas, or gocql.LocalSerial, a majority of the local
	// datacenter's, for clusters whose every client of the table is in
	// one datacenter at a time (LocalSerial across datacenters allows two
	// holders).
	SerialConsistency gocql.Consistency

	// Consistency is the consistency of the commit phase of every
	// conditional write and of Scan's reads: gocql.Quorum (default with
	// Serial), gocql.LocalQuorum (default with LocalSerial),
	// gocql.EachQuorum or gocql.All. The store reads records at
	// SerialConsistency, which sees every committed write, so a lower
	// commit consistency would only hide records from Scan; it is
	// refused.
	Consistency gocql.Consistency

	// MaxClockSkew is the largest difference the store tolerates between
	// the clocks of any two hosts that share the table. Cassandra has no
	// clock a condition can read, so leases and expiry are written and
	// compared on the clocks of the hosts: a lease or record counts as
	// over only MaxClockSkew after its end on the reader's clock. Hosts
	// whose clocks differ by more can run one operation twice at once (see
	// the package documentation). It also delays a takeover after a crash
	// by as much. Default 1s; from 1ms to 1h.
	MaxClockSkew time.Duration

	// MaxValueSize is the longest value (Complete) or encoded cause (Fail)
	// accepted, in bytes; a longer one gets a *storage.ValueTooLargeError
	// and nothing is written, and a stored one that is longer is refused
	// on read the same way. Default 1 MiB; at most MaxValueSizeLimit.
	MaxValueSize int

	// Now is the clock of this host, read once per call. Default
	// time.Now; set it in tests.
	Now func() time.Time
}

// Defaults and limits of [Config] and of the store's arguments.
const (
	DefaultKeyspace     = "idem"
	DefaultTable        = "idem_records"
	DefaultMaxClockSkew = time.Second
	DefaultMaxValueSize = 1 << 20

	// MaxValueSizeLimit is the longest value a record can hold. Every
	// conditional write carries its values twice through Paxos (the
	// proposal, then the commit), and Cassandra refuses a mutation larger
	// than half a commit log segment (16 MiB by default): 8 MiB keeps a
	// record with the longest key and fingerprint well under it.
	MaxValueSizeLimit = 8 << 20
	// MaxKeyLen is the longest store key, in bytes. Cassandra takes
	// partition keys up to 64 KiB; a key this long is already a mistake.
	MaxKeyLen = 4096
	// MaxFingerprintLen is the longest fingerprint accepted, in bytes.
	MaxFingerprintLen = 1024
)

// maxDuration bounds leases and retentions: a record's TTL is at most a
// lease and a retention, and Cassandra 4 and 5 (in their compatibility
// storage mode) refuse an expiry past 2038.
const maxDuration = 365 * 24 * time.Hour

// maxRounds bounds the conditional writes of one call: a call writes
// again only when the record changed since it was read, or when the
// outcome of its write was unknown and the record, read back, does not
// hold it.
const maxRounds = 8

// Store is a [storage.Store] over one Cassandra table: one partition per
// record, every transition one lightweight transaction. It holds no
// goroutine of its own; the session belongs to the caller (hosts,
// authentication, TLS, pools, timeouts). It is safe for concurrent use.
type Store struct {
	sess   *gocql.Session
	cfg    Config
	skew   int64  // MaxClockSkew in milliseconds, rounded up
	table  string // keyspace.table
	insert string // the claim of an absent key
	write  string // every other write: the whole record, conditioned on the whole record
	read   string
	drop   string // Delete
	dropIf string // DeleteIf
	scan   string

	// held remembers, by key and token, the record of each claim this
	// Store made or wrote last, so that a holder's next write conditions
	// on it at once. A holder it does not know (a claim made by another
	// process, or forgotten) costs one more round: the first write's
	// failed condition returns the record.
	mu   sync.Mutex
	held map[heldKey]row

	// fault, when set (by tests), runs each conditional write in place of
	// exec, as a lost or late answer would: see export_test.go.
	fault func(op string, exec func() (bool, error)) (bool, error)
}

type heldKey struct {
	key string
	tok int64
}

// maxHeld bounds Store.held: claims whose holders never finished them
// (their processes crashed, or they finished through another Store) are
// forgotten when it is full.
const maxHeld = 1 << 16

var _ storage.Store = (*Store)(nil)

// New returns a Store over the table cfg.Keyspace.cfg.Table through sess.
// It fails when sess is nil or a Config field is out of range; the error
// names the field. It does not contact Cassandra: a missing table or an
// unreachable cluster shows in the first call.
func New(sess *gocql.Session, cfg Config) (*Store, error) {
	if sess == nil {
		return nil, errors.New("cassandrastore: New: session is nil")
	}
	switch {
	case cfg.Keyspace != "" && !validName.MatchString(cfg.Keyspace):
		return nil, fmt.Errorf("cassandrastore: Config.Keyspace %q: must be 1 to 48 letters, digits or '_', starting with a letter", cfg.Keyspace)
	case cfg.Table != "" && !validName.MatchString(cfg.Table):
		return nil, fmt.Errorf("cassandrastore: Config.Table %q: must be 1 to 48 letters, digits or '_', starting with a letter", cfg.Table)
	case cfg.SerialConsistency != 0 && cfg.SerialConsistency != gocql.Serial && cfg.SerialConsistency != gocql.LocalSerial:
		return nil, fmt.Errorf("cassandrastore: Config.SerialConsistency %v: must be SERIAL or LOCAL_SERIAL", cfg.SerialConsistency)
	case cfg.Consistency != 0 && cfg.Consistency != gocql.Quorum && cfg.Consistency != gocql.LocalQuorum &&
		cfg.Consistency != gocql.EachQuorum && cfg.Consistency != gocql.All:
		return nil, fmt.Errorf("cassandrastore: Config.Consistency %v: must be QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL", cfg.Consistency)
	case cfg.MaxClockSkew < 0 || (cfg.MaxClockSkew > 0 && cfg.MaxClockSkew < time.Millisecond) || cfg.MaxClockSkew > time.Hour:
		return nil, fmt.Errorf("cassandrastore: Config.MaxClockSkew %v: must be between 1ms and 1h", cfg.MaxClockSkew)
	case cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit:
		return nil, fmt.Errorf("cassandrastore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	}
	cfg.Keyspace = cmp.Or(cfg.Keyspace, DefaultKeyspace)
	cfg.Table = cmp.Or(cfg.Table, DefaultTable)
	cfg.SerialConsistency = cmp.Or(cfg.SerialConsistency, gocql.Serial)
	if cfg.Consistency == 0 {
		cfg.Consistency = gocql.Quorum
		if cfg.SerialConsistency == gocql.LocalSerial {
			cfg.Consistency = gocql.LocalQuorum
		}
	}
	cfg.MaxClockSkew = cmp.Or(cfg.MaxClockSkew, DefaultMaxClockSkew)
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := cfg.Keyspace + "." + cfg.Table
	const cols = "status, tok, attempt, fp, lease_until, expires_at, retention, result"
	return &Store{
		sess: sess, cfg: cfg, skew: ceilMillis(cfg.MaxClockSkew), table: t,
		insert: "INSERT INTO " + t + " (k, status, tok, attempt, fp, lease_until, expires_at, retention, result)" +
			" VALUES (?, '" + statusInProgress + "', ?, 1, ?, ?, ?, ?, 0x) IF NOT EXISTS USING TTL ?",
		write: "UPDATE " + t + " USING TTL ? SET status = ?, tok = ?, attempt = ?, fp = ?, lease_until = ?, expires_at = ?, retention = ?, result = ?" +
			" WHERE k = ? IF status = ? AND tok = ? AND attempt = ? AND fp = ? AND retention = ? AND expires_at = ?",
		read:   "SELECT " + cols + " FROM " + t + " WHERE k = ?",
		drop:   "DELETE FROM " + t + " WHERE k = ? IF EXISTS",
		dropIf: "DELETE FROM " + t + " WHERE k = ? IF status = ? AND tok = ? AND expires_at >= ?",
		scan:   "SELECT k, " + cols + " FROM " + t,
		held:   make(map[heldKey]row),
	}, nil
}

// validName is what Cassandra takes as an unquoted keyspace or table name.
var validName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

// Config returns what the Store runs with: cfg of New, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// MaxValueSize implements [storage.Store.MaxValueSize]: Config.MaxValueSize,
// so that the Guard and the adapters never hand the store an outcome it
// would refuse.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// clock is this host's clock read once, in Unix ms (now), with the latest
// lease end or expiry that every host within MaxClockSkew of it sees as
// passed (dead).
type clock struct{ now, dead int64 }

func (s *Store) clock() clock { n := s.cfg.Now().UnixMilli(); return clock{n, n - s.skew} }

// ttl returns the TTL, in seconds, of the cells of a record that expires
// at exp (Unix ms), written at c: Cassandra deletes them after every host
// within MaxClockSkew has seen the record expire. Until then every call
// treats an expired record as absent.
func (s *Store) ttl(c clock, exp int64) int { return int(ceilDiv(exp+s.skew-c.now, 1000)) + 1 }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilMillis returns d in milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// newToken returns a random nonzero token.
func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

// nonNil returns b, or an empty slice for nil: the driver writes a nil
// slice as a null, and the conditions compare empty blobs, not nulls.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// cas runs one conditional write q and fills m with the columns of its
// answer when it was not applied.
func (s *Store) cas(ctx context.Context, op string, q *gocql.Query, m map[string]any) (bool, error) {
	q = q.Consistency(s.cfg.Consistency).SerialConsistency(s.cfg.SerialConsistency)
	exec := func() (bool, error) { return q.MapScanCASContext(ctx, m) }
	if s.fault != nil {
		return s.fault(op, exec)
	}
	return exec()
}

// writeRow writes next over the key's record, if the record is still
// prev (the zero row: no record), with the TTL of next's expiry. It
// returns whether it was applied; when it was not, the record's columns
// that the condition compares (the zero row when there is none), and
// whole false. When Cassandra cannot tell whether the write was applied,
// writeRow reads the record back at SerialConsistency, which completes or
// voids any Paxos round left in flight: the write was applied if the
// record is next, and was not (and never will be) if it is anything else,
// which writeRow returns with all its columns (whole true).
func (s *Store) writeRow(ctx context.Context, op, key string, c clock, prev, next *row) (applied bool, got row, whole bool, err error) {
	var cond [6]any // nulls: no record
	if !prev.absent() {
		cond = [6]any{prev.status, prev.tok, prev.attempt, nonNil(prev.fp), prev.retention, prev.expiresAt}
	}
	q := s.sess.Query(s.write, s.ttl(c, next.expiresAt),
		next.status, next.tok, next.attempt, nonNil(next.fp), next.leaseUntil, next.expiresAt, next.retention, nonNil(next.result),
		[]byte(key), cond[0], cond[1], cond[2], cond[3], cond[4], cond[5])
	m := make(map[string]any, 8)
	applied, err = s.cas(ctx, op, q, m)
	switch {
	case err == nil && applied:
		return true, row{}, false, nil
	case err == nil:
		got, err = scanRow(m)
		return false, got, false, err
	case !unknown(err):
		return false, row{}, false, s.translate(op, err)
	}
	got, rerr := s.get(ctx, op, key)
	if rerr != nil {
		return false, row{}, false, fmt.Errorf("%w (the write's outcome is unknown: %w)", rerr, err)
	}
	if got.equal(next) {
		return true, row{}, false, nil
	}
	return false, got, true, nil
}

// get reads the key's row at SerialConsistency: the zero row when there
// is none.
func (s *Store) get(ctx context.Context, op, key string) (row, error) {
	m := make(map[string]any, 8)
	err := s.sess.Query(s.read, []byte(key)).Consistency(s.cfg.SerialConsistency).Idempotent(true).MapScanContext(ctx, m)
	if errors.Is(err, gocql.ErrNotFound) {
		return row{}, nil
	}
	if err != nil {
		return row{}, s.translate(op, err)
	}
	return scanRow(m)
}

// Claim implements [storage.Store.Claim].
//
// A key that is absent is claimed by one INSERT … IF NOT EXISTS. When the
// key is taken, Cassandra answers with the row that is there, and that row
// answers the claim: Busy, Duplicate (with the stored outcome) or
// ErrKeyReused; a duplicate costs one Paxos round, as a new key does. A
// record whose lease is over, or that expired but is still stored, is
// taken over (or, with MaxAttempts spent, failed) by one UPDATE …
// conditioned on the record being as the claim saw it; if it changed
// meanwhile, the claim starts again. Of any number of concurrent claims of
// a key exactly one is Acquired. Busy answers carry the holder's record
// without its token.
//
// A claim whose write Cassandra times out on (the outcome unknown) reads
// the record back at SerialConsistency and answers from it: Acquired only
// when the record holds this claim's token.
//
// The token is 64 random bits, never zero, drawn in this process. Leases
// and expiry are this host's clock (see Config.MaxClockSkew).
//
// Errors: storage.ErrKeyReused; ErrInvalidArgs (nothing sent);
// ErrUnknownFormat for a row this package did not write;
// *storage.ValueTooLargeError for a stored outcome longer than
// MaxValueSize; ErrContention after eight rounds; driver failures wrapping
// storage.ErrStoreUnavailable.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := invalidClaim("Claim", a); err != nil {
		return storage.Claim{}, err
	}
	c := s.clock()
	ret := ceilMillis(a.Retention)
	lease := c.now + ceilMillis(a.Lease)
	fresh := row{
		status: statusInProgress, tok: newToken(), attempt: 1, fp: bytes.Clone(nonNil(a.Fingerprint)),
		leaseUntil: lease, expiresAt: lease + ret, retention: ret, result: []byte{},
	}
	var seen *row // nil: insert, or read the record by failing to
	for range maxRounds {
		if seen == nil {
			ok, got, err := s.create(ctx, a.Key, c, &fresh)
			if err != nil {
				return storage.Claim{}, err
			}
			if ok {
				return s.acquired(a.Key, &fresh), nil
			}
			seen = &got
			continue
		}
		rec := *seen
		var next row
		switch {
		case rec.absent() || rec.expiresAt < c.dead: // gone, or expired and not yet deleted
			next = fresh
		case rec.tok == fresh.tok && rec.status == statusInProgress: // this claim's own write
			return s.acquired(a.Key, &rec), nil
		case !bytes.Equal(rec.fp, a.Fingerprint):
			return storage.Claim{}, storage.ErrKeyReused
		case rec.status != statusInProgress:
			if len(rec.result) > s.cfg.MaxValueSize {
				return storage.Claim{}, s.tooLarge(a.Key, len(rec.result))
			}
			return storage.Claim{Outcome: storage.Duplicate, Record: rec.record(a.Key)}, nil
		case rec.leaseUntil >= c.dead:
			r := rec.record(a.Key)
			r.Token = 0 // a Busy answer must not let its caller act as the holder
			return storage.Claim{Outcome: storage.Busy, Record: r}, nil
		case a.MaxAttempts > 0 && rec.attempt >= a.MaxAttempts:
			next = rec
			next.status, next.tok, next.leaseUntil = statusFailed, 0, 0
			next.result, next.expiresAt = storage.TooManyAttemptsCause(), c.now+ret
		default:
			next = fresh
			next.attempt = rec.attempt + 1
		}
		ok, got, whole, err := s.writeRow(ctx, "Claim", a.Key, c, &rec, &next)
		if err != nil {
			return storage.Claim{}, err
		}
		switch {
		case !ok && !whole:
			seen = nil // a failed condition's columns only: read the whole record by inserting
		case !ok:
			seen = &got
		case next.status == statusInProgress:
			return s.acquired(a.Key, &next), nil
		default:
			return storage.Claim{Outcome: storage.Duplicate, Record: next.record(a.Key)}, nil
		}
	}
	return storage.Claim{}, ErrContention
}

// create inserts the claim's record r if the key has none. When it has
// one, it returns it whole, as Cassandra answers a failed IF NOT EXISTS;
// when Cassandra cannot tell whether the insert was applied, as the
// record read back holds it.
func (s *Store) create(ctx context.Context, key string, c clock, r *row) (bool, row, error) {
	q := s.sess.Query(s.insert, []byte(key), r.tok, r.fp, r.leaseUntil, r.expiresAt, r.retention, s.ttl(c, r.expiresAt))
	m := make(map[string]any, 9)
	applied, err := s.cas(ctx, "Claim", q, m)
	switch {
	case err == nil && applied:
		return true, row{}, nil
	case err == nil:
		got, err := scanRow(m)
		return false, got, err
	case !unknown(err):
		return false, row{}, s.translate("Claim", err)
	}
	got, rerr := s.get(ctx, "Claim", key)
	if rerr != nil {
		return false, row{}, fmt.Errorf("%w (the claim's outcome is unknown: %w)", rerr, err)
	}
	return false, got, nil // Claim sees its own token in got if the insert was applied
}

// acquired returns the Acquired answer of the claim that wrote r, and
// remembers r for the holder's next write.
func (s *Store) acquired(key string, r *row) storage.Claim {
	s.remember(key, r)
	rec := r.record(key)
	rec.Fingerprint = bytes.Clone(rec.Fingerprint)
	return storage.Claim{Outcome: storage.Acquired, Token: rec.Token, Record: rec}
}

func (s *Store) remember(key string, r *row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) >= maxHeld {
		for k := range s.held { // forget one, any one
			delete(s.held, k)
			break
		}
	}
	s.held[heldKey{key, r.tok}] = *r
}

func (s *Store) recall(key string, tok int64) (row, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.held[heldKey{key, tok}]
	return r, ok
}

func (s *Store) forget(key string, tok int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, heldKey{key, tok})
}

func (s *Store) tooLarge(key string, size int) error {
	return &storage.ValueTooLargeError{Store: "cassandrastore", Size: size, Max: s.cfg.MaxValueSize, Stored: true, Key: key}
}

// invalid returns ErrInvalidArgs, saying what is wrong, for the first
// argument of a call that is out of range: the key, the fingerprint, then
// each of the leases and retentions given; nil when every one is in range.
func invalid(op, key string, fp []byte, durations ...time.Duration) error {
	switch {
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %s: a key of %d bytes, want 1 to %d: %w", ErrInvalidArgs, op, len(key), MaxKeyLen, storage.ErrInvalidKey)
	case len(fp) > MaxFingerprintLen:
		return fmt.Errorf("%w: %s: a fingerprint of %d bytes, want at most %d", ErrInvalidArgs, op, len(fp), MaxFingerprintLen)
	}
	for _, d := range durations {
		if d <= 0 || d > maxDuration {
			return fmt.Errorf("%w: %s: a lease or retention of %v, want more than 0 and at most a year", ErrInvalidArgs, op, d)
		}
	}
	return nil
}

// invalidClaim is invalid for a claim's arguments.
func invalidClaim(op string, a storage.ClaimArgs) error {
	return invalid(op, a.Key, a.Fingerprint, a.Lease, a.Retention)
}
