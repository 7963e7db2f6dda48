package cassandrastore

import (
	"bytes"
	"fmt"
	"time"

	"github.com/idemgo/idem/storage"
)

// The columns of the records table, as [Migrate] creates it and the README
// shows it. Every write of a record writes every column but k, with one
// TTL, so that no column of a live record expires before the others.
const (
	ColKey        = "k"           // blob, the partition key: the store key's bytes
	ColStatus     = "status"      // text: in_progress, completed or failed
	ColToken      = "tok"         // bigint: the current claim's token; 0 after Release ("token" is a CQL keyword)
	ColAttempt    = "attempt"     // int: claims of the key, 1 at the first
	ColFinger     = "fp"          // blob: the payload's fingerprint, fixed at the first claim
	ColLeaseUntil = "lease_until" // bigint: the lease end, Unix ms; 0 after Release and on an outcome
	ColExpiresAt  = "expires_at"  // bigint: when the record counts as absent, Unix ms
	ColRetention  = "retention"   // bigint: the claim's retention in ms, which Extend adds to the lease end
	ColResult     = "result"      // blob: Completed: the value; Failed: the encoded cause
)

// The values of [ColStatus].
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
)

// row is a record as its columns hold it. A zero row is no record: a
// partition that does not exist, or whose cells all expired.
type row struct {
	status     string
	tok        int64
	attempt    int
	fp         []byte
	leaseUntil int64
	expiresAt  int64
	retention  int64
	result     []byte
}

func (r *row) absent() bool { return r.status == "" }

// same reports whether r and o hold the same record, as the conditions
// compare them (their lease ends and results aside).
func (r *row) same(o *row) bool {
	return r.status == o.status && r.tok == o.tok && r.attempt == o.attempt && bytes.Equal(r.fp, o.fp) &&
		r.retention == o.retention && r.expiresAt == o.expiresAt
}

// equal reports whether r and o are the same row, column by column.
func (r *row) equal(o *row) bool {
	return r.same(o) && r.leaseUntil == o.leaseUntil && bytes.Equal(r.result, o.result)
}

// scanRow fills a row from the columns of a SELECT or of a conditional
// write's answer, as the driver's MapScan gives them (a null as the zero
// value; a column that is not there is left zero).
func scanRow(m map[string]any) (row, error) {
	var r row
	var ok bool
	for name, v := range m {
		switch name {
		case ColStatus:
			r.status, ok = v.(string)
		case ColToken:
			r.tok, ok = v.(int64)
		case ColAttempt:
			r.attempt, ok = v.(int)
		case ColFinger:
			r.fp, ok = v.([]byte)
		case ColLeaseUntil:
			r.leaseUntil, ok = v.(int64)
		case ColExpiresAt:
			r.expiresAt, ok = v.(int64)
		case ColRetention:
			r.retention, ok = v.(int64)
		case ColResult:
			r.result, ok = v.([]byte)
		default:
			continue
		}
		if !ok {
			return row{}, fmt.Errorf("%w: column %s holds a %T", ErrUnknownFormat, name, v)
		}
	}
	switch r.status {
	case "", statusInProgress, statusCompleted, statusFailed:
		return r, nil
	}
	return row{}, fmt.Errorf("%w: status %q", ErrUnknownFormat, r.status)
}

// record returns the storage.Record of key that r holds.
func (r *row) record(key string) storage.Record {
	rec := storage.Record{
		Key:         key,
		Token:       storage.Token(r.tok),
		Attempt:     r.attempt,
		Fingerprint: r.fp,
		ExpiresAt:   time.UnixMilli(r.expiresAt),
	}
	rec.Status = storage.StatusInProgress
	for st, name := range statusNames {
		if name != "" && name == r.status {
			rec.Status = storage.Status(st)
		}
	}
	if rec.Status == storage.StatusInProgress {
		if r.leaseUntil != 0 {
			rec.LeaseUntil = time.UnixMilli(r.leaseUntil)
		}
	} else {
		rec.Result = r.result
	}
	return rec
}

// statusNames holds the value of ColStatus of each storage.Status.
var statusNames = [...]string{
	storage.StatusInProgress: statusInProgress,
	storage.StatusCompleted:  statusCompleted,
	storage.StatusFailed:     statusFailed,
}

// statusOf returns the value of ColStatus of s, "" for no status.
func statusOf(s storage.Status) string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return ""
}
