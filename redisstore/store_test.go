package redisstore_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	s := newStore(t, sharedClient(t), redisstore.Config{})
	idemtest.Run(t, func(t *testing.T) storage.Store { return s })
}

// counter is a go-redis hook that counts what reaches the server: single
// commands and pipelines.
type counter struct {
	mu    sync.Mutex
	cmds  []string // names of single commands
	pipes []int    // lengths of pipelines
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipes = append(h.pipes, len(cmds))
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *counter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds, h.pipes = nil, nil
}

func (h *counter) seen() ([]string, []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{}, h.cmds...), append([]int{}, h.pipes...)
}

func claimArgs(key string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute}
}

func TestDuplicateIsTwoPlainCommands(t *testing.T) {
	h := &counter{}
	s := newStore(t, sharedClient(t, h), redisstore.Config{})
	ctx := ctxT(t)
	a := claimArgs(storage.StoreKey("orders", "order-1"))
	c, err := s.Claim(ctx, a)
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim: %v %v", c.Outcome, err)
	}
	if err := s.Complete(ctx, a.Key, c.Token, []byte("charged"), time.Minute); err != nil {
		t.Fatal(err)
	}
	h.reset()
	d, err := s.Claim(ctx, a)
	if err != nil || d.Outcome != storage.Duplicate || string(d.Record.Result) != "charged" {
		t.Fatalf("duplicate Claim: %v %q %v", d.Outcome, d.Record.Result, err)
	}
	// SET … NX finds the key taken, GETRANGE reads its record, cut after
	// the longest one the store would answer: no script.
	cmds, pipes := h.seen()
	if !slices.Equal(cmds, []string{"set", "getrange"}) || len(pipes) != 0 {
		t.Fatalf("a duplicate check sent commands %v and pipelines %v; want SET … NX, then GETRANGE", cmds, pipes)
	}
}

// batchFixture returns a store over a counting client, n claim arguments
// for keys key-0 … key-n-1 of which key-0 is already claimed, and claimed
// again (so the claim script is in the server's cache), and the counter
// reset.
func batchFixture(t *testing.T, n int) (*redisstore.Store, *counter, []storage.ClaimArgs) {
	h := &counter{}
	s := newStore(t, sharedClient(t, h), redisstore.Config{})
	args := make([]storage.ClaimArgs, n)
	for i := range args {
		args[i] = claimArgs(fmt.Sprintf("key-%d", i))
	}
	for range 2 {
		if _, err := s.ClaimBatch(ctxT(t), args[:1]); err != nil {
			t.Fatal(err)
		}
	}
	h.reset()
	return s, h, args
}

func TestClaimBatchIsOneRoundTrip(t *testing.T) {
	s, h, args := batchFixture(t, 100)
	ctx := ctxT(t)
	got, err := s.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		want := storage.Acquired
		if i == 0 {
			want = storage.Busy
		}
		if c.Err != nil || c.Outcome != want {
			t.Fatalf("entry %d: %v %v, want %v", i, c.Outcome, c.Err, want)
		}
	}
	// The plain command of every key, the read of the key it found
	// taken, then the claim script of that key, in progress.
	cmds, pipes := h.seen()
	if len(cmds) != 0 || !slices.Equal(pipes, []int{100, 1, 1}) {
		t.Fatalf("ClaimBatch of 100 keys sent commands %v and pipelines of %v; want one pipeline of a command "+
			"per key, one of a read, then one of one script", cmds, pipes)
	}
	comps := make([]storage.Completion, 0, 99)
	for _, c := range got[1:] {
		comps = append(comps, storage.Completion{Key: c.Record.Key, Token: c.Token, Value: []byte("v"), Retention: time.Minute})
	}
	h.reset()
	errs, err := s.CompleteBatch(ctx, comps)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("CompleteBatch entry %d: %v", i, err)
		}
	}
	if cmds, pipes := h.seen(); len(cmds) != 0 || len(pipes) != 1 || pipes[0] != 1 {
		t.Fatalf("CompleteBatch of 99 sent commands %v and pipelines of %v; want one pipeline of one script", cmds, pipes)
	}
	// A batch of duplicates is two round trips of plain commands.
	h.reset()
	again, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range again {
		if c.Err != nil || c.Outcome != storage.Duplicate || string(c.Record.Result) != "v" {
			t.Fatalf("entry %d again: %v %q %v, want a Duplicate of v", i+1, c.Outcome, c.Record.Result, c.Err)
		}
	}
	if cmds, pipes := h.seen(); len(cmds) != 0 || !slices.Equal(pipes, []int{99, 99}) {
		t.Fatalf("ClaimBatch of 99 duplicates sent commands %v and pipelines of %v; want two pipelines of a command per key", cmds, pipes)
	}
}

// TestCompleteBatchSplitsLargeValues: a complete batch script carries at
// most about a MiB of values, so that no one script holds the server long;
// the batch is still one round trip.
func TestCompleteBatchSplitsLargeValues(t *testing.T) {
	const n, size = 6, 300 << 10 // three values to a script
	s, h, args := batchFixture(t, n+1)
	ctx := ctxT(t)
	got, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]storage.Completion, n)
	for i, c := range got {
		cs[i] = storage.Completion{Key: args[i+1].Key, Token: c.Token, Value: bytes.Repeat([]byte{byte('a' + i)}, size), Retention: time.Minute}
	}
	h.reset()
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, pipes := h.seen(); len(cmds) != 0 || len(pipes) != 1 || pipes[0] != 2 {
		t.Fatalf("CompleteBatch of %d values of %d bytes sent commands %v and pipelines of %v; want one pipeline of two scripts", n, size, cmds, pipes)
	}
	for i, err := range errs {
		r, gerr := s.Get(ctx, cs[i].Key)
		if err != nil || gerr != nil || r.Status != storage.StatusCompleted || !bytes.Equal(r.Result, cs[i].Value) {
			t.Errorf("entry %d: %v; record %v, %d bytes, %v; want Completed with its value", i, err, r.Status, len(r.Result), gerr)
		}
	}
}

// TestCompleteBatchAcrossScripts: a batch larger than one script's share
// is still one round trip, and each entry gets its own verdict, wherever
// it falls: stored, ErrLeaseLost for a token that is not current or a
// key that is gone, ErrUnknownFormat for a value this package did not
// write (left as it is).
func TestCompleteBatchAcrossScripts(t *testing.T) {
	const n = 300 // three scripts of at most 128 keys
	s, h, args := batchFixture(t, n)
	ctx := ctxT(t)
	got, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]storage.Completion, 0, n-1)
	for i, c := range got {
		if c.Outcome != storage.Acquired {
			t.Fatalf("claim %d: %v %v", i+1, c.Outcome, c.Err)
		}
		cs = append(cs, storage.Completion{Key: args[i+1].Key, Token: c.Token, Value: []byte("v" + strconv.Itoa(i+1)), Retention: time.Minute})
	}
	const lost, gone, foreign = 100, 140, 260 // in the first, second and third scripts
	cs[lost].Token++
	if err := s.Delete(ctx, cs[gone].Key); err != nil {
		t.Fatal(err)
	}
	c := sharedClient(t)
	if err := c.Set(ctx, s.RedisKey(cs[foreign].Key), "not a record", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h.reset()
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, pipes := h.seen(); len(cmds) != 0 || len(pipes) != 1 || pipes[0] != 3 {
		t.Fatalf("CompleteBatch of %d sent commands %v and pipelines of %v; want one pipeline of three scripts", len(cs), cmds, pipes)
	}
	for i, err := range errs {
		switch i {
		case lost, gone:
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("entry %d: %v, want ErrLeaseLost", i, err)
			}
		case foreign:
			if !errors.Is(err, redisstore.ErrUnknownFormat) {
				t.Errorf("entry %d: %v, want ErrUnknownFormat", i, err)
			}
			if v, _ := c.Get(ctx, s.RedisKey(cs[i].Key)).Result(); v != "not a record" {
				t.Errorf("entry %d: the foreign value became %q", i, v)
			}
		default:
			r, gerr := s.Get(ctx, cs[i].Key)
			if err != nil || gerr != nil || r.Status != storage.StatusCompleted || string(r.Result) != string(cs[i].Value) || r.Token != cs[i].Token {
				t.Errorf("entry %d: %v; record %v %q %v, want Completed with %q", i, err, r.Status, r.Result, gerr, cs[i].Value)
			}
		}
	}
	if r, err := s.Get(ctx, cs[lost].Key); err != nil || r.Status != storage.StatusInProgress || r.Token != cs[lost].Token-1 {
		t.Errorf("the record of the wrong token: %v token %d %v, want InProgress under its holder's", r.Status, r.Token, err)
	}
}

// TestBatchAgreesWithSingle sets up the same keys in every state under two
// namespaces, then claims them with ClaimBatch in one and with Claim one by
// one in the other: the answers must agree.
// TestClaimBatchAcrossScripts: when more keys than one script's share
// need the claim script (here every key, released: a takeover), the
// scripts go in one round trip after the plain commands', every key is
// claimed once, and an entry repeating a key of an earlier script sees
// that claim.
func TestClaimBatchAcrossScripts(t *testing.T) {
	const n = 300 // three scripts of at most 128 keys
	s, h, args := batchFixture(t, n)
	ctx := ctxT(t)
	first, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range first {
		if err := s.Release(ctx, args[i+1].Key, c.Token); err != nil {
			t.Fatal(err)
		}
	}
	h.reset()
	args[n-1] = claimArgs("key-5") // in the third script, a key of the first
	got, err := s.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		want := storage.Acquired
		if i == 0 || i == n-1 {
			want = storage.Busy // held since the fixture; by entry 5
		}
		if c.Err != nil || c.Outcome != want || want == storage.Acquired && c.Record.Attempt != 2 {
			t.Fatalf("entry %d (%s): %v %v (attempt %d), want %v", i, args[i].Key, c.Outcome, c.Err, c.Record.Attempt, want)
		}
	}
	// The repeated key's entry is left to the script: 299 keys' plain
	// commands, which find them taken, their reads, then 300 claims in
	// three scripts.
	if cmds, pipes := h.seen(); len(cmds) != 0 || !slices.Equal(pipes, []int{n - 1, n - 1, 3}) {
		t.Fatalf("ClaimBatch of %d keys sent commands %v and pipelines of %v; want one pipeline of the plain commands, "+
			"one of their reads, then one of three scripts", n, cmds, pipes)
	}
	if r, err := s.Get(ctx, args[5].Key); err != nil || r.Token != got[5].Token || got[n-1].Record.Token != 0 {
		t.Errorf("the repeated key is held by token %d (%v), want entry 5's %d; the Busy entry carries %d, want none",
			r.Token, err, got[5].Token, got[n-1].Record.Token)
	}
}

func TestBatchAgreesWithSingle(t *testing.T) {
	s := newStore(t, sharedClient(t), redisstore.Config{})
	ctx := ctxT(t)
	setup := func(ns string) []storage.ClaimArgs {
		t.Helper()
		a := func(k, fp string, max int) storage.ClaimArgs {
			return storage.ClaimArgs{Key: storage.StoreKey(ns, k), Fingerprint: []byte(fp), Lease: time.Minute, Retention: time.Minute, MaxAttempts: max}
		}
		claim := func(a storage.ClaimArgs) storage.Token {
			t.Helper()
			c, err := s.Claim(ctx, a)
			if err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("setup claim %q: %v %v", a.Key, c.Outcome, err)
			}
			return c.Token
		}
		completed, failed, busy, released, capped, reused := a("completed", "fp", 0), a("failed", "fp", 0), a("busy", "fp", 0), a("released", "fp", 0), a("capped", "fp", 1), a("reused", "fp", 0)
		if err := s.Complete(ctx, completed.Key, claim(completed), []byte("done"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Fail(ctx, failed.Key, claim(failed), storage.EncodeFailure(errors.New("declined")), time.Minute); err != nil {
			t.Fatal(err)
		}
		claim(busy)
		if err := s.Release(ctx, released.Key, claim(released)); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, capped.Key, claim(capped)); err != nil {
			t.Fatal(err)
		}
		claim(reused)
		reused.Fingerprint = []byte("other")
		fresh := a("fresh", "fp", 0)
		return []storage.ClaimArgs{fresh, completed, failed, busy, released, capped, reused, fresh, released, a("fresh2", "", 0)}
	}
	batchArgs, singleArgs := setup("batch"), setup("single")
	batch, err := s.ClaimBatch(ctx, batchArgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range singleArgs {
		single, err := s.Claim(ctx, a)
		single.Err = err
		b := batch[i]
		if !errors.Is(b.Err, single.Err) || (single.Err == nil) != (b.Err == nil) ||
			b.Outcome != single.Outcome || (b.Token == 0) != (single.Token == 0) ||
			b.Record.Status != single.Record.Status || b.Record.Attempt != single.Record.Attempt ||
			!bytes.Equal(b.Record.Result, single.Record.Result) || !bytes.Equal(b.Record.Fingerprint, single.Record.Fingerprint) {
			t.Errorf("entry %d (%s):\nbatch  %v %v %+v\nsingle %v %v %+v", i, a.Key, b.Outcome, b.Err, b.Record, single.Outcome, single.Err, single.Record)
		}
	}
	// CompleteBatch against Complete: the current token, a wrong one, the
	// zero token, an absent key and a completed record.
	comps := func(got []storage.Claim, args []storage.ClaimArgs) []storage.Completion {
		return []storage.Completion{
			{Key: args[0].Key, Token: got[0].Token, Value: []byte("f"), Retention: time.Minute},
			{Key: args[3].Key, Token: got[3].Record.Token + 1, Value: []byte("x"), Retention: time.Minute},
			{Key: args[4].Key, Token: 0, Value: []byte("x"), Retention: time.Minute},
			{Key: args[0].Key + "absent", Token: 7, Value: []byte("x"), Retention: time.Minute},
			{Key: args[1].Key, Token: got[1].Record.Token, Value: []byte("x"), Retention: time.Minute},
			{Key: args[4].Key, Token: got[4].Token, Value: []byte("r"), Retention: time.Minute},
		}
	}
	var singles []storage.Claim
	for _, a := range singleArgs {
		r, err := s.Get(ctx, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		singles = append(singles, storage.Claim{Token: r.Token, Record: r})
	}
	batchErrs, err := s.CompleteBatch(ctx, comps(batch, batchArgs))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comps(singles, singleArgs) {
		single := s.Complete(ctx, c.Key, c.Token, c.Value, c.Retention)
		if (single == nil) != (batchErrs[i] == nil) || !errors.Is(batchErrs[i], single) {
			t.Errorf("completion %d: batch %v, single %v", i, batchErrs[i], single)
		}
	}
	if batchErrs[0] != nil || batchErrs[5] != nil {
		t.Fatalf("completions with the current tokens failed: %v", batchErrs)
	}
}

func TestValueTooLarge(t *testing.T) {
	s := newStore(t, sharedClient(t), redisstore.Config{MaxValueSize: 16})
	ctx := ctxT(t)
	a := claimArgs("k")
	c, err := s.Claim(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Complete(ctx, a.Key, c.Token, make([]byte, 17), time.Minute)
	if tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err); !ok || tooLarge.Size != 17 || tooLarge.Max != 16 {
		t.Fatalf("Complete with 17 bytes: %v, want a *storage.ValueTooLargeError{17, 16}", err)
	}
	_, err = s.CompleteBatch(ctx, []storage.Completion{
		{Key: a.Key, Token: c.Token, Value: []byte("ok"), Retention: time.Minute},
		{Key: "other", Token: 1, Value: make([]byte, 17), Retention: time.Minute},
	})
	if _, ok := errors.AsType[*storage.ValueTooLargeError](err); !ok {
		t.Fatalf("CompleteBatch with a 17-byte value: %v, want a *storage.ValueTooLargeError", err)
	}
	if r, err := s.Get(ctx, a.Key); err != nil || r.Status != storage.StatusInProgress {
		t.Fatalf("after refused values: %v %v, want the record untouched (InProgress)", r.Status, err)
	}
	if err := s.Fail(ctx, a.Key, c.Token, make([]byte, 16), time.Minute); err != nil {
		t.Fatalf("Fail with 16 bytes (the maximum): %v", err)
	}
}

func TestInvalidArgs(t *testing.T) {
	s := newStore(t, sharedClient(t), redisstore.Config{})
	ctx := ctxT(t)
	bad := []storage.ClaimArgs{
		{Key: "k", Lease: 0, Retention: time.Minute},
		{Key: "k", Lease: time.Minute, Retention: -time.Second},
		{Key: "k", Lease: 200 * 365 * 24 * time.Hour, Retention: time.Minute},
		{Key: "k", Lease: time.Minute, Retention: time.Minute, Fingerprint: make([]byte, 1<<16)},
	}
	for _, a := range bad {
		if _, err := s.Claim(ctx, a); !errors.Is(err, redisstore.ErrInvalidArgs) {
			t.Errorf("Claim(%v, %v, %d-byte fingerprint): %v, want ErrInvalidArgs", a.Lease, a.Retention, len(a.Fingerprint), err)
		}
		if _, err := s.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs("ok"), a}); !errors.Is(err, redisstore.ErrInvalidArgs) {
			t.Errorf("ClaimBatch with a bad entry: %v, want ErrInvalidArgs", err)
		}
	}
	if _, err := s.Get(ctx, "ok"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a batch with a bad entry claimed its good one: %v", err)
	}
	if err := s.Extend(ctx, "k", 1, -time.Second); !errors.Is(err, redisstore.ErrInvalidArgs) {
		t.Errorf("Extend with a negative lease: %v, want ErrInvalidArgs", err)
	}
	if err := s.Complete(ctx, "k", 1, nil, 0); !errors.Is(err, redisstore.ErrInvalidArgs) {
		t.Errorf("Complete with zero retention: %v, want ErrInvalidArgs", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr()}})
	defer ring.Close()
	for _, tc := range []struct {
		client redis.UniversalClient
		cfg    redisstore.Config
		field  string
	}{
		{nil, redisstore.Config{}, "client"},
		{c, redisstore.Config{Prefix: "app:{x}:"}, "Config.Prefix"},
		{c, redisstore.Config{MaxValueSize: -1}, "Config.MaxValueSize"},
		{c, redisstore.Config{MaxValueSize: 1 << 30}, "Config.MaxValueSize"},
		{c, redisstore.Config{WaitReplicas: -1}, "Config.WaitReplicas"},
		{c, redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Microsecond}, "Config.WaitTimeout"},
		{c, redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Minute}, "Config.WaitTimeout"}, // ≥ ReadTimeout (3s)
		{ring, redisstore.Config{WaitReplicas: 1}, "Config.WaitReplicas"},
	} {
		var err error
		if tc.client == nil {
			_, err = redisstore.New(nil, tc.cfg)
		} else {
			_, err = redisstore.New(tc.client, tc.cfg)
		}
		if err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%T, %+v) = %v, want an error naming %s", tc.client, tc.cfg, err, tc.field)
		}
	}
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Config(); got.Prefix != redisstore.DefaultPrefix || got.MaxValueSize != redisstore.DefaultMaxValueSize {
		t.Fatalf("defaults: %+v", got)
	}
}

func TestRedisKey(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Config{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"", "{", "}", "{}", "a}b{c", "\x00", "\x00\x00", "\xff\xfe", "k", "K", "p:{k}", strings.Repeat("\xfe", 300)}
	seen := map[string]string{}
	for _, k := range keys {
		rk := s.RedisKey(k)
		if other, dup := seen[rk]; dup {
			t.Fatalf("keys %q and %q share the Redis key %q", k, other, rk)
		}
		seen[rk] = k
		// Exactly one hash tag: "{" + the encoded key + "}" after the prefix.
		tag, ok := strings.CutPrefix(rk, "p:{")
		if !ok || strings.Count(rk, "{") != 1 || strings.Count(rk, "}") != 1 || !strings.HasSuffix(tag, "}") {
			t.Fatalf("RedisKey(%q) = %q, want p:{<base64url>}", k, rk)
		}
		if dec, err := base64.RawURLEncoding.DecodeString(strings.TrimSuffix(tag, "}")); err != nil || string(dec) != k {
			t.Fatalf("RedisKey(%q) = %q: the hash tag does not decode to the key (%q, %v)", k, rk, dec, err)
		}
	}
}

// TestOtherTypesInABatch: a key of another type among a batch's keys is
// that entry's ErrUnknownFormat, and the others are claimed and completed.
// The batch script once raised WRONGTYPE halfway: the keys before it were
// claimed, yet the whole batch failed, and they stayed in progress until
// their lease ended.
func TestOtherTypesInABatch(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	if err := c.HSet(ctx, s.RedisKey("a hash"), "status", "completed").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), s.RedisKey("a hash")) })
	keys := []string{"before", "a hash", "after"}
	args := make([]storage.ClaimArgs, len(keys))
	for i, k := range keys {
		args[i] = claimArgs(k)
	}
	got, err := s.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatalf("ClaimBatch with a hash among its keys: %v, want each entry's answer", err)
	}
	for i, k := range keys {
		switch {
		case k == "a hash" && !errors.Is(got[i].Err, redisstore.ErrUnknownFormat):
			t.Errorf("%s: %v, want ErrUnknownFormat", k, got[i].Err)
		case k != "a hash" && (got[i].Err != nil || got[i].Outcome != storage.Acquired):
			t.Errorf("%s: %v %v, want Acquired", k, got[i].Outcome, got[i].Err)
		}
	}
	if _, err := s.Claim(ctx, claimArgs("a hash")); !errors.Is(err, redisstore.ErrUnknownFormat) || !strings.Contains(err.Error(), "another type") {
		t.Errorf("Claim of a hash: %v, want ErrUnknownFormat saying it is of another type", err)
	}
	if _, err := s.Get(ctx, "a hash"); !errors.Is(err, redisstore.ErrUnknownFormat) {
		t.Errorf("Get of a hash: %v, want ErrUnknownFormat", err)
	}
	if err := s.Complete(ctx, "a hash", 1, []byte("v"), time.Minute); !errors.Is(err, redisstore.ErrUnknownFormat) {
		t.Errorf("Complete of a hash: %v, want ErrUnknownFormat", err)
	}
	errs, err := s.CompleteBatch(ctx, []storage.Completion{
		{Key: "before", Token: got[0].Token, Value: []byte("v"), Retention: time.Minute},
		{Key: "a hash", Token: 1, Value: []byte("v"), Retention: time.Minute},
		{Key: "after", Token: got[2].Token, Value: []byte("v"), Retention: time.Minute},
	})
	if err != nil || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], redisstore.ErrUnknownFormat) {
		t.Fatalf("CompleteBatch with a hash among its keys: %v, %v", errs, err)
	}
	if typ, _ := c.Type(ctx, s.RedisKey("a hash")).Result(); typ != "hash" {
		t.Fatalf("the hash became a %s", typ)
	}
}

// TestUnknownFormat plants values this package did not write: every call
// answers with an error (never a panic) and leaves them as they were.
func TestUnknownFormat(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	v2 := append([]byte{2}, make([]byte, 40)...)
	for name, v := range map[string][]byte{
		"version 2":   v2,
		"short":       {1, 1, 0},
		"empty":       {},
		"bad status":  append([]byte{1, 9}, make([]byte, 30)...),
		"fingerprint": append(append([]byte{1, 1}, make([]byte, 28)...), 0xff, 0xff),
		"json":        []byte(`{"status":"completed"}`),
	} {
		key := "planted " + name
		if err := c.Set(ctx, s.RedisKey(key), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Claim(ctx, claimArgs(key))
		if !errors.Is(err, redisstore.ErrUnknownFormat) {
			t.Errorf("%s: Claim: %v, want ErrUnknownFormat", name, err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, redisstore.ErrUnknownFormat) {
			t.Errorf("%s: Get: %v, want ErrUnknownFormat", name, err)
		}
		for op, err := range map[string]error{
			"Complete": s.Complete(ctx, key, 1, []byte("v"), time.Minute),
			"Fail":     s.Fail(ctx, key, 1, []byte("v"), time.Minute),
			"Release":  s.Release(ctx, key, 1),
			"Extend":   s.Extend(ctx, key, 1, time.Minute),
			"DeleteIf": s.DeleteIf(ctx, key, storage.StatusInProgress, 1),
		} {
			if !errors.Is(err, redisstore.ErrUnknownFormat) {
				t.Errorf("%s: %s: %v, want ErrUnknownFormat", name, op, err)
			}
		}
		got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs(key)})
		if err != nil || !errors.Is(got[0].Err, redisstore.ErrUnknownFormat) {
			t.Errorf("%s: ClaimBatch: %v %v, want the entry's ErrUnknownFormat", name, got, err)
		}
		if after, _ := c.Get(ctx, s.RedisKey(key)).Bytes(); !bytes.Equal(after, v) {
			t.Errorf("%s: the value changed to %q", name, after)
		}
	}
	// Another type of key under a record's name: TestOtherTypesInABatch.
}

// TestExpiryAndClock checks the key's TTL against the retention and the
// record's times against the Redis server's clock.
func TestExpiryAndClock(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	pexpiretime := func(key string) time.Time {
		t.Helper()
		ms, err := c.Do(ctx, "PEXPIRETIME", s.RedisKey(key)).Int64()
		if err != nil || ms <= 0 {
			t.Fatalf("PEXPIRETIME: %d %v", ms, err)
		}
		return time.UnixMilli(ms)
	}
	near := func(what string, got, want time.Time) {
		t.Helper()
		if d := got.Sub(want); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("%s = %v, want %v (off by %v)", what, got, want, d)
		}
	}
	serverNow := func() time.Time {
		t.Helper()
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now
	}
	before := serverNow()
	a := storage.ClaimArgs{Key: "k", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
	cl, err := s.Claim(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// The claim of a new key answers with nothing but its success, and
	// the client fills in the record, times on its own clock (the same as
	// the server's here): it must be the record Redis holds.
	near("LeaseUntil", cl.Record.LeaseUntil, before.Add(time.Minute))
	if d := cl.Record.ExpiresAt.Sub(cl.Record.LeaseUntil); d != time.Hour {
		t.Fatalf("the claim's record expires %v after its lease, want the retention", d)
	}
	got, err := s.Get(ctx, "k")
	if err != nil || got.Status != cl.Record.Status || got.Token != cl.Token ||
		got.Attempt != 1 || !bytes.Equal(got.Fingerprint, a.Fingerprint) {
		t.Fatalf("stored record %+v (%v), the claim answered %+v", got, err, cl.Record)
	}
	near("stored LeaseUntil", got.LeaseUntil, cl.Record.LeaseUntil)
	near("key expiry", pexpiretime("k"), before.Add(time.Minute+time.Hour))
	if !got.ExpiresAt.Equal(pexpiretime("k")) || got.ExpiresAt.Sub(got.LeaseUntil) != time.Hour {
		t.Fatalf("Get: lease %v, expiry %v; the key expires at %v", got.LeaseUntil, got.ExpiresAt, pexpiretime("k"))
	}

	// Extend sets the lease end lease from now, out or in, and the key
	// expires the retention after it.
	for _, lease := range []time.Duration{2 * time.Hour, time.Second} {
		now := serverNow()
		if err := s.Extend(ctx, "k", cl.Token, lease); err != nil {
			t.Fatal(err)
		}
		r, _ := s.Get(ctx, "k")
		near(fmt.Sprintf("LeaseUntil after Extend(%v)", lease), r.LeaseUntil, now.Add(lease))
		near(fmt.Sprintf("expiry after Extend(%v)", lease), pexpiretime("k"), r.LeaseUntil.Add(time.Hour))
	}
	// Release ends the lease now: the key expires the retention from now.
	now := serverNow()
	if err := s.Release(ctx, "k", cl.Token); err != nil {
		t.Fatal(err)
	}
	r3, _ := s.Get(ctx, "k")
	if r3.Token != 0 || !r3.LeaseUntil.IsZero() || r3.Status != storage.StatusInProgress {
		t.Fatalf("after Release: %+v, want InProgress, no token, no lease", r3)
	}
	near("expiry after Release", r3.ExpiresAt, now.Add(time.Hour))

	cl, _ = s.Claim(ctx, a)
	if cl.Outcome != storage.Acquired || cl.Record.Attempt != 2 {
		t.Fatalf("claim after Release: %v attempt %d", cl.Outcome, cl.Record.Attempt)
	}
	near("LeaseUntil of the takeover", cl.Record.LeaseUntil, serverNow().Add(time.Minute))
	now = serverNow()
	if err := s.Complete(ctx, "k", cl.Token, []byte("v"), 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	near("expiry after Complete", pexpiretime("k"), now.Add(3*time.Hour))
}

// TestClaimResentByTheClient: a claim the client resends after a lost reply
// finds its own token and answers Acquired again, attempt unchanged.
func TestClaimResentByTheClient(t *testing.T) {
	s := newStore(t, sharedClient(t), redisstore.Config{})
	ctx := ctxT(t)
	a := claimArgs("k")
	first, err := s.ClaimWithToken(ctx, a, 42)
	if err != nil || first.Outcome != storage.Acquired {
		t.Fatal(first.Outcome, err)
	}
	again, err := s.ClaimWithToken(ctx, a, 42)
	if err != nil || again.Outcome != storage.Acquired || again.Token != 42 || again.Record.Attempt != 1 {
		t.Fatalf("resent claim: %v token %d attempt %d %v, want Acquired 42 attempt 1", again.Outcome, again.Token, again.Record.Attempt, err)
	}
	if other, _ := s.Claim(ctx, a); other.Outcome != storage.Busy {
		t.Fatalf("another claim: %v, want Busy", other.Outcome)
	}
}
