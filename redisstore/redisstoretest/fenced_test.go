package redisstoretest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/redisstore/redisstoretest"
)

func TestFencedDedupeWritesOnlyWhileTheKeyHoldsItsToken(t *testing.T) {
	t.Parallel()
	c := redisstoretest.Client(t)
	prefix := redisstoretest.Prefix(t, c)
	ctx := context.Background()
	const lease, retention = time.Hour, 2 * time.Hour
	f := redisstoretest.NewFencedDedupe(c, prefix, lease, retention)

	claimFive(t, c, f, prefix)
	tokens := map[string]bool{}
	for _, k := range []string{"a", "b", "taken"} {
		v, err := c.Get(ctx, prefix+k).Result()
		if err != nil || len(v) != 8 || tokens[v] {
			t.Fatalf("claimed %s holds %q (%v), want a token of 8 bytes of its own", k, v, err)
		}
		tokens[v] = true
		if ttl := c.PTTL(ctx, prefix+k).Val(); ttl <= retention || ttl > lease+retention {
			t.Errorf("claimed %s lives %v, want lease+retention %v", k, ttl, lease+retention)
		}
	}

	// Another claim takes "taken" over: its outcome must not be written.
	if err := c.Set(ctx, prefix+"taken", "another token", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := f.Complete(ctx, []byte("ok"))
	if err == nil || !strings.Contains(err.Error(), "2 of the 3") {
		t.Errorf("Complete after a takeover: %v, want an error that counts 2 of the 3 outcomes written", err)
	}
	for k, want := range map[string]string{"a": "ok", "b": "ok", "taken": "another token", "done": "an earlier outcome"} {
		if v, err := c.Get(ctx, prefix+k).Result(); v != want {
			t.Errorf("%s holds %q (%v), want %q", k, v, err, want)
		}
	}
	for _, k := range []string{"a", "b"} {
		if ttl := c.PTTL(ctx, prefix+k).Val(); ttl <= lease || ttl > retention {
			t.Errorf("outcome %s lives %v, want the retention %v", k, ttl, retention)
		}
	}
	if ttl := c.PTTL(ctx, prefix+"taken").Val(); ttl != -1 {
		t.Errorf("the taken key's TTL is %v, want it left as the takeover set it (none)", ttl)
	}
}

func TestFencedDedupeCompletesBatchesOfManyScripts(t *testing.T) {
	t.Parallel()
	c := redisstoretest.Client(t)
	prefix := redisstoretest.Prefix(t, c)
	ctx := context.Background()
	f := redisstoretest.NewFencedDedupe(c, prefix, time.Minute, time.Hour)
	for round, n := range []int{300, 5, 129} { // buffers reused, shorter and longer
		keys, stored := make([]string, n), make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint(round, "-", i)
			stored[i] = prefix + keys[i]
		}
		claimed, err := f.Claim(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(claimed, false); i >= 0 || len(claimed) != n {
			t.Fatalf("round %d: %d claims, key %d not claimed, want all %d claimed", round, len(claimed), i, n)
		}
		if err := f.Complete(ctx, []byte("ok")); err != nil {
			t.Fatalf("round %d: Complete: %v", round, err)
		}
		vs, err := c.MGet(ctx, stored...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vs {
			if v != "ok" {
				t.Fatalf("round %d: key %d holds %v, want the outcome", round, i, v)
			}
		}
		again, err := f.Claim(ctx, keys[:1])
		if err != nil || again[0] {
			t.Errorf("round %d: a completed key claimed again: %v %v", round, again, err)
		}
		if err := f.Complete(ctx, []byte("ok")); err != nil {
			t.Errorf("round %d: Complete of nothing claimed: %v", round, err)
		}
	}
}

func TestRecordDedupeKeepsARecordOfItsSize(t *testing.T) {
	t.Parallel()
	c := redisstoretest.Client(t)
	prefix := redisstoretest.Prefix(t, c)
	ctx := context.Background()
	const size, lease, retention = 56, time.Hour, 2 * time.Hour
	f := redisstoretest.NewRecordDedupe(c, prefix, lease, retention, size)

	claimFive(t, c, f, prefix)
	records := map[string]string{}
	for _, k := range []string{"a", "b", "taken"} {
		v, err := c.Get(ctx, prefix+k).Result()
		if err != nil || len(v) != size || strings.Count(v[8:], "\x00") != size-8 {
			t.Fatalf("claimed %s holds %q (%v), want a token and zeros, %d bytes", k, v, err, size)
		}
		records[k] = v
	}
	if err := c.Set(ctx, prefix+"taken", "another record", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := f.Complete(ctx, []byte("ok"))
	if err == nil || !strings.Contains(err.Error(), "2 of the 3") {
		t.Errorf("Complete after a takeover: %v, want an error that counts 2 of the 3 outcomes written", err)
	}
	for k, want := range map[string]string{"a": records["a"] + "ok", "b": records["b"] + "ok", "taken": "another record"} {
		if v, err := c.Get(ctx, prefix+k).Result(); v != want {
			t.Errorf("%s holds %q (%v), want %q", k, v, err, want)
		}
	}
	if ttl := c.PTTL(ctx, prefix+"a").Val(); ttl <= lease || ttl > retention {
		t.Errorf("outcome a lives %v, want the retention %v", ttl, retention)
	}
}

// claimFive stores an outcome under "done", then has f claim a, done, b,
// a again and taken, and fails t unless f claimed a, b and taken only:
// not a stored key, nor a key's second copy.
func claimFive(t *testing.T, c *redis.Client, f *redisstoretest.FencedDedupe, prefix string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Set(ctx, prefix+"done", "an earlier outcome", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	claimed, err := f.Claim(ctx, []string{"a", "done", "b", "a", "taken"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, false, true}; !slices.Equal(claimed, want) {
		t.Fatalf("claimed %v, want %v: not a stored key, nor a key's second copy", claimed, want)
	}
}
