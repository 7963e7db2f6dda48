package redisstore_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// TestRecordRoundTrip holds the Lua encoder and the Go decoder to one
// format: every value the scripts write, read raw from Redis, decodes to
// the record Get returns and encodes back, in Go, to the same bytes.
func TestRecordRoundTrip(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	check := func(what, key string, retention time.Duration, want func(r storage.Record) bool) {
		t.Helper()
		raw, err := c.Get(ctx, s.RedisKey(key)).Bytes()
		if err != nil {
			t.Fatalf("%s: GET: %v", what, err)
		}
		expires, err := c.PExpireTime(ctx, s.RedisKey(key)).Result()
		if err != nil {
			t.Fatalf("%s: PEXPIRETIME: %v", what, err)
		}
		dec, err := redisstore.DecodeRecord(key, raw, expires.Milliseconds())
		if err != nil {
			t.Fatalf("%s: decoding %x: %v", what, raw, err)
		}
		got, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !sameRecord(dec, got) {
			t.Fatalf("%s: decoded %+v, Get says %+v", what, dec, got)
		}
		if !want(dec) {
			t.Fatalf("%s: decoded an unexpected record %+v", what, dec)
		}
		// A finished record holds its expiry: reckoned when the outcome
		// was sent (the attempt cap's, by the script), never after the
		// key's own, and here, where client and server share one clock,
		// within a second of it.
		if d := expires.Milliseconds() - dec.ExpiresAt.UnixMilli(); dec.Status.Done() && (d < 0 || d > 1000) {
			t.Fatalf("%s: the value holds the expiry %v, the key expires at %d ms", what, dec.ExpiresAt, expires.Milliseconds())
		}
		if enc := redisstore.EncodeRecord(dec, retention); !bytes.Equal(enc, raw) {
			t.Fatalf("%s: Lua wrote\n%x\nGo encodes\n%x", what, raw, enc)
		}
	}
	fps := [][]byte{nil, []byte("f"), bytes.Repeat([]byte{0, 0xff, '{'}, 100), make([]byte, 32)}
	results := [][]byte{nil, {0}, []byte("ok\x00\xff}"), bytes.Repeat([]byte("result"), 1000)}
	for i, fp := range fps {
		key := string([]byte{byte(i), '{', 0})
		a := storage.ClaimArgs{Key: key, Fingerprint: fp, Lease: time.Minute + time.Microsecond, Retention: 3*time.Hour + time.Microsecond, MaxAttempts: 2}
		cl, err := s.Claim(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		check("claimed", key, a.Retention, func(r storage.Record) bool {
			// The lease is whole milliseconds, rounded up, and the
			// retention too: the lease ends as long before the expiry.
			return r.Status == storage.StatusInProgress && r.Token == cl.Token && r.Attempt == 1 && bytes.Equal(r.Fingerprint, fp) &&
				r.ExpiresAt.Sub(r.LeaseUntil) == 3*time.Hour+time.Millisecond && r.Result == nil
		})
		if err := s.Extend(ctx, key, cl.Token, time.Hour); err != nil {
			t.Fatal(err)
		}
		check("extended", key, a.Retention, func(r storage.Record) bool { return r.LeaseUntil.After(cl.Record.LeaseUntil) })
		if err := s.Release(ctx, key, cl.Token); err != nil {
			t.Fatal(err)
		}
		check("released", key, a.Retention, func(r storage.Record) bool { return r.Token == 0 && r.LeaseUntil.IsZero() && r.Attempt == 1 })
		cl, _ = s.Claim(ctx, a)
		check("taken over", key, a.Retention, func(r storage.Record) bool { return r.Token == cl.Token && r.Attempt == 2 })
		result := results[i]
		if i%2 == 0 {
			err = s.Complete(ctx, key, cl.Token, result, 5*time.Hour)
		} else {
			err = s.Fail(ctx, key, cl.Token, result, 5*time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
		// The value keeps the claim's retention.
		check("outcome", key, a.Retention, func(r storage.Record) bool {
			return r.Status.Done() && r.Token == cl.Token && r.Attempt == 2 && bytes.Equal(r.Result, result) && r.LeaseUntil.IsZero()
		})

		capped := a
		capped.Key += "capped"
		capped.MaxAttempts = 1
		cl, _ = s.Claim(ctx, capped)
		s.Release(ctx, capped.Key, cl.Token)
		if d, _ := s.Claim(ctx, capped); d.Outcome != storage.Duplicate {
			t.Fatalf("claim over MaxAttempts: %v", d.Outcome)
		}
		check("over MaxAttempts", capped.Key, capped.Retention, func(r storage.Record) bool {
			return r.Status == storage.StatusFailed && r.Token == 0 && errors.Is(storage.DecodeFailure(r.Result), idem.ErrTooManyAttempts)
		})
	}
}

func sameRecord(a, b storage.Record) bool {
	return a.Key == b.Key && a.Status == b.Status && a.Token == b.Token && a.Attempt == b.Attempt &&
		bytes.Equal(a.Fingerprint, b.Fingerprint) && bytes.Equal(a.Result, b.Result) &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// FuzzDecodeRecord feeds the decoder arbitrary bytes and expiries: it never
// panics, it refuses what is not a record with ErrUnknownFormat, a lease
// it derives ends before the key expires, and what it accepts encodes and
// decodes back to the same record.
func FuzzDecodeRecord(f *testing.F) {
	const expires = 1795340671542
	for _, r := range []storage.Record{
		{Status: storage.StatusInProgress, Token: 1<<64 - 1, Attempt: 1, Fingerprint: []byte("fp")},
		{Status: storage.StatusCompleted, Token: 7, Attempt: 3, Fingerprint: make([]byte, 32), Result: []byte("value\x00"), ExpiresAt: time.UnixMilli(expires)},
		{Status: storage.StatusFailed, Attempt: 9, Result: storage.TooManyAttemptsCause(), ExpiresAt: time.UnixMilli(expires)},
	} {
		f.Add(redisstore.EncodeRecord(r, time.Hour), int64(expires))
	}
	f.Add([]byte{}, int64(0))
	f.Add([]byte{1, 1}, int64(expires))
	f.Add(append([]byte{3, 1}, make([]byte, 22)...), int64(-1))
	f.Fuzz(func(t *testing.T, v []byte, expiresMs int64) {
		r, err := redisstore.DecodeRecord("k", v, expiresMs)
		if err != nil {
			if !errors.Is(err, redisstore.ErrUnknownFormat) {
				t.Fatalf("error %v does not wrap ErrUnknownFormat", err)
			}
			return
		}
		if !r.LeaseUntil.IsZero() && !r.LeaseUntil.Before(r.ExpiresAt) {
			t.Fatalf("lease ends %v, not before the expiry %v", r.LeaseUntil, r.ExpiresAt)
		}
		ret := time.Hour
		if !r.LeaseUntil.IsZero() {
			ret = r.ExpiresAt.Sub(r.LeaseUntil)
		}
		enc := redisstore.EncodeRecord(r, ret)
		for i := range v {
			v[i] ^= 0xff // the record must not alias the input
		}
		if !bytes.Equal(redisstore.EncodeRecord(r, ret), enc) {
			t.Fatalf("the decoded record %+v shares memory with its input", r)
		}
		again, err := redisstore.DecodeRecord("k", enc, expiresMs)
		if err != nil || !sameRecord(r, again) {
			t.Fatalf("decoded %+v; re-encoded it decodes to %+v, %v", r, again, err)
		}
	})
}
