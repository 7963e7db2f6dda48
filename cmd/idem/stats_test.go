package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/storage"
)

// TestStatsAndPurgeByStatus: on every store an operator reaches from a
// shell, stats counts what Guards of two namespaces left (completed,
// failed, in progress with a live lease, stalled), and purge --status
// failed deletes the failed records of one namespace only, so that their
// keys run again.
func TestStatsAndPurgeByStatus(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dynamodb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			raw := dynamoOr(t, kind)
			ctx := context.Background()
			s, closeStore, err := openStore(ctx, raw, true)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			ns := "stats-" + strings.ReplaceAll(t.Name(), "/", "-")
			g, err := idem.New(s, idem.Config{Namespace: ns, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			other, err := idem.New(s, idem.Config{Namespace: ns + "-other"})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			ok := func(context.Context) ([]byte, error) { return []byte("12345"), nil }
			fail := func(context.Context) ([]byte, error) { return nil, idem.Permanent(errors.New("no")) }
			for _, k := range []string{"a", "b", "c"} {
				g.Do(ctx, k, nil, ok)
			}
			for _, k := range []string{"d", "e"} {
				g.Do(ctx, k, nil, fail)
				other.Do(ctx, k, nil, fail)
			}
			claim := func(k string, lease time.Duration) {
				if _, err := s.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey(ns, k), Lease: lease, Retention: time.Hour}); err != nil {
					t.Fatal(err)
				}
			}
			claim("live", time.Hour)
			claim("stalled", time.Millisecond)
			time.Sleep(5 * time.Millisecond) // the lease of a millisecond ends: no race, a lease that short is over whatever the load

			code, stdout, stderr := runArgs(t, "stats", "--store", raw, "--namespace", ns, "--json")
			var got []nsStats
			if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || len(got) != 1 {
				t.Fatalf("stats --json: %d\n%s%s", code, stdout, stderr)
			}
			st := got[0]
			if st.Completed != 3 || st.Failed != 2 || st.InProgress != 2 || st.Stalled != 1 || st.ResultBytes < 15 || st.OldestKey != "stalled" {
				t.Fatalf("stats of %q: %+v", ns, st)
			}
			code, stdout, _ = runArgs(t, "stats", "--store", raw)
			if code != 0 || !strings.Contains(stdout, `"`+ns+`"`) || !strings.Contains(stdout, `"`+ns+`-other"`) {
				t.Fatalf("stats of every namespace: %d\n%s", code, stdout)
			}

			stdin = strings.NewReader("n\n")
			if code, stdout, _ = runArgs(t, "purge", "--store", raw, "--namespace", ns, "--status", "failed"); code != 1 || !strings.Contains(stdout, "2 failed records") {
				t.Fatalf("purge --status answered no: %d\n%s", code, stdout)
			}
			if code, stdout, stderr = runArgs(t, "purge", "--store", raw, "--namespace", ns, "--status", "failed", "--yes"); code != 0 || !strings.Contains(stdout, "deleted 2 failed records") {
				t.Fatalf("purge --status failed --yes: %d\n%s%s", code, stdout, stderr)
			}
			ran := 0
			for _, k := range []string{"d", "e"} {
				g.Do(ctx, k, nil, func(context.Context) ([]byte, error) { ran++; return nil, nil })
				other.Do(ctx, k, nil, func(context.Context) ([]byte, error) { ran += 10; return nil, nil })
			}
			if ran != 2 {
				t.Fatalf("after purging one namespace's failed records, runs %d, want its 2 keys only", ran)
			}
		})
	}
	stdin = nil
}

// TestOutboxStats: idem outbox stats reads a table's backlog as the relay
// does.
func TestOutboxStats(t *testing.T) {
	pool := pgstoretest.Pool(t, 2)
	table := pgstoretest.Schema(t, pool) + ".outbox"
	ctx := context.Background()
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	o, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Enqueue(ctx, pool, outbox.Message{Destination: "orders", Payload: []byte("1")}, outbox.Message{Destination: "orders", Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "outbox", "stats", "--store", pgstoretest.URL(), "--table", table, "--json")
	var got struct {
		Pending, Dead int64
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Pending != 2 || got.Dead != 0 {
		t.Fatalf("outbox stats: %d %+v\n%s%s", code, got, stdout, stderr)
	}
	if code, _, stderr = runArgs(t, "outbox", "stats", "--store", "redis://127.0.0.1:6379/0"); code != 2 || !strings.Contains(stderr, "postgres://") {
		t.Fatalf("outbox stats on Redis: %d %s", code, stderr)
	}
}
