package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// fillUntilFull writes junk keys to the server of c until it refuses a
// write with OOM: used memory is over maxmemory, under noeviction. Used
// memory counts a pipeline's query buffer while it is being run, and
// drops once it is freed; so once the junk fills the server, the limit
// is lowered a MiB below what the server then uses, and the server stays
// full whatever the size of the next command.
func fillUntilFull(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := ctxT(t)
	defer func() {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		used := infoField(t, info, "used_memory")
		if err := c.ConfigSet(ctx, "maxmemory", strconv.Itoa(used-1<<20)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "junk:last", "x", 0).Err(); !redis.IsOOMError(err) {
			t.Fatalf("a write to the filled server: %v, want OOM", err)
		}
	}()
	junk := strings.Repeat("x", 4<<10)
	for round := range 10_000 {
		p := c.Pipeline()
		cmds := make([]*redis.StatusCmd, 64)
		for i := range cmds {
			cmds[i] = p.Set(ctx, fmt.Sprintf("junk:%d:%d", round, i), junk, 0)
		}
		_, _ = p.Exec(ctx)
		for _, cmd := range cmds {
			if err := cmd.Err(); redis.IsOOMError(err) {
				return // the deferred call keeps it full
			} else if err != nil {
				t.Fatalf("filling the server: %v", err)
			}
		}
	}
	t.Fatal("the server took 2.5 GiB of junk without refusing a write: is maxmemory set?")
}

// infoField returns the integer field name of an INFO reply.
func infoField(t *testing.T, info, name string) int {
	t.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO field %s %q: %v", name, v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no field %s:\n%s", name, info)
	return 0
}

// TestFullRedisAnswersReplays fills a server of the test's own, started
// with maxmemory and noeviction, until it refuses writes. A duplicate of
// a key that holds an outcome is still answered with it (Claim,
// ClaimBatch, Guard.Do), a held key still answers Busy; a new key gets
// an error that says Redis is out of memory, at once, and fn does not
// run. Once memory is freed, new keys are claimed again.
func TestFullRedisAnswersReplays(t *testing.T) {
	srv := startServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := idemtest.Guard(t, s, idem.Config{Namespace: "full", Lease: time.Minute})
	ctx := ctxT(t)
	payload := []byte("charge 10")
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte("receipt"), nil }
	if _, err := g.Do(ctx, "order-1", payload, fn); err != nil {
		t.Fatal(err)
	}
	args := func(key string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: 10 * time.Minute, Retention: time.Hour}
	}
	done, err := s.Claim(ctx, args("done"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", done.Token, []byte("stored"), time.Hour); err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, args("held"))
	if err != nil || held.Outcome != storage.Acquired {
		t.Fatalf("claim of the held key: %v %v", held.Outcome, err)
	}
	lapsed := storage.ClaimArgs{Key: "lapsed", Fingerprint: []byte("fp"), Lease: time.Millisecond, Retention: time.Hour}
	if cl, err := s.Claim(ctx, lapsed); err != nil || cl.Outcome != storage.Acquired {
		t.Fatalf("claim of the lapsed key: %v %v", cl.Outcome, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; { // its lease ends: the key has no more than its retention to live
		if ttl, err := c.PTTL(ctx, s.RedisKey("lapsed")).Result(); err == nil && ttl <= time.Hour {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lapsed key's lease did not end within 10s")
		}
		time.Sleep(time.Millisecond)
	}

	fillUntilFull(t, c)

	// outOfMemory checks the error of a call that needed a write.
	outOfMemory := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, redisstore.ErrOutOfMemory) {
			t.Errorf("%s on a full Redis: %v, want ErrStoreUnavailable and ErrOutOfMemory", what, err)
		}
	}
	start := time.Now()
	res, err := g.Do(ctx, "order-1", payload, fn)
	if err != nil || !res.Replayed || string(res.Value) != "receipt" || runs != 1 {
		t.Fatalf("Guard.Do of a completed key on a full Redis: %+v %v (runs %d), want the replayed receipt", res, err, runs)
	}
	cl, err := s.Claim(ctx, args("done"))
	if err != nil || cl.Outcome != storage.Duplicate || string(cl.Record.Result) != "stored" {
		t.Fatalf("duplicate claim on a full Redis: %v %q %v, want Duplicate with its value", cl.Outcome, cl.Record.Result, err)
	}
	if cl, err := s.Claim(ctx, args("held")); err != nil || cl.Outcome != storage.Busy || cl.Token != 0 {
		t.Fatalf("claim of a held key on a full Redis: %v %v (token %d), want Busy", cl.Outcome, err, cl.Token)
	}
	reused := args("done")
	reused.Fingerprint = []byte("other")
	if _, err := s.Claim(ctx, reused); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("claim with another fingerprint on a full Redis: %v, want ErrKeyReused", err)
	}

	// What needs a write is refused, never answered from a read: the
	// takeover of a lapsed lease, a claim that finds its own token, an
	// outcome.
	_, err = s.Claim(ctx, lapsed)
	outOfMemory("the takeover of a lapsed lease", err)
	_, err = s.ClaimWithToken(ctx, args("held"), held.Token)
	outOfMemory("a claim resent with the holder's token", err)
	outOfMemory("Complete", s.Complete(ctx, "held", held.Token, []byte("v"), time.Hour))

	_, err = g.Do(ctx, "order-2", payload, fn)
	outOfMemory("Guard.Do of a new key", err)
	if runs != 1 {
		t.Fatal("fn ran for a key the store could not claim")
	}
	_, err = s.Claim(ctx, args("new"))
	outOfMemory("Claim of a new key", err)
	cls, err := s.ClaimBatch(ctx, []storage.ClaimArgs{args("done"), args("new"), args("held")})
	if err != nil {
		t.Fatalf("ClaimBatch on a full Redis: %v", err)
	}
	if cls[0].Err != nil || cls[0].Outcome != storage.Duplicate || string(cls[0].Record.Result) != "stored" {
		t.Errorf("ClaimBatch's duplicate on a full Redis: %v %q %v", cls[0].Outcome, cls[0].Record.Result, cls[0].Err)
	}
	outOfMemory("ClaimBatch's new key", cls[1].Err)
	if cls[2].Err != nil || cls[2].Outcome != storage.Busy {
		t.Errorf("ClaimBatch's held key on a full Redis: %v %v, want Busy", cls[2].Outcome, cls[2].Err)
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Errorf("the calls on a full Redis took %v", elapsed)
	}

	// Memory freed, the store claims again.
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := g.Do(ctx, "order-2", payload, fn); err != nil || res.Replayed || runs != 2 {
		t.Fatalf("Guard.Do once memory is freed: %+v %v (runs %d)", res, err, runs)
	}
}
