package dynamostore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemgo/idem/storage"
)

// API is the part of the DynamoDB client the store uses. *dynamodb.Client
// implements it; so does a wrapper of one (for metrics or tests).
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// Table is the name of the records table (see [CreateTable] for its
	// shape). Default "idem_records".
	Table string

	// MaxClockSkew is the largest difference the store tolerates between
	// the clocks of any two hosts that share the table. DynamoDB has no
	// clock a condition can read, so leases and expiry are written and
	// compared on the clocks of the hosts: a lease or record counts as
	// over only MaxClockSkew after its end on the reader's clock. Hosts
	// whose clocks differ by more can run one operation twice at once (see
	// the package documentation). It also delays a takeover after a crash
	// by as much. Default 1s; from 1ms to 1h.
	MaxClockSkew time.Duration

	// MaxValueSize is the longest value (Complete) or encoded cause (Fail)
	// accepted, in bytes; a longer one gets a *storage.ValueTooLargeError and
	// nothing is written. Default and most: MaxValueSizeLimit, which keeps
	// every item, with the longest key and fingerprint, under DynamoDB's
	// 400 KB item limit.
	MaxValueSize int

	// BatchConcurrency is how many conditional writes ClaimBatch and
	// CompleteBatch have in flight at once. Default 16; from 1 to 256.
	BatchConcurrency int

	// Now is the clock of this host, read once per call. Default time.Now;
	// set it in tests.
	Now func() time.Time
}

// Defaults and limits of [Config] and of the store's arguments.
const (
	DefaultTable            = "idem_records"
	DefaultMaxClockSkew     = time.Second
	DefaultBatchConcurrency = 16

	// ItemSizeLimit is DynamoDB's limit on an item's size: attribute names
	// and values together.
	ItemSizeLimit = 400 * 1024
	// MaxKeyLen is the longest store key, in bytes: its base64url form is
	// 2048 bytes, the longest partition key DynamoDB accepts.
	MaxKeyLen = 1536
	// MaxFingerprintLen is the longest fingerprint accepted, in bytes.
	MaxFingerprintLen = 1024
	// MaxValueSizeLimit is the longest value a record can hold: the item
	// limit less 4 KiB for the key, the fingerprint and the other
	// attributes at their largest.
	MaxValueSizeLimit = ItemSizeLimit - 4096
)

// maxDuration bounds leases and retentions.
const maxDuration = 100 * 365 * 24 * time.Hour

// maxRounds bounds the conditional writes of one claim: a claim writes
// again only when the record changed since it was read.
const maxRounds = 8

// Store is an [storage.Store] over one DynamoDB table: one item per record,
// every transition one conditional write. It holds no goroutine and no
// connection of its own; the client belongs to the caller (endpoint,
// credentials, retries, HTTP client). It is safe for concurrent use.
type Store struct {
	api  API
	cfg  Config
	skew int64 // MaxClockSkew in milliseconds, rounded up
}

var (
	_ storage.Store = (*Store)(nil)
)

// New returns a Store over the table cfg.Table through api (a
// *dynamodb.Client). It fails when api is nil or a Config field is out of
// range; the error names the field. It does not contact DynamoDB: a missing
// table or an unreachable endpoint shows in the first call.
func New(api API, cfg Config) (*Store, error) {
	if api == nil {
		return nil, errors.New("dynamostore: New: client is nil")
	}
	switch {
	case cfg.Table != "" && !validTable.MatchString(cfg.Table):
		return nil, fmt.Errorf("dynamostore: Config.Table %q: must be 3 to 255 letters, digits, '_', '-' or '.'", cfg.Table)
	case cfg.MaxClockSkew < 0 || (cfg.MaxClockSkew > 0 && cfg.MaxClockSkew < time.Millisecond) || cfg.MaxClockSkew > time.Hour:
		return nil, fmt.Errorf("dynamostore: Config.MaxClockSkew %v: must be between 1ms and 1h", cfg.MaxClockSkew)
	case cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit:
		return nil, fmt.Errorf("dynamostore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	case cfg.BatchConcurrency < 0 || cfg.BatchConcurrency > 256:
		return nil, fmt.Errorf("dynamostore: Config.BatchConcurrency %d: must be between 1 and 256", cfg.BatchConcurrency)
	}
	cfg.Table = cmp.Or(cfg.Table, DefaultTable)
	cfg.MaxClockSkew = cmp.Or(cfg.MaxClockSkew, DefaultMaxClockSkew)
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, MaxValueSizeLimit)
	cfg.BatchConcurrency = cmp.Or(cfg.BatchConcurrency, DefaultBatchConcurrency)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{api: api, cfg: cfg, skew: ceilMillis(cfg.MaxClockSkew)}, nil
}

var validTable = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Config returns the Store's configuration with the defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// MaxValueSize returns Config.MaxValueSize: the longest value Complete
// accepts, so that a caller (the HTTP middleware) never produces one the
// store must refuse.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// clock is one reading of the host's clock, in Unix milliseconds: now, and
// dead, the moment before which a lease or an expiry has passed on every
// host whose clock is within MaxClockSkew of this one.
type clock struct{ now, dead int64 }

func (s *Store) clock() clock {
	now := s.cfg.Now().UnixMilli()
	return clock{now: now, dead: now - s.skew}
}

// expiration returns the TTL attribute for a record that expires at exp
// (Unix ms): whole seconds, rounded up, after every host within
// MaxClockSkew has seen it expire. DynamoDB deletes the item some time
// after that; until then every condition treats it as absent.
func (s *Store) expiration(exp int64) int64 { return ceilDiv(exp+s.skew, 1000) }

// retentionTTL returns the seconds from a lease end to the TTL of a record
// kept retention after it (see AttrRetentionTTL): Extend adds it to the
// new lease end's whole seconds, as DynamoDB cannot divide.
func (s *Store) retentionTTL(retention int64) int64 { return ceilDiv(retention+s.skew, 1000) + 1 }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilMillis returns d in milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// millis returns t in Unix milliseconds, the zero Time as 0.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// newToken returns a random nonzero token.
func newToken() storage.Token {
	for {
		if t := rand.Uint64(); t != 0 {
			return storage.Token(t)
		}
	}
}

// Expressions name every attribute by a placeholder (several are DynamoDB
// reserved words); an expr carries the placeholders its expressions use,
// and no others, as DynamoDB requires.
type expr struct {
	update, cond *string
	names        map[string]string
}

var placeholders = map[string]string{
	"#id": AttrKey, "#st": AttrStatus, "#tok": AttrToken, "#att": AttrAttempt, "#fp": AttrFingerprint,
	"#lease": AttrLeaseUntil, "#exp": AttrExpiresAt, "#ttl": AttrExpiration, "#ret": AttrRetention,
	"#rett": AttrRetentionTTL, "#res": AttrResult,
}

var placeholder = regexp.MustCompile(`#[a-z]+`)

func newExpr(update, cond string) expr {
	e := expr{cond: aws.String(cond), names: map[string]string{}}
	if update != "" {
		e.update = aws.String(update)
	}
	for _, p := range placeholder.FindAllString(update+" "+cond, -1) {
		e.names[p] = placeholders[p]
	}
	return e
}

// The conditions and updates. An outcome leaves the claim's lease_until,
// retention and retention_ttl in the item, unread: removing them would
// cost every outcome write more than the few bytes they take.
//
// A record whose expires_at has passed (by :dead) counts as absent in
// every condition: DynamoDB's TTL deletes items lazily, typically within a
// few days. A holder's write needs its token, on an InProgress record; a
// takeover needs the record as the claim saw it, unchanged in every
// attribute the state machine reads, with its lease over.
const (
	absent = "attribute_not_exists(#id) OR #exp < :dead"
	holder = "#tok = :tok AND #st = :ip AND #exp >= :dead"
	seen   = "#tok = :seentok AND #att = :seenatt AND #st = :ip AND #fp = :fp AND #lease < :dead AND #exp >= :dead"
)

var (
	createExpr   = newExpr("", absent)
	takeoverExpr = newExpr("SET #tok = :tok, #att = :att, #lease = :lease, #exp = :exp, #ttl = :ttl, #ret = :ret, #rett = :rett", seen)
	exceedExpr   = newExpr("SET #st = :failed, #tok = :zero, #res = :res, #exp = :exp, #ttl = :ttl", seen)
	finishExpr   = newExpr("SET #st = :st, #res = :res, #exp = :exp, #ttl = :ttl", holder)
	releaseExpr  = newExpr("SET #tok = :zero, #lease = :zero", holder)
	extendExpr   = newExpr("SET #lease = :lease, #exp = :lease + #ret, #ttl = :ttlbase + #rett", holder)
	deleteIfExpr = newExpr("", "#st = :st AND #tok = :tok AND #exp >= :dead")
)

// update returns the UpdateItem of e on key's item with values.
func (s *Store) update(key string, e expr, values map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 &s.cfg.Table,
		Key:                       keyOf(key),
		UpdateExpression:          e.update,
		ConditionExpression:       e.cond,
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: values,
	}
}

var (
	inProgress = str(statusInProgress)
	zero       = num(0)
)

// Claim implements [storage.Store.Claim]. A new key (or one whose record
// expired) is one PutItem conditioned on the item being absent or expired.
// When that condition fails, the item that failed it answers the claim:
// the one DynamoDB returns with the failure
// (ReturnValuesOnConditionCheckFailure), or, from a server that returns
// none (dynalite), one strongly consistent GetItem. A record whose lease is
// over is then taken over by one UpdateItem conditioned on the record
// being still as read (token, attempt, status, fingerprint), its lease
// still over and the record not expired; if it changed meanwhile, the item
// that failed that condition answers again. Busy answers carry the
// holder's record without its token.
//
// The token is 64 random bits, never zero, drawn in this process. A claim
// the client resent after a lost reply finds its own token and answers
// Acquired. Leases and expiry are this host's clock (see Config.MaxClockSkew).
//
// Errors: storage.ErrKeyReused; ErrInvalidArgs (nothing sent); ErrUnknownFormat
// for an item this package did not write; ErrContention after eight rounds
// of a record changing under the claim; SDK failures as described at
// translate, most wrapping storage.ErrStoreUnavailable.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := checkClaim("Claim", a); err != nil {
		return storage.Claim{}, err
	}
	return s.claim(ctx, a)
}

func checkClaim(op string, a storage.ClaimArgs) error {
	if err := checkKey(op, a.Key); err != nil {
		return err
	}
	if err := checkDuration(op, "lease", a.Lease); err != nil {
		return err
	}
	if err := checkDuration(op, "retention", a.Retention); err != nil {
		return err
	}
	if len(a.Fingerprint) > MaxFingerprintLen {
		return fmt.Errorf("%w: %s: fingerprint of %d bytes, longer than %d", ErrInvalidArgs, op, len(a.Fingerprint), MaxFingerprintLen)
	}
	return nil
}

func checkKey(op, key string) error {
	if key == "" {
		return fmt.Errorf("%w: %s: empty key: %w", ErrInvalidArgs, op, storage.ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %s: key of %d bytes, longer than %d: %w", ErrInvalidArgs, op, len(key), MaxKeyLen, storage.ErrInvalidKey)
	}
	return nil
}

func checkDuration(op, name string, d time.Duration) error {
	if d <= 0 || d > maxDuration {
		return fmt.Errorf("%w: %s: %s %v must be positive and at most 100 years", ErrInvalidArgs, op, name, d)
	}
	return nil
}

// claiming is one claim in progress: its arguments, token and times.
type claiming struct {
	a     storage.ClaimArgs
	tok   storage.Token
	c     clock
	lease int64 // the new lease's end, Unix ms
	exp   int64 // the new record's expiry, Unix ms
	ret   int64 // the retention in ms
}

func (s *Store) claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	c := s.clock()
	w := &claiming{a: a, tok: newToken(), c: c, lease: c.now + ceilMillis(a.Lease), ret: ceilMillis(a.Retention)}
	w.exp = w.lease + w.ret
	var old map[string]types.AttributeValue
	for range maxRounds {
		if old == nil {
			var ok bool
			var err error
			if ok, old, err = s.create(ctx, w); err != nil {
				return storage.Claim{}, err
			}
			if ok {
				return w.acquired(1), nil
			}
			continue // the key was taken meanwhile: answer from its item
		}
		rec, err := decodeItem(a.Key, old)
		if err != nil {
			return storage.Claim{}, err
		}
		switch {
		case millis(rec.ExpiresAt) < c.dead: // read after it expired
			old = nil
		case rec.Token == w.tok && rec.Status == storage.StatusInProgress: // our claim, resent by the client
			return storage.Claim{Outcome: storage.Acquired, Token: w.tok, Record: rec}, nil
		case !bytes.Equal(rec.Fingerprint, a.Fingerprint):
			return storage.Claim{}, storage.ErrKeyReused
		case rec.Status.Done():
			return storage.Claim{Outcome: storage.Duplicate, Record: rec}, nil
		case millis(rec.LeaseUntil) >= c.dead:
			rec.Token = 0 // a Busy answer must not let its caller act as the holder
			return storage.Claim{Outcome: storage.Busy, Record: rec}, nil
		case a.MaxAttempts > 0 && rec.Attempt >= a.MaxAttempts:
			var ok bool
			if ok, old, err = s.exceed(ctx, w, rec); err != nil {
				return storage.Claim{}, err
			}
			if ok {
				rec.Status, rec.Token, rec.LeaseUntil = storage.StatusFailed, 0, time.Time{}
				rec.Result, rec.ExpiresAt = storage.TooManyAttemptsCause(), fromMillis(uint64(c.now+w.ret))
				return storage.Claim{Outcome: storage.Duplicate, Record: rec}, nil
			}
		default:
			var ok bool
			if ok, old, err = s.takeover(ctx, w, rec); err != nil {
				return storage.Claim{}, err
			}
			if ok {
				return w.acquired(rec.Attempt + 1), nil
			}
		}
	}
	return storage.Claim{}, ErrContention
}

func (w *claiming) acquired(attempt int) storage.Claim {
	return storage.Claim{Outcome: storage.Acquired, Token: w.tok, Record: storage.Record{
		Key:         w.a.Key,
		Status:      storage.StatusInProgress,
		Token:       w.tok,
		Attempt:     attempt,
		Fingerprint: bytes.Clone(w.a.Fingerprint),
		LeaseUntil:  fromMillis(uint64(w.lease)),
		ExpiresAt:   fromMillis(uint64(w.exp)),
	}}
}

// create puts the claim's new record if the key is absent or expired.
func (s *Store) create(ctx context.Context, w *claiming) (bool, map[string]types.AttributeValue, error) {
	_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.cfg.Table,
		Item: map[string]types.AttributeValue{
			AttrKey:          itemKey(w.a.Key),
			AttrStatus:       inProgress,
			AttrToken:        tokenValue(w.tok),
			AttrAttempt:      num(1),
			AttrFingerprint:  bin(w.a.Fingerprint),
			AttrLeaseUntil:   num(w.lease),
			AttrExpiresAt:    num(w.exp),
			AttrExpiration:   num(s.expiration(w.exp)),
			AttrRetention:    num(w.ret),
			AttrRetentionTTL: num(s.retentionTTL(w.ret)),
		},
		ConditionExpression:                 createExpr.cond,
		ExpressionAttributeNames:            createExpr.names,
		ExpressionAttributeValues:           map[string]types.AttributeValue{":dead": num(w.c.dead)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return s.conditional(ctx, "Claim", w.a.Key, err)
}

// seenValues returns the values of the condition that rec, as the claim
// read it, is unchanged and taken over.
func seenValues(w *claiming, rec storage.Record) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":seentok": tokenValue(rec.Token), ":seenatt": num(int64(rec.Attempt)), ":ip": inProgress,
		":fp": bin(rec.Fingerprint), ":dead": num(w.c.dead),
	}
}

// takeover gives the claim the record rec, whose lease is over.
func (s *Store) takeover(ctx context.Context, w *claiming, rec storage.Record) (bool, map[string]types.AttributeValue, error) {
	v := seenValues(w, rec)
	v[":tok"], v[":att"], v[":lease"] = tokenValue(w.tok), num(int64(rec.Attempt)+1), num(w.lease)
	v[":exp"], v[":ttl"] = num(w.exp), num(s.expiration(w.exp))
	v[":ret"], v[":rett"] = num(w.ret), num(s.retentionTTL(w.ret))
	in := s.update(w.a.Key, takeoverExpr, v)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := s.api.UpdateItem(ctx, in)
	return s.conditional(ctx, "Claim", w.a.Key, err)
}

// exceed marks the record rec, whose lease is over and whose attempts are
// spent, Failed with ErrTooManyAttempts.
func (s *Store) exceed(ctx context.Context, w *claiming, rec storage.Record) (bool, map[string]types.AttributeValue, error) {
	exp := w.c.now + w.ret
	v := seenValues(w, rec)
	v[":failed"], v[":zero"], v[":res"] = str(statusFailed), zero, bin(storage.TooManyAttemptsCause())
	v[":exp"], v[":ttl"] = num(exp), num(s.expiration(exp))
	in := s.update(w.a.Key, exceedExpr, v)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := s.api.UpdateItem(ctx, in)
	return s.conditional(ctx, "Claim", w.a.Key, err)
}

// conditional returns what a conditional write that ended with err did:
// applied, or not and the item as the failed condition found it (from
// DynamoDB's answer, or a strongly consistent read when the server sent no
// item; nil when there is none), or an error.
func (s *Store) conditional(ctx context.Context, op, key string, err error) (bool, map[string]types.AttributeValue, error) {
	if err == nil {
		return true, nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return false, nil, s.translate(op, err)
	}
	if ccf.Item != nil {
		return false, ccf.Item, nil
	}
	item, err := s.read(ctx, op, key)
	return false, item, err
}

// read returns key's item, nil when there is none, with a strongly
// consistent GetItem.
func (s *Store) read(ctx context.Context, op, key string) (map[string]types.AttributeValue, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.cfg.Table, Key: keyOf(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, s.translate(op, err)
	}
	return out.Item, nil
}

// Complete implements [storage.Store.Complete] with one UpdateItem
// conditioned on the token being current, the record InProgress and not
// expired. The record keeps the token and expires retention from now.
//
// The SDK's retryer may send the write again after a lost reply. When the
// condition then fails on the very outcome this call stored (same token,
// status and value), Complete answers nil, with one strongly consistent
// GetItem to tell; a single attempt that fails is ErrLeaseLost.
//
// Errors: storage.ErrLeaseLost; *storage.ValueTooLargeError and ErrInvalidArgs
// (nothing sent); SDK failures as for Claim.
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "Complete", key, t, storage.StatusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail] as Complete does, storing cause.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "Fail", key, t, storage.StatusFailed, cause, retention)
}

func (s *Store) checkOutcome(op, key string, value []byte, retention time.Duration) error {
	if len(value) > s.cfg.MaxValueSize {
		return &storage.ValueTooLargeError{Store: "dynamostore", Size: len(value), Max: s.cfg.MaxValueSize}
	}
	if err := checkKey(op, key); err != nil {
		return err
	}
	return checkDuration(op, "retention", retention)
}

func (s *Store) finish(ctx context.Context, op, key string, t storage.Token, status storage.Status, value []byte, retention time.Duration) error {
	if err := s.checkOutcome(op, key, value, retention); err != nil {
		return err
	}
	if t == 0 { // never issued: no record holds it
		return storage.ErrLeaseLost
	}
	c := s.clock()
	exp := c.now + ceilMillis(retention)
	in := s.update(key, finishExpr, map[string]types.AttributeValue{
		":st": str(statusString(status)), ":res": bin(value), ":exp": num(exp), ":ttl": num(s.expiration(exp)),
		":tok": tokenValue(t), ":ip": inProgress, ":dead": num(c.dead),
	})
	var attempts int
	_, err := s.api.UpdateItem(ctx, in, countAttempts(&attempts))
	if attempts < 2 || !isConditionFailed(err) {
		return s.holderErr(op, err)
	}
	// Sent more than once: the condition may have failed on what an
	// earlier attempt of this very call stored.
	item, rerr := s.read(ctx, op, key)
	if rerr != nil {
		return rerr
	}
	if rec, derr := decodeItem(key, item); derr == nil && rec.Status == status && rec.Token == t && bytes.Equal(rec.Result, value) {
		return nil
	}
	return storage.ErrLeaseLost
}

// holderErr translates the error of a write conditioned on the holder's
// token.
func (s *Store) holderErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case isConditionFailed(err):
		return storage.ErrLeaseLost
	}
	return s.translate(op, err)
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// countAttempts counts in n the attempts the SDK makes of one operation:
// its retryer runs the finalize step once per attempt.
func countAttempts(n *int) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("dynamostore.countAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					*n++
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

// Release implements [storage.Store.Release] with one UpdateItem conditioned
// as Complete's: the token becomes 0 and the lease end 0, so the next
// claim takes over at once, whatever its clock; the record's expiry does
// not change. A Release the SDK resent after a lost reply answers
// ErrLeaseLost, as its first attempt released the token. Errors:
// storage.ErrLeaseLost; SDK failures as for Claim.
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	if err := checkKey("Release", key); err != nil {
		return err
	}
	if t == 0 {
		return storage.ErrLeaseLost
	}
	c := s.clock()
	_, err := s.api.UpdateItem(ctx, s.update(key, releaseExpr, map[string]types.AttributeValue{
		":zero": zero, ":tok": tokenValue(t), ":ip": inProgress, ":dead": num(c.dead),
	}))
	return s.holderErr("Release", err)
}

// Extend implements [storage.Store.Extend] with one UpdateItem conditioned as
// Complete's: the lease ends lease from now on this host's clock (later or
// sooner than it did), and the record expires the claim's retention after
// that. Errors: storage.ErrLeaseLost; ErrInvalidArgs; SDK failures as for
// Claim.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if err := checkKey("Extend", key); err != nil {
		return err
	}
	if err := checkDuration("Extend", "lease", lease); err != nil {
		return err
	}
	if t == 0 {
		return storage.ErrLeaseLost
	}
	c := s.clock()
	end := c.now + ceilMillis(lease)
	_, err := s.api.UpdateItem(ctx, s.update(key, extendExpr, map[string]types.AttributeValue{
		":lease": num(end), ":ttlbase": num(end / 1000), ":tok": tokenValue(t), ":ip": inProgress, ":dead": num(c.dead),
	}))
	return s.holderErr("Extend", err)
}

// Get implements [storage.Store.Get] with one strongly consistent GetItem. A
// record that expired on this host's clock (less MaxClockSkew) but that
// DynamoDB has not deleted yet is ErrNotFound. Errors: storage.ErrNotFound;
// ErrUnknownFormat; SDK failures as for Claim.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := checkKey("Get", key); err != nil {
		return storage.Record{}, err
	}
	c := s.clock()
	item, err := s.read(ctx, "Get", key)
	if err != nil {
		return storage.Record{}, err
	}
	if item == nil {
		return storage.Record{}, storage.ErrNotFound
	}
	rec, err := decodeItem(key, item)
	if err != nil {
		return storage.Record{}, err
	}
	if millis(rec.ExpiresAt) < c.dead {
		return storage.Record{}, storage.ErrNotFound
	}
	return rec, nil
}

// DeleteIf implements [storage.Store.DeleteIf] with one DeleteItem
// conditioned on the status and token, and on the record being live by
// this host's clock less MaxClockSkew, as Get reads it. When the condition
// fails, one strongly consistent GetItem tells ErrNotFound from
// ErrChanged; a DeleteIf the SDK resent after a lost reply answers
// ErrNotFound, as its first attempt deleted the record. Errors:
// storage.ErrChanged; storage.ErrNotFound; SDK failures as for Claim.
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	if err := checkKey("DeleteIf", key); err != nil {
		return err
	}
	st := str(status.String()) // an unknown status: matches no item
	if status >= storage.StatusInProgress && status <= storage.StatusFailed {
		st = str(statusString(status))
	}
	c := s.clock()
	_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.cfg.Table, Key: keyOf(key),
		ConditionExpression: deleteIfExpr.cond, ExpressionAttributeNames: deleteIfExpr.names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":st": st, ":tok": tokenValue(t), ":dead": num(c.dead),
		},
	})
	if !isConditionFailed(err) {
		if err != nil {
			return s.translate("DeleteIf", err)
		}
		return nil
	}
	if _, err := s.Get(ctx, key); err != nil {
		return err // storage.ErrNotFound, or the read's failure
	}
	return storage.ErrChanged
}

// Delete implements [storage.Store.Delete] with one unconditional DeleteItem.
// Errors: SDK failures as for Claim.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey("Delete", key); err != nil {
		return err
	}
	_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.cfg.Table, Key: keyOf(key)})
	if err != nil {
		return s.translate("Delete", err)
	}
	return nil
}
