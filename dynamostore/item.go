package dynamostore

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem/storage"
)

// The attributes of a record's item. The partition key and the TTL
// attribute have the names AWS Lambda Powertools gives them, so a table
// made for Powertools' idempotency utility serves this store as it is.
const (
	AttrKey          = "id"            // S, partition key: the store key in unpadded base64url
	AttrStatus       = "status"        // S: INPROGRESS, COMPLETED or FAILED
	AttrToken        = "token"         // N: the current claim's token; 0 after Release
	AttrAttempt      = "attempt"       // N: claims of the key, 1 at the first
	AttrFingerprint  = "fingerprint"   // B: the payload's fingerprint, fixed at the first claim
	AttrLeaseUntil   = "lease_until"   // N: the lease end, Unix milliseconds; 0 after Release; left, unread, on an outcome
	AttrExpiresAt    = "expires_at"    // N: when the record counts as absent, Unix milliseconds
	AttrExpiration   = "expiration"    // N: the TTL attribute, Unix seconds, at or after expires_at
	AttrRetention    = "retention"     // N: the claim's retention in milliseconds; left, unread, on an outcome
	AttrRetentionTTL = "retention_ttl" // N: seconds from a lease end to its expiration; left, unread, on an outcome
	AttrResult       = "result"        // B: Completed: the value; Failed: the encoded cause
)

// The values of [AttrStatus].
const (
	statusInProgress = "INPROGRESS"
	statusCompleted  = "COMPLETED"
	statusFailed     = "FAILED"
)

func statusString(s storage.Status) string {
	switch s {
	case storage.StatusCompleted:
		return statusCompleted
	case storage.StatusFailed:
		return statusFailed
	}
	return statusInProgress
}

// itemKey returns the partition key value of a store key. base64url is
// injective, so no two store keys share an item, whatever their bytes, and
// the value is valid UTF-8, as DynamoDB requires of a string.
func itemKey(key string) types.AttributeValue {
	return &types.AttributeValueMemberS{Value: base64.RawURLEncoding.EncodeToString([]byte(key))}
}

// keyOf returns the primary key of a store key's item.
func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrKey: itemKey(key)}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func tokenValue(t storage.Token) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(t), 10)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// bin returns a binary value; nil becomes empty, which DynamoDB accepts
// outside keys.
func bin(b []byte) types.AttributeValue {
	if b == nil {
		b = []byte{}
	}
	return &types.AttributeValueMemberB{Value: b}
}

// decodeItem turns a record's item into the Record of key. An item this
// package did not write (a missing or mistyped attribute, an unknown
// status) is ErrUnknownFormat; attributes it does not know are ignored.
func decodeItem(key string, item map[string]types.AttributeValue) (storage.Record, error) {
	r := storage.Record{Key: key}
	st, err := getS(item, AttrStatus)
	if err != nil {
		return storage.Record{}, err
	}
	switch st {
	case statusInProgress:
		r.Status = storage.StatusInProgress
	case statusCompleted:
		r.Status = storage.StatusCompleted
	case statusFailed:
		r.Status = storage.StatusFailed
	default:
		return storage.Record{}, fmt.Errorf("%w: %s %q", ErrUnknownFormat, AttrStatus, st)
	}
	tok, err := getN(item, AttrToken)
	if err != nil {
		return storage.Record{}, err
	}
	r.Token = storage.Token(tok)
	att, err := getN(item, AttrAttempt)
	if err != nil {
		return storage.Record{}, err
	}
	if att < 1 || att > maxAttempt {
		return storage.Record{}, fmt.Errorf("%w: %s %d", ErrUnknownFormat, AttrAttempt, att)
	}
	r.Attempt = int(att)
	if r.Fingerprint, err = getB(item, AttrFingerprint); err != nil {
		return storage.Record{}, err
	}
	exp, err := getN(item, AttrExpiresAt)
	if err != nil {
		return storage.Record{}, err
	}
	r.ExpiresAt = time.UnixMilli(int64(exp))
	if r.Status == storage.StatusInProgress {
		lease, err := getN(item, AttrLeaseUntil)
		if err != nil {
			return storage.Record{}, err
		}
		r.LeaseUntil = fromMillis(lease)
		return r, nil
	}
	if r.Result, err = getB(item, AttrResult); err != nil {
		return storage.Record{}, err
	}
	return r, nil
}

// maxAttempt bounds the attempt counter decodeItem accepts, so that it fits
// an int everywhere.
const maxAttempt = 1<<31 - 1

func getS(item map[string]types.AttributeValue, name string) (string, error) {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", missing(item, name, "S")
	}
	return v.Value, nil
}

// getN reads a whole number that is not negative and fits 64 bits unsigned
// (tokens) or signed (everything else).
func getN(item map[string]types.AttributeValue, name string) (uint64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, missing(item, name, "N")
	}
	n, err := strconv.ParseUint(v.Value, 10, 64)
	if err != nil || (name != AttrToken && n > 1<<63-1) {
		return 0, fmt.Errorf("%w: %s %q is not a whole number in range", ErrUnknownFormat, name, v.Value)
	}
	return n, nil
}

func getB(item map[string]types.AttributeValue, name string) ([]byte, error) {
	v, ok := item[name].(*types.AttributeValueMemberB)
	if !ok {
		return nil, missing(item, name, "B")
	}
	return v.Value, nil
}

func missing(item map[string]types.AttributeValue, name, typ string) error {
	if item[name] == nil {
		return fmt.Errorf("%w: no attribute %s", ErrUnknownFormat, name)
	}
	return fmt.Errorf("%w: attribute %s is a %T, not %s", ErrUnknownFormat, name, item[name], typ)
}

// fromMillis returns the time of Unix milliseconds ms; 0 (a released lease)
// is the zero Time.
func fromMillis(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}
