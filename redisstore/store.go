package redisstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// Prefix starts the Redis key of every record, so the store can share a
	// database with other data and several stores can share one Redis.
	// Default "idem:". It must not contain '{' or '}': the record's hash tag
	// follows it.
	Prefix string

	// MaxValueSize is the longest value (Complete) or encoded cause (Fail)
	// accepted, in bytes; a longer one gets a *storage.ValueTooLargeError and
	// nothing is written. It also bounds what is read: a record holding a
	// longer result (written by another program, or by a Store with a
	// larger MaxValueSize) is refused by Claim and Get with a
	// *storage.ValueTooLargeError, and listed by Scan without its result. No
	// call reads it: the scripts leave it out of their replies and a
	// Claim's GETRANGE stops after the cap. Default 1 MiB; at most 256 MiB. Redis holds the
	// whole value in memory and sends it to every duplicate: keep outcomes
	// small and store large payloads elsewhere.
	MaxValueSize int

	// WaitReplicas, when positive, makes every outcome write (Complete,
	// Fail, CompleteBatch) issue WAIT WaitReplicas WaitTimeout on the same
	// connection, right after the script in the same round trip, and
	// return ErrNotReplicated when fewer replicas acknowledged it. It
	// narrows, not closes, the window in which a failover loses an outcome
	// (see the package documentation). It needs a *redis.Client
	// (standalone or Sentinel) or a *redis.ClusterClient. Default 0: no
	// WAIT.
	WaitReplicas int

	// WaitTimeout bounds each WAIT. Default 1s; at least 1ms, and shorter
	// than the client's ReadTimeout, which bounds the reply of the round
	// trip that carries the WAIT.
	WaitTimeout time.Duration

	// AllowEviction lets New accept a Redis whose maxmemory-policy may
	// evict keys, and skips New's check of the policy (and its round
	// trip). Every record has a TTL, so under any volatile-* policy
	// (ElastiCache's default is volatile-lru) or allkeys-* policy a full
	// Redis evicts records to make room: an evicted InProgress record lets
	// a duplicate run while the first holder still runs, an evicted
	// outcome lets a later duplicate run the operation again, and no call
	// returns an error. Set it only if the data this Redis holds can never
	// fill maxmemory, or if running some duplicates again is acceptable.
	// Default false: New refuses any policy but noeviction, under which a
	// full Redis refuses new claims (ErrOutOfMemory) rather than forget;
	// and the Store reads the policy again every 10 seconds while it runs
	// (see New), failing claims while it may evict.
	AllowEviction bool

	// Logger receives an error when a check of the eviction policy while
	// the Store runs finds one that may evict (once, until a later check
	// finds noeviction again, which is logged as a warning). Default
	// slog.Default().
	Logger *slog.Logger
}

// Defaults and limits of [Config].
const (
	DefaultPrefix       = "idem:"
	DefaultMaxValueSize = 1 << 20
	DefaultWaitTimeout  = time.Second
	MaxValueSizeLimit   = 256 << 20
)

// maxDuration bounds leases and retentions: times are milliseconds that
// pass through Lua doubles, exact below 2^53.
const maxDuration = 100 * 365 * 24 * time.Hour

// Store is an [storage.Store] over Redis: one string key per record, every
// transition atomic on that key alone (a claim's SET … NX, or one
// EVALSHA of a Lua script), the Redis server's clock for every time. It works with any
// redis.UniversalClient: standalone, Sentinel or Cluster.
//
// A Store holds no connection of its own, and no goroutine beyond a call:
// a call whose context ends before Redis answered returns at once, and the
// exchange it leaves behind ends on its own goroutine within the client's
// timeouts (see New). The client belongs to the caller, who closes it. A
// Store is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	cfg    Config
	held   *held        // the records ClaimBatch created, for CompleteBatch
	policy *policyWatch // nil with AllowEviction
}

var (
	_ storage.Store = (*Store)(nil)
)

// New returns a Store over client. It fails when client is nil or a Config
// field is out of range; the error names the field. It also refuses a
// client (*redis.Client, *redis.ClusterClient or *redis.Ring) whose
// ReadTimeout or WriteTimeout lets a command wait for the server forever
// (-1, -2): every call returns when its context ends, leaving the command
// it sent to the client, which must give up on a server that does not
// answer.
//
// Unless Config.AllowEviction is set, New then reads the maxmemory-policy
// of the server with INFO memory (of every primary of a Cluster, of every
// shard of a Ring), and returns an *EvictionPolicyError for any policy
// but noeviction, whatever maxmemory is (0, no limit, can be changed at
// run time), or for a reply with no policy. A server it cannot reach or
// that does not answer within 5 seconds gives an error wrapping
// storage.ErrStoreUnavailable, and no Store: New does not pass what it could
// not check. A program that may start before Redis does calls New again
// until it succeeds, as it would retry its first call. The Store reads the
// policy again while it runs, so that a policy changed later (CONFIG SET,
// a failover to a primary configured otherwise) is seen: the first Claim
// or ClaimBatch 10 seconds after the last check checks again, in a round
// trip of its own, and while the last check found a policy that may
// evict, every Claim and ClaimBatch fails with an error wrapping
// storage.ErrStoreUnavailable and the *EvictionPolicyError (Complete,
// Fail, Release, Extend and Get go on: they run nothing twice). It logs
// the change to Config.Logger once; a later check that finds noeviction
// lets claims go on.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: client is nil")
	}
	if unbounded := unboundedTimeouts(client); unbounded != "" {
		return nil, fmt.Errorf("redisstore: New: the client's %s lets a command wait for the server forever: "+
			"set it positive (or 0, go-redis's default); a call whose context ends returns at once and leaves its command "+
			"to the client, which must give up on a server that does not answer", unbounded)
	}
	switch {
	case strings.ContainsAny(cfg.Prefix, "{}"):
		return nil, fmt.Errorf("redisstore: Config.Prefix %q: must not contain '{' or '}'", cfg.Prefix)
	case cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit:
		return nil, fmt.Errorf("redisstore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	case cfg.WaitReplicas < 0:
		return nil, fmt.Errorf("redisstore: Config.WaitReplicas %d: must not be negative", cfg.WaitReplicas)
	case cfg.WaitTimeout < 0 || (cfg.WaitTimeout > 0 && cfg.WaitTimeout < time.Millisecond):
		return nil, fmt.Errorf("redisstore: Config.WaitTimeout %v: must be at least 1ms (WAIT counts milliseconds)", cfg.WaitTimeout)
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	cfg.WaitTimeout = cmp.Or(cfg.WaitTimeout, DefaultWaitTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.WaitReplicas > 0 {
		var readTimeout time.Duration
		switch c := client.(type) {
		case *redis.Client:
			readTimeout = c.Options().ReadTimeout
		case *redis.ClusterClient:
			readTimeout = c.Options().ReadTimeout
		default:
			return nil, fmt.Errorf("redisstore: Config.WaitReplicas %d: needs a *redis.Client or *redis.ClusterClient, not %T", cfg.WaitReplicas, client)
		}
		if readTimeout > 0 && cfg.WaitTimeout >= readTimeout {
			return nil, fmt.Errorf("redisstore: Config.WaitTimeout %v: must be shorter than the client's ReadTimeout %v", cfg.WaitTimeout, readTimeout)
		}
	}
	s := &Store{client: client, cfg: cfg, held: new(held)}
	if !cfg.AllowEviction {
		if err := checkEviction(client); err != nil {
			return nil, err
		}
		s.policy = newPolicyWatch(client, cfg.Logger)
	}
	return s, nil
}

// unboundedTimeouts names the client's socket timeouts that never end a
// wait ("ReadTimeout", "WriteTimeout", both, or "" for none), for the
// client types whose options it can read.
func unboundedTimeouts(client redis.UniversalClient) string {
	var read, write time.Duration
	// go-redis normalizes the options of a Client and of a ClusterClient
	// when it builds one: 0 is then "no timeout" (-1 given) and -1 "no
	// deadline" (-2 given). A Ring keeps the values as given, 0 meaning
	// the default.
	bounded := func(d time.Duration) bool { return d > 0 }
	switch c := client.(type) {
	case *redis.Client:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.ClusterClient:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.Ring:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
		bounded = func(d time.Duration) bool { return d >= 0 }
	default:
		return ""
	}
	switch {
	case !bounded(read) && !bounded(write):
		return "ReadTimeout and WriteTimeout"
	case !bounded(read):
		return "ReadTimeout"
	case !bounded(write):
		return "WriteTimeout"
	}
	return ""
}

// Config returns the Store's configuration with the defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// MaxValueSize returns Config.MaxValueSize: the longest value or cause, in
// bytes, that Complete, Fail and CompleteBatch write, and the longest
// result that Claim, ClaimBatch and Get read back. It implements idem's
// ValueLimiter, so that a caller can keep its values within it.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// RedisKey returns the Redis key that holds the record of the store key:
// Config.Prefix, then the key in unpadded base64url between braces. The
// braces make the encoded key the Redis Cluster hash tag, so each record is
// one single-slot key; base64url is injective and has no braces, so no key,
// whatever its bytes, can address another's record. For operators and
// tests (TTL, MEMORY USAGE, SCAN with MATCH Prefix*).
func (s *Store) RedisKey(key string) string {
	var buf [128]byte
	return string(appendRedisKey(buf[:0], s.cfg.Prefix, key))
}

// Claim implements [storage.Store.Claim] with one plain command, SET key
// record NX PX ms, for a new key, and a second, GETRANGE of the key's value
// cut after the cap, for a duplicate, a reused key or a value this package
// did not write; then, in another round trip, the claim script for a key
// in progress, whose lease the server's clock judges in the script, or a
// record with a result over the cap (see plainClaim). The token is 64
// random bits, never zero, drawn in this process from math/rand/v2's
// ChaCha8 generator, which the runtime seeds from the operating system's
// entropy: tokens owe nothing to Redis's state, so a key's record that
// expired or that Redis lost does not make one repeat (two claims of a key
// draw the same token with odds of 2^-64). The client may resend a claim
// whose reply was lost: the claim that finds its own token answers
// Acquired again. The record of a key the claim created reports the lease
// end and expiry as the client reckons them (see the package doc). A Busy
// answer's record carries no token: the holder's is the holder's alone.
//
// A Redis out of memory refuses SET and the claim script, which may
// write, before they run; Claim then sends a read-only script with the same arguments,
// which answers a key that holds an outcome (Duplicate) or a live lease
// (Busy), and a reused key; any other claim needs a write, and fails
// with ErrOutOfMemory.
//
// Errors: storage.ErrKeyReused; ErrInvalidArgs for a lease or retention that
// is not positive or longer than 100 years or a fingerprint over 65535
// bytes; ErrOutOfMemory (wrapping storage.ErrStoreUnavailable); ErrUnknownFormat when the key holds a value this package did not
// write; *storage.ValueTooLargeError when it holds a result longer than
// Config.MaxValueSize; any other failure wraps storage.ErrStoreUnavailable.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := checkClaim("Claim", a); err != nil {
		return storage.Claim{}, err
	}
	if err := s.policy.err(ctx, "Claim"); err != nil {
		return storage.Claim{}, err
	}
	return s.claim(ctx, a, newToken())
}

// claim claims a with the token t: by a plain command, and a read of a
// key it finds taken (see plainClaim), then, for a key in progress, by the
// claim script.
func (s *Store) claim(ctx context.Context, a storage.ClaimArgs, t storage.Token) (storage.Claim, error) {
	args := s.claimArgs(a, t)
	nv := args[0].([]byte)
	plain := newPlainClaim(ctx, make([]any, 0, plainClaimArgs), s.RedisKey(a.Key), nv, args[1])
	sent := time.Now()
	if _, err := await(ctx, func() struct{} {
		_ = s.client.Process(ctx, plain.set) // the command carries its error
		return struct{}{}
	}); err != nil {
		return storage.Claim{}, unavailable(ctx, "Claim", err)
	}
	var reply any
	created, err := plain.created()
	needsScript := false
	if err == nil && created {
		reply = int64(replyCreated)
	} else if err == nil {
		plain = plain.read(ctx, nv, s.cfg.MaxValueSize)
		if _, err := await(ctx, func() struct{} {
			_ = s.client.Process(ctx, plain.get)
			return struct{}{}
		}); err != nil {
			return storage.Claim{}, unavailable(ctx, "Claim", err)
		}
		reply, needsScript, err = plain.reply(nv, s.cfg.MaxValueSize)
	}
	switch {
	case redis.IsOOMError(err):
		// A full Redis refuses SET, a write, before it runs, even for a
		// key that exists: a read-only peek still answers a duplicate.
		reply, err = s.run(ctx, s.eval(ctx, peekScript, resendable, a.Key, args...))
	case needsScript:
		cmd := s.eval(ctx, claimScript, resendable, a.Key, args...)
		sent = time.Now()
		reply, err = s.run(ctx, cmd)
		if redis.IsOOMError(err) { // the script is a write too
			reply, err = s.run(ctx, cmd.asPeek(ctx))
		}
	}
	if err != nil {
		return storage.Claim{}, unavailable(ctx, "Claim", err)
	}
	return s.claimReply("Claim", a, t, sent, reply)
}

func checkClaim(op string, a storage.ClaimArgs) error {
	if err := checkDuration(op, "lease", a.Lease); err != nil {
		return err
	}
	if err := checkDuration(op, "retention", a.Retention); err != nil {
		return err
	}
	if len(a.Fingerprint) > maxFingerprint {
		return fmt.Errorf("%w: %s: fingerprint of %d bytes, longer than %d", ErrInvalidArgs, op, len(a.Fingerprint), maxFingerprint)
	}
	return nil
}

func checkDuration(op, name string, d time.Duration) error {
	if d <= 0 || d > maxDuration {
		return fmt.Errorf("%w: %s: %s %v must be positive and at most 100 years", ErrInvalidArgs, op, name, d)
	}
	return nil
}

// newToken returns a random nonzero token (see Claim).
func newToken() storage.Token {
	for {
		if t := rand.Uint64(); t != 0 {
			return storage.Token(t)
		}
	}
}

// appendClaimArgs appends to dst the claim script's arguments for a and
// the token t: the new record (version, InProgress, t, attempt 1,
// retention, the fingerprint), packed here so that the script of a new key
// only writes it; the key's expiry from now in ms, lease plus retention;
// the cap.
func appendClaimArgs(dst []any, a storage.ClaimArgs, t storage.Token) []any {
	return append(dst, newRecord(a, t), claimExpiry(a), max(a.MaxAttempts, 0))
}

// newRecord returns the record that the claim of a with the token t
// creates: version, InProgress, t, attempt 1, retention, the fingerprint.
func newRecord(a storage.ClaimArgs, t storage.Token) []byte {
	nv := make([]byte, 0, headerLen+len(a.Fingerprint))
	nv = append(nv, formatVersion, byte(storage.StatusInProgress))
	nv = binary.BigEndian.AppendUint32(appendToken(nv, t), 1)
	nv = binary.BigEndian.AppendUint64(nv, uint64(millis(a.Retention)))
	nv = binary.BigEndian.AppendUint16(nv, uint16(len(a.Fingerprint)))
	return append(nv, a.Fingerprint...)
}

// claimExpiry returns the expiry of the key that the claim of a creates or
// takes over, in ms from now: lease plus retention.
func claimExpiry(a storage.ClaimArgs) int64 { return millis(a.Lease) + millis(a.Retention) }

// claimArgs returns the arguments of claimScript for a and the token t.
func (s *Store) claimArgs(a storage.ClaimArgs, t storage.Token) []any {
	return append(appendClaimArgs(make([]any, 0, 4), a, t), s.cfg.MaxValueSize)
}

// claimReply turns the reply of the claim of a with token t, sent at
// sent (or of the peek that followed a claim a full Redis refused), into
// a Claim.
func (s *Store) claimReply(op string, a storage.ClaimArgs, t storage.Token, sent time.Time, reply any) (storage.Claim, error) {
	if n, ok := reply.(int64); ok && n == replyNeedsWrite {
		return storage.Claim{}, fmt.Errorf("redisstore: %s: %w: %w: the key needs a write", op, storage.ErrStoreUnavailable, ErrOutOfMemory)
	}
	if n, ok := reply.(int64); ok && n == replyCreated {
		// The script created the record from the claim's own arguments
		// and said no more. The lease started when Redis ran it, between
		// sent and now; the record reports the earliest lease end on the
		// client's clock, the key's expiry in PX milliseconds after it.
		// Get reads both off the server.
		sent = sent.Round(0)
		lease := time.Duration(millis(a.Lease)) * time.Millisecond
		rec := storage.Record{
			Key:         a.Key,
			Status:      storage.StatusInProgress,
			Token:       t,
			Attempt:     1,
			Fingerprint: bytes.Clone(a.Fingerprint),
			LeaseUntil:  sent.Add(lease),
			ExpiresAt:   sent.Add(lease + time.Duration(millis(a.Retention))*time.Millisecond),
		}
		return storage.Claim{Outcome: storage.Acquired, Token: t, Record: rec}, nil
	}
	r, _ := reply.([]any)
	if len(r) == 0 {
		return storage.Claim{}, badReply(op, reply)
	}
	var outcome storage.Outcome
	switch code, _ := r[0].(int64); code {
	case replyKeyReused:
		return storage.Claim{}, storage.ErrKeyReused
	case replyAcquired:
		outcome = storage.Acquired
	case replyBusy:
		outcome = storage.Busy
	case replyDuplicate:
		outcome = storage.Duplicate
	case replyUnknown:
	default:
		return storage.Claim{}, badReply(op, reply)
	}
	if len(r) < 2 {
		return storage.Claim{}, badReply(op, reply)
	}
	rec, err := s.recordReply(a.Key, r[1:])
	if err != nil {
		return storage.Claim{}, err
	}
	if outcome == 0 { // the script refused a value the decoder accepts: a bug on one side
		return storage.Claim{}, fmt.Errorf("%w: refused by the claim script", ErrUnknownFormat)
	}
	c := storage.Claim{Outcome: outcome, Record: rec}
	switch c.Outcome {
	case storage.Acquired:
		c.Token = rec.Token
	case storage.Busy:
		c.Record.Token = 0 // the holder's token is the holder's alone: it would complete or release its lease
	}
	return c, nil
}

func badReply(op string, reply any) error {
	return fmt.Errorf("redisstore: %s: %w: unexpected reply of type %T", op, storage.ErrStoreUnavailable, reply)
}

// Complete implements [storage.Store.Complete] with one EVALSHA (followed by
// WAIT in the same round trip when Config.WaitReplicas is set). The client
// never resends it after a network error: had the first run stored the
// value, the second would answer ErrLeaseLost.
//
// Errors: storage.ErrLeaseLost; *storage.ValueTooLargeError; ErrInvalidArgs for a
// retention that is not positive or longer than 100 years;
// ErrUnknownFormat; ErrNotReplicated; any other failure wraps
// storage.ErrStoreUnavailable.
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "Complete", key, t, storage.StatusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail] as Complete does, storing cause.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "Fail", key, t, storage.StatusFailed, cause, retention)
}

func (s *Store) checkOutcome(op string, value []byte, retention time.Duration) error {
	if len(value) > s.cfg.MaxValueSize {
		return &storage.ValueTooLargeError{Store: "redisstore", Size: len(value), Max: s.cfg.MaxValueSize}
	}
	return checkDuration(op, "retention", retention)
}

func (s *Store) outcomeCmd(ctx context.Context, key string, t storage.Token, status storage.Status, value []byte, retention time.Duration) *evalCmd {
	return s.eval(ctx, outcomeScript, atMostOnce, key, holderPrefix(t), []byte{formatVersion, byte(status)}, value, millis(retention),
		finishedExpiry(retention))
}

// finishedExpiry returns the expiry that a record finished now with the
// retention holds, as the outcome scripts write it: this client's clock
// now plus the retention, in Unix milliseconds, 8 bytes big-endian (see
// protocol.go).
func finishedExpiry(retention time.Duration) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(time.Now().UnixMilli()+millis(retention)))
}

func (s *Store) finish(ctx context.Context, op, key string, t storage.Token, status storage.Status, value []byte, retention time.Duration) error {
	if err := s.checkOutcome(op, value, retention); err != nil {
		return err
	}
	if t == 0 { // never issued: no record can hold it
		return storage.ErrLeaseLost
	}
	cmd := s.outcomeCmd(ctx, key, t, status, value, retention)
	if s.cfg.WaitReplicas == 0 {
		reply, err := s.run(ctx, cmd)
		if err != nil {
			return unavailable(ctx, op, err)
		}
		return holderReply(op, reply)
	}
	verdict, err := await(ctx, func() error {
		node, err := s.primary(ctx, key)
		if err != nil {
			return unavailable(ctx, op, err)
		}
		cmds := []*evalCmd{cmd}
		acked, werr := s.pipelineAndWait(ctx, node, cmds)
		if err := cmds[0].Err(); err != nil {
			return unavailable(ctx, op, err)
		}
		if err := holderReply(op, cmds[0].Val()); err != nil {
			return err
		}
		return s.replicated(ctx, op, acked, werr)
	})
	if err != nil {
		return unavailable(ctx, op, err)
	}
	return verdict
}

// replicated checks the WAIT that followed an outcome write.
func (s *Store) replicated(ctx context.Context, op string, acked int64, err error) error {
	if err != nil {
		return fmt.Errorf("%w (WAIT failed: %w)", ErrNotReplicated, unavailable(ctx, op, err))
	}
	if acked < int64(s.cfg.WaitReplicas) {
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, s.cfg.WaitReplicas, s.cfg.WaitTimeout)
	}
	return nil
}

// Release implements [storage.Store.Release] with one EVALSHA: the token is
// zeroed, so neither it nor any other is current, and the lease ends, so
// the next Claim takes over at once: the key now expires the claim's
// retention from now. Not resent by the client, as Complete. Errors: storage.ErrLeaseLost; ErrUnknownFormat; any
// other failure wraps storage.ErrStoreUnavailable.
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	if t == 0 {
		return storage.ErrLeaseLost
	}
	reply, err := s.run(ctx, s.eval(ctx, releaseScript, atMostOnce, key, holderPrefix(t)))
	if err != nil {
		return unavailable(ctx, "Release", err)
	}
	return holderReply("Release", reply)
}

// Extend implements [storage.Store.Extend] with one EVALSHA: the lease ends
// lease from now on the Redis clock (later or sooner than it did), and the
// key expires the claim's retention after that. Errors:
// storage.ErrLeaseLost; ErrInvalidArgs; ErrUnknownFormat; any other failure
// wraps storage.ErrStoreUnavailable.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if err := checkDuration("Extend", "lease", lease); err != nil {
		return err
	}
	if t == 0 {
		return storage.ErrLeaseLost
	}
	reply, err := s.run(ctx, s.eval(ctx, extendScript, resendable, key, holderPrefix(t), millis(lease)))
	if err != nil {
		return unavailable(ctx, "Extend", err)
	}
	return holderReply("Extend", reply)
}

// DeleteIf implements [storage.Store.DeleteIf] with one EVALSHA that
// compares the record's version, status and token with the ones read
// and deletes the key when they match; Redis expires keys on its own
// clock, so an expired record is absent. Not resent by the client: a
// resent delete would find no record and answer ErrNotFound for the
// record it deleted. Errors: storage.ErrChanged; storage.ErrNotFound;
// ErrUnknownFormat; any other failure wraps storage.ErrStoreUnavailable.
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	reply, err := s.run(ctx, s.eval(ctx, deleteIfScript, atMostOnce, key, recordPrefix(status, t)))
	if err != nil {
		return unavailable(ctx, "DeleteIf", err)
	}
	switch n, _ := reply.(int64); n {
	case replyAbsent:
		return storage.ErrNotFound
	case replyLost:
		return storage.ErrChanged
	}
	return holderReply("DeleteIf", reply)
}

// holderReply turns the reply of a script that needs the current token
// into an error.
func holderReply(op string, reply any) error {
	switch n, _ := reply.(int64); n {
	case replyDone:
		return nil
	case replyLost:
		return storage.ErrLeaseLost
	case replyUnknown:
		return fmt.Errorf("%w (%s)", ErrUnknownFormat, op)
	}
	return badReply(op, reply)
}

// Get implements [storage.Store.Get] with one EVALSHA, which reads the value
// and its expiry together. Errors: storage.ErrNotFound; ErrUnknownFormat;
// *storage.ValueTooLargeError as for Claim; any other failure wraps
// storage.ErrStoreUnavailable.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	rec, size, err := s.get(ctx, "Get", key)
	if err == nil && size > 0 {
		return storage.Record{}, s.tooLarge(key, size)
	}
	return rec, err
}

// get reads the record of key with the get script, which leaves out a
// result longer than Config.MaxValueSize: rec is then the record without
// it, and size its length.
func (s *Store) get(ctx context.Context, op, key string) (rec storage.Record, size int, err error) {
	reply, err := s.run(ctx, s.eval(ctx, getScript, resendable, key, s.cfg.MaxValueSize))
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return storage.Record{}, 0, storage.ErrNotFound
		}
		return storage.Record{}, 0, unavailable(ctx, op, err)
	}
	r, ok := reply.([]any)
	if !ok {
		return storage.Record{}, 0, badReply(op, reply)
	}
	if len(r) == 0 {
		return storage.Record{}, 0, storage.ErrNotFound
	}
	return decodeReply(key, r)
}

// recordReply decodes the record of key from a script's reply r: its value
// and, when known, its expiry ms, and after them the length of a result
// longer than Config.MaxValueSize that the script left out of the value,
// which it refuses with a *storage.ValueTooLargeError.
func (s *Store) recordReply(key string, r []any) (storage.Record, error) {
	rec, size, err := decodeReply(key, r)
	if err == nil && size > 0 {
		return storage.Record{}, s.tooLarge(key, size)
	}
	return rec, err
}

// decodeReply decodes r as recordReply does, and returns the record
// without the result the script left out, and that result's length.
func decodeReply(key string, r []any) (rec storage.Record, size int, err error) {
	if _, other := r[0].(int64); other { // the scripts' mark of a key of another type
		return storage.Record{}, 0, fmt.Errorf("%w: the key holds a value of another type (a hash, a list…), not a string", ErrUnknownFormat)
	}
	v, _ := r[0].(string)
	var expires int64
	if len(r) > 1 {
		expires, _ = r[1].(int64)
	}
	rec, err = decodeRecord(key, v, expires)
	if err == nil && len(r) > 2 {
		n, _ := r[2].(int64)
		size = max(int(n), 1)
	}
	return rec, size, err
}

// tooLarge returns the refusal of key's record, whose result of size bytes
// is longer than Config.MaxValueSize.
func (s *Store) tooLarge(key string, size int) error {
	// A copy of the key: Claim's may be lent (see storage.Store).
	return &storage.ValueTooLargeError{Store: "redisstore", Size: size, Max: s.cfg.MaxValueSize, Key: strings.Clone(key), Stored: true}
}

// Delete implements [storage.Store.Delete] with one DEL. Errors: any failure
// wraps storage.ErrStoreUnavailable.
func (s *Store) Delete(ctx context.Context, key string) error {
	rkey := s.RedisKey(key)
	delErr, err := await(ctx, func() error { return s.client.Del(ctx, rkey).Err() })
	if err = cmp.Or(err, delErr); err != nil {
		return unavailable(ctx, "Delete", err)
	}
	return nil
}
