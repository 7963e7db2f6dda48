package redisstore_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// replySizes is a go-redis hook that keeps the size of the largest reply
// the server sent to a script, in bytes of strings.
type replySizes struct {
	mu      sync.Mutex
	largest int
}

func (h *replySizes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replySizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.see(cmd)
		return err
	}
}

func (h *replySizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return err
	}
}

func (h *replySizes) see(cmd redis.Cmder) {
	c, ok := cmd.(interface{ Val() any })
	if !ok {
		return
	}
	n := stringBytes(c.Val())
	h.mu.Lock()
	h.largest = max(h.largest, n)
	h.mu.Unlock()
}

func (h *replySizes) reset() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.largest
	h.largest = 0
	return n
}

func stringBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []any:
		n := 0
		for _, e := range v {
			n += stringBytes(e)
		}
		return n
	}
	return 0
}

// TestStoredValueOverTheCapIsRefusedOnRead: a Store reads no result longer
// than its MaxValueSize. A record another Store (with a larger limit)
// stored is refused by Claim, ClaimBatch and Get with a
// *storage.ValueTooLargeError naming the key and the stored size. The scripts
// never send the result (Get's, and a claim's that finds a key in
// progress): their replies stay the size of a header. A claim's GETRANGE
// stops after the cap (TestOversizedRecordCostsTheClientKiB counts the
// bytes read).
func TestStoredValueOverTheCapIsRefusedOnRead(t *testing.T) {
	h := &replySizes{}
	writer := newStore(t, sharedClient(t), redisstore.Config{MaxValueSize: 1 << 20})
	reader, err := redisstore.New(sharedClient(t, h), redisstore.Config{Prefix: writer.Config().Prefix, MaxValueSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	idemtest.RunStoredValueOverLimit(t, writer, reader, func(err error, key string, size int) bool {
		tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err)
		return ok && tooLarge.Stored && tooLarge.Key == key && tooLarge.Size == size && tooLarge.Max == 1024
	})
	if n := h.reset(); n > 1024 {
		t.Errorf("the reading store was sent a reply of %d bytes, more than its MaxValueSize", n)
	}
}

// countingConn counts the bytes read from its connection into n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// TestOversizedRecordCostsTheClientKiB: a record far over the reader's
// MaxValueSize (16 MiB against 4 KiB), written under a record's key by a
// program that ignores the cap, and a value of the same size that is not
// a record at all, cost each call that meets them a few KiB read from the
// connection, not their size: 8 concurrent Claims, a ClaimBatch, Get and
// Scan. The record is refused with a *storage.ValueTooLargeError (a
// refusal, not an outage), the other value with ErrUnknownFormat; Scan
// lists the record without its result and goes on to the next.
func TestOversizedRecordCostsTheClientKiB(t *testing.T) {
	const size, maxValue, claims = 16 << 20, 4 << 10, 8
	var read atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, &read}, nil
	}})
	t.Cleanup(func() { c.Close() })
	writer := sharedClient(t)
	s := newStore(t, c, redisstore.Config{MaxValueSize: maxValue})
	ctx := ctxT(t)
	fp := []byte("fingerprint")
	big := redisstore.EncodeRecord(storage.Record{Status: storage.StatusCompleted, Token: 7, Attempt: 1, Fingerprint: fp,
		Result: make([]byte, size), ExpiresAt: time.Now().Add(time.Hour)}, time.Hour)
	if err := writer.Set(ctx, s.RedisKey("big"), big, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := writer.Set(ctx, s.RedisKey("alien"), make([]byte, size), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := writer.Set(ctx, s.RedisKey("small"), redisstore.EncodeRecord(storage.Record{Status: storage.StatusCompleted, Token: 8,
		Attempt: 1, Fingerprint: fp, Result: []byte("receipt"), ExpiresAt: time.Now().Add(time.Hour)}, time.Hour), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	args := func(key string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: key, Fingerprint: fp, Lease: time.Minute, Retention: time.Hour}
	}
	tooLarge := func(op string, err error) {
		t.Helper()
		e, ok := errors.AsType[*storage.ValueTooLargeError](err)
		if !ok || !e.Stored || e.Size != size || e.Key != "big" || !errors.Is(err, storage.ErrRefused) || errors.Is(err, storage.ErrStoreUnavailable) {
			t.Errorf("%s: %v, want a refusal: *storage.ValueTooLargeError of the stored %d bytes", op, err, size)
		}
	}
	// Each call's connection is in the pool before it is counted.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	within := func(op string, calls int) {
		t.Helper()
		if n := read.Swap(0); n > int64(calls)*16<<10 {
			t.Errorf("%s: read %d bytes from Redis for %d calls, more than 16 KiB a call", op, n, calls)
		}
	}
	read.Store(0)

	var wg sync.WaitGroup
	errs := make([]error, claims)
	for i := range claims {
		wg.Go(func() { _, errs[i] = s.Claim(ctx, args("big")) })
	}
	wg.Wait()
	for _, err := range errs {
		tooLarge("Claim", err)
	}
	within("Claim of the record", claims)

	if _, err := s.Claim(ctx, args("alien")); !errors.Is(err, redisstore.ErrUnknownFormat) {
		t.Errorf("Claim of the other program's value: %v, want ErrUnknownFormat", err)
	}
	within("Claim of the other program's value", 1)

	got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{args("big"), args("alien"), args("new")})
	if err != nil {
		t.Fatal(err)
	}
	tooLarge("ClaimBatch", got[0].Err)
	if !errors.Is(got[1].Err, redisstore.ErrUnknownFormat) || got[2].Err != nil || got[2].Outcome != storage.Acquired {
		t.Errorf("ClaimBatch: %v, %v %v; want ErrUnknownFormat, and the new key Acquired", got[1].Err, got[2].Outcome, got[2].Err)
	}
	within("ClaimBatch", 3)

	_, err = s.Get(ctx, "big")
	tooLarge("Get", err)
	if _, err := s.Get(ctx, "alien"); !errors.Is(err, redisstore.ErrUnknownFormat) {
		t.Errorf("Get of the other program's value: %v, want ErrUnknownFormat", err)
	}
	within("Get", 2)

	listed := map[string]storage.Record{}
	if err := s.Scan(ctx, "", func(r storage.Record) bool {
		listed[r.Key] = r
		return true
	}); err != nil {
		t.Fatalf("Scan: %v; want it to go on past the records it cannot read whole", err)
	}
	if r, ok := listed["big"]; !ok || r.Status != storage.StatusCompleted || r.Result != nil {
		t.Errorf("Scan listed the record over the cap as %+v (listed %v), want it Completed, without its result", r, ok)
	}
	if r := listed["small"]; string(r.Result) != "receipt" {
		t.Errorf("Scan listed the record after it as %+v", r)
	}
	if _, ok := listed["alien"]; ok {
		t.Error("Scan listed the other program's value")
	}
	within("Scan", 4)
}
