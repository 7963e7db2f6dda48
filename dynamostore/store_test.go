package dynamostore_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

func TestConformance(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	idemtest.Run(t, func(*testing.T) storage.Store { return s })
}

// A Busy answer names the holder's record but not its token: code that
// gets one must not be able to finish or release another's lease.
func TestBusyWithholdsToken(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	a := args("k", time.Minute)
	holder := mustClaim(t, s, a, storage.Acquired)
	b := mustClaim(t, s, a, storage.Busy)
	if b.Token != 0 || b.Record.Token != 0 {
		t.Fatalf("Busy answer carries token %d / record token %d, want none", b.Token, b.Record.Token)
	}
	if b.Record.Status != storage.StatusInProgress || b.Record.Attempt != 1 || !b.Record.LeaseUntil.Equal(holder.Record.LeaseUntil) {
		t.Fatalf("Busy record %+v, want the holder's (attempt 1, lease until %v)", b.Record, holder.Record.LeaseUntil)
	}
	if err := s.Complete(ctxT(t), a.Key, holder.Token, []byte("v"), time.Minute); err != nil {
		t.Fatalf("holder's Complete after a Busy claim: %v", err)
	}
}

func TestClaimBatch(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{BatchConcurrency: 8})
	ctx := ctxT(t)
	done := args("done", time.Minute)
	c := mustClaim(t, s, done, storage.Acquired)
	if err := s.Complete(ctx, done.Key, c.Token, []byte("done-value"), time.Minute); err != nil {
		t.Fatal(err)
	}
	busy := args("busy", time.Minute)
	mustClaim(t, s, busy, storage.Acquired)
	reused := args("done", time.Minute)
	reused.Fingerprint = []byte("another payload")

	// 40 new keys, each listed twice, around the three taken ones.
	var batch []storage.ClaimArgs
	for i := range 40 {
		batch = append(batch, args(fmt.Sprint("new-", i), time.Minute))
	}
	batch = append(batch, done, busy, reused)
	batch = append(batch, batch[:40]...)
	got, err := s.ClaimBatch(ctx, batch)
	if err != nil || len(got) != len(batch) {
		t.Fatalf("ClaimBatch: %d claims, %v", len(got), err)
	}
	tokens := map[storage.Token]bool{}
	for i := range 40 {
		first, second := got[i], got[43+i]
		if first.Outcome != storage.Acquired || first.Token == 0 || first.Record.Attempt != 1 || tokens[first.Token] {
			t.Fatalf("new key %d: %+v, want Acquired with a token of its own", i, first)
		}
		tokens[first.Token] = true
		if second.Outcome != storage.Busy || second.Record.Token != 0 || second.Record.Attempt != 1 {
			t.Fatalf("second entry of new key %d: %+v, want Busy behind the first, without its token", i, second)
		}
	}
	if d := got[40]; d.Outcome != storage.Duplicate || string(d.Record.Result) != "done-value" {
		t.Fatalf("completed key: %+v, want Duplicate done-value", d)
	}
	if b := got[41]; b.Outcome != storage.Busy || b.Record.Token != 0 {
		t.Fatalf("key in progress: %+v, want Busy without the token", b)
	}
	if !errors.Is(got[42].Err, idem.ErrKeyReused) {
		t.Fatalf("reused key: %+v, want Err ErrKeyReused", got[42])
	}

	cs := make([]storage.Completion, 0, 42)
	for i := range 40 {
		cs = append(cs, storage.Completion{Key: batch[i].Key, Token: got[i].Token, Value: []byte(fmt.Sprint("v", i)), Retention: time.Minute})
	}
	cs = append(cs,
		storage.Completion{Key: busy.Key, Token: got[0].Token, Value: []byte("foreign token"), Retention: time.Minute},
		storage.Completion{Key: storage.StoreKey("test", "absent"), Token: 7, Value: []byte("v"), Retention: time.Minute})
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil || len(errs) != len(cs) {
		t.Fatalf("CompleteBatch: %d errors, %v", len(errs), err)
	}
	for i := range 40 {
		if errs[i] != nil {
			t.Fatalf("CompleteBatch entry %d: %v", i, errs[i])
		}
		if d := mustClaim(t, s, batch[i], storage.Duplicate); string(d.Record.Result) != fmt.Sprint("v", i) {
			t.Fatalf("key %d after CompleteBatch: %q", i, d.Record.Result)
		}
	}
	if !errors.Is(errs[40], idem.ErrLeaseLost) || !errors.Is(errs[41], idem.ErrLeaseLost) {
		t.Fatalf("CompleteBatch with a foreign token and on an absent key: %v, %v; want ErrLeaseLost twice", errs[40], errs[41])
	}
	if got, err := s.ClaimBatch(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty ClaimBatch: %v, %v", got, err)
	}
}

// Values up to MaxValueSize fit an item with the longest key and
// fingerprint, as DynamoDB counts an item's size (dynalite counts it the
// same way); a longer one is refused before anything is written.
func TestValueSizeLimit(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	if s.MaxValueSize() != dynamostore.MaxValueSizeLimit {
		t.Fatalf("MaxValueSize() = %d, want the default %d", s.MaxValueSize(), dynamostore.MaxValueSizeLimit)
	}
	longKey := strings.Repeat("\xff", dynamostore.MaxKeyLen)
	fp := bytes.Repeat([]byte{0xfe}, dynamostore.MaxFingerprintLen)
	value := make([]byte, dynamostore.MaxValueSizeLimit)
	rand.Read(value)
	ctx := ctxT(t)
	for _, fail := range []bool{false, true} {
		a := storage.ClaimArgs{Key: longKey[:len(longKey)-len(fmt.Sprint(fail))] + fmt.Sprint(fail), Fingerprint: fp, Lease: time.Minute, Retention: time.Minute}
		c := mustClaim(t, s, a, storage.Acquired)
		var tooLarge *storage.ValueTooLargeError
		err := s.Complete(ctx, a.Key, c.Token, append(value, 0), time.Minute)
		if !errors.As(err, &tooLarge) || tooLarge.Size != len(value)+1 || tooLarge.Max != len(value) {
			t.Fatalf("Complete with %d bytes: %v, want *storage.ValueTooLargeError", len(value)+1, err)
		}
		if r, err := s.Get(ctx, a.Key); err != nil || r.Status != storage.StatusInProgress || r.Token != c.Token {
			t.Fatalf("after a refused value: %+v, %v; want the record unchanged", r, err)
		}
		if fail {
			err = s.Fail(ctx, a.Key, c.Token, value, time.Minute)
		} else {
			err = s.Complete(ctx, a.Key, c.Token, value, time.Minute)
		}
		if err != nil {
			t.Fatalf("outcome of %d bytes with a %d-byte key and a %d-byte fingerprint: %v", len(value), len(a.Key), len(fp), err)
		}
		if d := mustClaim(t, s, a, storage.Duplicate); !bytes.Equal(d.Record.Result, value) {
			t.Fatalf("the %d-byte outcome came back as %d different bytes", len(value), len(d.Record.Result))
		}
	}

	small, err := dynamostore.New(dynamostoretest.Client(t), dynamostore.Config{Table: s.Config().Table, MaxValueSize: 10})
	if err != nil || small.MaxValueSize() != 10 {
		t.Fatalf("New with MaxValueSize 10: %v, MaxValueSize() %d", err, small.MaxValueSize())
	}
	errs, err := small.CompleteBatch(ctx, []storage.Completion{{Key: "k", Token: 1, Value: make([]byte, 11), Retention: time.Minute}})
	if _, ok := errors.AsType[*storage.ValueTooLargeError](err); !ok || errs != nil {
		t.Fatalf("CompleteBatch with 11 bytes over a limit of 10: %v, %v; want *storage.ValueTooLargeError", errs, err)
	}
	if _, err := s.Claim(ctx, storage.ClaimArgs{Key: longKey + "x", Fingerprint: fp, Lease: time.Minute, Retention: time.Minute}); !errors.Is(err, idem.ErrInvalidKey) || !errors.Is(err, dynamostore.ErrInvalidArgs) {
		t.Fatalf("Claim of a %d-byte key: %v, want ErrInvalidArgs and idem.ErrInvalidKey", len(longKey)+1, err)
	}
}

// A duplicate is answered from the item DynamoDB returns with the failed
// condition: one request. dynalite returns none, and the store reads the
// item with one strongly consistent GetItem instead.
func TestDuplicateAnsweredFromFailedCondition(t *testing.T) {
	for _, returnsItem := range []bool{false, true} {
		t.Run(fmt.Sprintf("server returns the item=%v", returnsItem), func(t *testing.T) {
			p := &proxy{returnOld: returnsItem}
			s := dynamostoretest.Store(t, proxiedClient(t, p), dynamostore.Config{})
			ctx := ctxT(t)
			a := args("k", time.Minute)
			c := mustClaim(t, s, a, storage.Acquired)
			if err := s.Complete(ctx, a.Key, c.Token, []byte("v"), time.Minute); err != nil {
				t.Fatal(err)
			}
			p.take()
			want := []string{"PutItem", "GetItem"}
			if returnsItem {
				want = want[:1]
			}
			if d := mustClaim(t, s, a, storage.Duplicate); string(d.Record.Result) != "v" {
				t.Fatalf("duplicate: %q", d.Record.Result)
			}
			if ops := p.take(); !slices.Equal(ops, want) {
				t.Fatalf("a duplicate claim sent %v, want %v", ops, want)
			}
			other := a
			other.Fingerprint = []byte("other")
			if _, err := s.Claim(ctx, other); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("claim with another payload: %v, want ErrKeyReused", err)
			}
			if ops := p.take(); !slices.Equal(ops, want) {
				t.Fatalf("a reused key's claim sent %v, want %v", ops, want)
			}
		})
	}
}

// The SDK sends a request again when the reply to the first was lost. A
// resent claim finds its own token and a resent Complete its own outcome:
// both answer success, as the first attempt succeeded.
func TestResentAfterLostReply(t *testing.T) {
	p := &proxy{}
	c := proxiedClient(t, p, func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = noBackoff{} })
	})
	s := dynamostoretest.Store(t, c, dynamostore.Config{})
	ctx := ctxT(t)
	a := args("k", time.Minute)

	p.take()
	p.loseNext("PutItem", 1)
	cl := mustClaim(t, s, a, storage.Acquired)
	if ops := p.take(); !slices.Equal(ops, []string{"PutItem", "PutItem", "GetItem"}) {
		t.Fatalf("claim with a lost reply sent %v, want the PutItem twice and a GetItem", ops)
	}
	if r, err := s.Get(ctx, a.Key); err != nil || r.Token != cl.Token {
		t.Fatalf("record %+v, %v; want the resent claim's token %d", r, err, cl.Token)
	}

	p.loseNext("UpdateItem", 1)
	if err := s.Complete(ctx, a.Key, cl.Token, []byte("v"), time.Minute); err != nil {
		t.Fatalf("Complete whose first reply was lost: %v, want nil (its first attempt stored the value)", err)
	}
	if d := mustClaim(t, s, a, storage.Duplicate); string(d.Record.Result) != "v" {
		t.Fatalf("duplicate: %q", d.Record.Result)
	}
	// Without a resend, a Complete that finds the outcome stored is refused.
	if err := s.Complete(ctx, a.Key, cl.Token, []byte("v"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	// A resent Complete that finds another value was not the one that stored it.
	p.loseNext("UpdateItem", 1)
	b := args("other", time.Minute)
	bc := mustClaim(t, s, b, storage.Acquired)
	if err := s.Complete(ctx, b.Key, bc.Token, []byte("first"), time.Minute); err != nil {
		t.Fatal(err)
	}
	p.loseNext("UpdateItem", 1)
	if err := s.Complete(ctx, b.Key, bc.Token, []byte("second"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("resent Complete of another value: %v, want ErrLeaseLost", err)
	}
}

type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// A takeover is a conditional write on the record as the claim read it:
// of many claims of a record whose lease is over, one takes it over, and
// so after a Release, when the token is 0 at every round.
func TestTakeoverRace(t *testing.T) {
	clk := newClock()
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{Now: clk.now})
	a := args("k", time.Minute)
	first := mustClaim(t, s, a, storage.Acquired)
	clk.add(time.Minute + s.Config().MaxClockSkew + time.Millisecond) // the lease is over everywhere
	race := func(attempt int) storage.Claim {
		t.Helper()
		const n = 32
		var won atomic.Int32
		var winner storage.Claim
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				c, err := s.Claim(ctxT(t), a)
				switch {
				case err != nil:
					t.Errorf("Claim: %v", err)
				case c.Outcome == storage.Acquired:
					won.Add(1)
					winner = c
				case c.Outcome != storage.Busy:
					t.Errorf("Claim = %v, want Acquired or Busy", c.Outcome)
				}
			})
		}
		close(start)
		wg.Wait()
		if won.Load() != 1 || winner.Record.Attempt != attempt {
			t.Fatalf("%d concurrent takeovers: %d acquired (attempt %d), want 1 (attempt %d)", n, won.Load(), winner.Record.Attempt, attempt)
		}
		return winner
	}
	second := race(2)
	if err := s.Complete(ctxT(t), a.Key, first.Token, []byte("stale"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the displaced holder's Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctxT(t), a.Key, second.Token); err != nil {
		t.Fatal(err)
	}
	third := race(3)
	if err := s.Complete(ctxT(t), a.Key, third.Token, []byte("v"), time.Minute); err != nil {
		t.Fatalf("the last holder's Complete: %v", err)
	}
}

// A takeover's condition holds the attempt as well as the token: a record
// released, taken over and released again between a claim's read and its
// write has token 0 both times, and only the attempt tells the claim that
// it read an older record.
func TestTakeoverAfterReleaseInBetween(t *testing.T) {
	p := &proxy{}
	c := proxiedClient(t, p)
	late := dynamostoretest.Store(t, c, dynamostore.Config{})
	other, err := dynamostore.New(dynamostoretest.Client(t), late.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	a := args("k", time.Minute)
	first := mustClaim(t, other, a, storage.Acquired)
	if err := other.Release(ctx, a.Key, first.Token); err != nil {
		t.Fatal(err)
	}
	// The late claim reads the released record (token 0, attempt 1); before
	// its takeover reaches DynamoDB, another claim takes over and releases.
	var second storage.Claim
	p.beforeNext("UpdateItem", func() {
		second = mustClaim(t, other, a, storage.Acquired)
		if err := other.Release(ctx, a.Key, second.Token); err != nil {
			t.Error(err)
		}
	})
	third := mustClaim(t, late, a, storage.Acquired)
	if second.Record.Attempt != 2 || third.Record.Attempt != 3 {
		t.Fatalf("attempts %d then %d, want 2 then 3: the late claim took over the record it read, not the one there", second.Record.Attempt, third.Record.Attempt)
	}
	if r, err := late.Get(ctx, a.Key); err != nil || r.Attempt != 3 || r.Token != third.Token {
		t.Fatalf("record %+v, %v; want attempt 3 with the late claim's token", r, err)
	}
}

// DynamoDB deletes expired items when it gets to them, days later at
// worst. Until then the store treats them as absent: in Get, in a claim
// (a new record, another payload allowed) and in a holder's writes.
func TestExpiredItemsAreAbsent(t *testing.T) {
	clk := newClock()
	c := dynamostoretest.Client(t)
	s := dynamostoretest.Store(t, c, dynamostore.Config{Now: clk.now})
	table, skew, ctx := s.Config().Table, s.Config().MaxClockSkew, ctxT(t)

	done := args("done", time.Minute)
	cl := mustClaim(t, s, done, storage.Acquired)
	if err := s.Complete(ctx, done.Key, cl.Token, []byte("v"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	held := args("held", time.Second)
	held.Retention = 10 * time.Second
	h := mustClaim(t, s, held, storage.Acquired)

	clk.add(10*time.Second + skew) // expired here, but maybe not on a host MaxClockSkew ahead
	mustClaim(t, s, done, storage.Duplicate)
	if _, err := s.Get(ctx, held.Key); err != nil {
		t.Fatalf("Get of a record within the skew margin of its expiry: %v", err)
	}
	clk.add(time.Second + time.Millisecond) // expired everywhere

	if _, err := s.Get(ctx, done.Key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get of an expired record: %v, want ErrNotFound", err)
	}
	if rawItem(t, c, table, done.Key) == nil {
		t.Fatal("the expired item is gone from the table: the test shows nothing")
	}
	if err := s.Extend(ctx, held.Key, h.Token, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Extend of an expired claim: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, held.Key, h.Token, []byte("late"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete of an expired claim: %v, want ErrLeaseLost", err)
	}
	done.Fingerprint = []byte("another payload")
	again := mustClaim(t, s, done, storage.Acquired)
	if again.Record.Attempt != 1 || again.Token == cl.Token {
		t.Fatalf("claim of an expired key: %+v, want a new record (attempt 1, a new token)", again.Record)
	}
}

// The item holds the documented attributes, and its TTL attribute stays at
// or after its expiry, plus the skew margin, through every transition.
func TestItemAttributes(t *testing.T) {
	clk := newClock()
	c := dynamostoretest.Client(t)
	s := dynamostoretest.Store(t, c, dynamostore.Config{Now: clk.now, MaxClockSkew: 1500 * time.Millisecond})
	table, ctx := s.Config().Table, ctxT(t)
	a := args("k", 10*time.Second)
	a.Retention = time.Hour
	cl := mustClaim(t, s, a, storage.Acquired)

	check := func(when string, want ...string) map[string]types.AttributeValue {
		t.Helper()
		item := rawItem(t, c, table, a.Key)
		var names []string
		for n := range item {
			names = append(names, n)
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Fatalf("%s: attributes %v, want %v", when, names, want)
		}
		exp := numAttr(t, item, dynamostore.AttrExpiresAt)
		if ttl := numAttr(t, item, dynamostore.AttrExpiration); ttl*1000 < exp+1500 || ttl*1000 > exp+1500+2000 {
			t.Fatalf("%s: expiration %d s for expires_at %d ms: want the first seconds after expires_at + 1.5s", when, ttl, exp)
		}
		return item
	}
	inProgress := []string{"id", "status", "token", "attempt", "fingerprint", "lease_until", "expires_at", "expiration", "retention", "retention_ttl"}
	item := check("claimed", inProgress...)
	now := clk.now().UnixMilli()
	if numAttr(t, item, "lease_until") != now+10_000 || numAttr(t, item, "expires_at") != now+10_000+3_600_000 || numAttr(t, item, "retention") != 3_600_000 {
		t.Fatalf("claimed: %v, want the lease 10s from now and expiry an hour after it", item)
	}
	if s, _ := item["status"].(*types.AttributeValueMemberS); s == nil || s.Value != "INPROGRESS" {
		t.Fatalf("claimed: status %v", item["status"])
	}

	clk.add(5 * time.Second)
	if err := s.Extend(ctx, a.Key, cl.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	item = check("extended", inProgress...)
	now = clk.now().UnixMilli()
	if numAttr(t, item, "lease_until") != now+60_000 || numAttr(t, item, "expires_at") != now+60_000+3_600_000 {
		t.Fatalf("extended: %v, want the lease a minute from now and expiry an hour after it", item)
	}
	if err := s.Release(ctx, a.Key, cl.Token); err != nil {
		t.Fatal(err)
	}
	item = check("released", inProgress...)
	if numAttr(t, item, "token") != 0 || numAttr(t, item, "lease_until") != 0 {
		t.Fatalf("released: %v, want token and lease_until 0", item)
	}
	next := mustClaim(t, s, a, storage.Acquired)
	if err := s.Complete(ctx, a.Key, next.Token, []byte("v"), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	item = check("completed", append(inProgress, "result")...)
	if numAttr(t, item, "expires_at") != clk.now().UnixMilli()+7_200_000 || numAttr(t, item, "attempt") != 2 {
		t.Fatalf("completed: %v, want attempt 2, expiry two hours from now", item)
	}
}

// An item the store did not write is reported, and left alone.
func TestForeignItem(t *testing.T) {
	c := dynamostoretest.Client(t)
	s := dynamostoretest.Store(t, c, dynamostore.Config{})
	key := storage.StoreKey("test", "foreign")
	table := s.Config().Table
	_, err := c.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"id":         itemKey(key),
		"status":     &types.AttributeValueMemberS{Value: "COMPLETED"},
		"expires_at": &types.AttributeValueMemberN{Value: "99999999999999"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctxT(t), storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute}); !errors.Is(err, dynamostore.ErrUnknownFormat) {
		t.Fatalf("Claim over a foreign item: %v, want ErrUnknownFormat", err)
	}
	if _, err := s.Get(ctxT(t), key); !errors.Is(err, dynamostore.ErrUnknownFormat) {
		t.Fatalf("Get of a foreign item: %v, want ErrUnknownFormat", err)
	}
	if rawItem(t, c, table, key)["token"] != nil {
		t.Fatal("the store changed a foreign item")
	}
}

// A server that cannot be reached, or that answers with errors, fails the
// call with idem.ErrStoreUnavailable; a missing table is a configuration
// error that names the fix.
func TestErrors(t *testing.T) {
	c := dynamostoretest.Client(t)
	missing, err := dynamostore.New(c, dynamostore.Config{Table: "idemtest_no_such_table"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = missing.Claim(ctxT(t), args("k", time.Minute))
	if err == nil || errors.Is(err, idem.ErrStoreUnavailable) || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("Claim on a missing table: %v, want an error naming CreateTable, not ErrStoreUnavailable", err)
	}

	down := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: c.Options().Credentials, RetryMaxAttempts: 1})
	s, err := dynamostore.New(down, dynamostore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	_, claimErr := s.Claim(ctx, args("k", time.Minute))
	_, getErr := s.Get(ctx, "k")
	for what, err := range map[string]error{
		"Claim": claimErr, "Get": getErr, "Complete": s.Complete(ctx, "k", 1, nil, time.Minute),
		"Release": s.Release(ctx, "k", 1), "Extend": s.Extend(ctx, "k", 1, time.Minute), "Delete": s.Delete(ctx, "k"),
	} {
		if !errors.Is(err, idem.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "dynamostore: "+what) {
			t.Errorf("%s with no server: %v, want ErrStoreUnavailable, prefixed with the operation", what, err)
		}
	}
	for _, bad := range []storage.ClaimArgs{
		{Key: "", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute},
		{Key: "k", Fingerprint: []byte("fp"), Lease: 0, Retention: time.Minute},
		{Key: "k", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: -1},
		{Key: "k", Fingerprint: make([]byte, dynamostore.MaxFingerprintLen+1), Lease: time.Minute, Retention: time.Minute},
	} {
		if _, err := s.Claim(ctx, bad); !errors.Is(err, dynamostore.ErrInvalidArgs) {
			t.Errorf("Claim(%q, lease %v, retention %v, %d-byte fingerprint): %v, want ErrInvalidArgs", bad.Key, bad.Lease, bad.Retention, len(bad.Fingerprint), err)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	for _, tc := range []struct {
		cfg   dynamostore.Config
		field string
	}{
		{dynamostore.Config{Table: "ab"}, "Config.Table"},
		{dynamostore.Config{Table: "no spaces"}, "Config.Table"},
		{dynamostore.Config{MaxClockSkew: -time.Second}, "Config.MaxClockSkew"},
		{dynamostore.Config{MaxClockSkew: time.Microsecond}, "Config.MaxClockSkew"},
		{dynamostore.Config{MaxClockSkew: 2 * time.Hour}, "Config.MaxClockSkew"},
		{dynamostore.Config{MaxValueSize: dynamostore.MaxValueSizeLimit + 1}, "Config.MaxValueSize"},
		{dynamostore.Config{BatchConcurrency: 257}, "Config.BatchConcurrency"},
	} {
		if _, err := dynamostore.New(c, tc.cfg); err == nil || !strings.HasPrefix(err.Error(), "dynamostore: "+tc.field) {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := dynamostore.New(nil, dynamostore.Config{}); err == nil {
		t.Error("New(nil client) succeeded")
	}
	s, err := dynamostore.New(c, dynamostore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config()
	if cfg.Table != "idem_records" || cfg.MaxClockSkew != time.Second || cfg.MaxValueSize != dynamostore.MaxValueSizeLimit || cfg.BatchConcurrency != 16 || cfg.Now == nil {
		t.Errorf("defaults: %+v", cfg)
	}
}
