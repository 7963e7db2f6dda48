package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/cli/clitest"
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
			raw, s := kindStore(t, kind)
			ctx := context.Background()
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

			code, stdout, stderr := clitest.Args(t, run, "stats", "--store", raw, "--namespace", ns, "--json")
			var got []nsStats
			if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || len(got) != 1 {
				t.Fatalf("stats --json: %d\n%s%s", code, stdout, stderr)
			}
			st := got[0]
			if st.Completed != 3 || st.Failed != 2 || st.InProgress != 2 || st.Stalled != 1 || st.ResultBytes < 15 || st.OldestKey != "stalled" {
				t.Fatalf("stats of %q: %+v", ns, st)
			}
			code, stdout, _ = clitest.Args(t, run, "stats", "--store", raw)
			if code != 0 || !strings.Contains(stdout, `"`+ns+`"`) || !strings.Contains(stdout, `"`+ns+`-other"`) {
				t.Fatalf("stats of every namespace: %d\n%s", code, stdout)
			}

			stdin = strings.NewReader("n\n")
			if code, stdout, _ = clitest.Args(t, run, "purge", "--store", raw, "--namespace", ns, "--status", "failed"); code != 1 || !strings.Contains(stdout, "2 failed records") {
				t.Fatalf("purge --status answered no: %d\n%s", code, stdout)
			}
			if code, stdout, stderr = clitest.Args(t, run, "purge", "--store", raw, "--namespace", ns, "--status", "failed", "--yes"); code != 0 || !strings.Contains(stdout, "deleted 2 failed records") {
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

// TestPurgeOlderThan: on every store an operator reaches from a shell,
// purge --status failed --older-than deletes the failed records of the
// namespace written longer ago than that, by their expiry and the
// retention they were written with, and leaves the younger ones and the
// other statuses; it asks first, and --json says what it did. A record
// failed by a Guard whose FailedRetention is 1h expires 23h earlier than
// one failed at the same moment under 24h (--retention): to purge, it is
// as old as a record failed 23h ago.
func TestPurgeOlderThan(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dynamodb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			raw, s := kindStore(t, kind)
			ctx := context.Background()
			ns := "older-" + strings.ReplaceAll(t.Name(), "/", "-")
			guard := func(failedRetention time.Duration) *idem.Guard {
				g, err := idem.New(s, idem.Config{Namespace: ns, Retention: 24 * time.Hour, FailedRetention: failedRetention})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { g.Close() })
				return g
			}
			young, old := guard(24*time.Hour), guard(time.Hour)
			fail := func(context.Context) ([]byte, error) { return nil, idem.Permanent(errors.New("declined")) }
			ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }
			for _, k := range []string{"young-1", "young-2"} {
				young.Do(ctx, k, nil, fail)
			}
			for _, k := range []string{"old-1", "old-2", "old-3"} {
				old.Do(ctx, k, nil, fail)
			}
			if _, err := old.Do(ctx, "done", nil, ok); err != nil {
				t.Fatal(err)
			}
			at := []string{"purge", "--store", raw, "--namespace", ns, "--status", "failed", "--older-than", "12h"}

			stdin = strings.NewReader("n\n")
			code, stdout, stderr := clitest.Args(t, run, at...)
			if code != 1 || !strings.Contains(stdout, "3 failed records") || !strings.Contains(stdout, "more than 12h0m0s ago") {
				t.Fatalf("purge --older-than 12h answered no: %d\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = clitest.Args(t, run, append(at, "--yes", "--json")...)
			var got struct {
				OlderThan string `json:"older_than"`
				Before    time.Time
				Deleted   int
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Deleted != 3 || got.OlderThan != "12h0m0s" ||
				time.Since(got.Before) < 12*time.Hour || time.Since(got.Before) > 13*time.Hour {
				t.Fatalf("purge --older-than 12h --yes --json: %d %+v\n%s%s", code, got, stdout, stderr)
			}
			for _, k := range []string{"young-1", "young-2", "done", "old-1", "old-2", "old-3"} {
				_, err := s.Get(ctx, storage.StoreKey(ns, k))
				if gone := errors.Is(err, storage.ErrNotFound); gone != strings.HasPrefix(k, "old-") || (!gone && err != nil) {
					t.Errorf("after the purge, Get(%s): %v", k, err)
				}
			}
			// With the Guard's own retention named, the records failed
			// under 1h are as young as they are.
			old.Do(ctx, "old-4", nil, fail)
			if code, stdout, _ = clitest.Args(t, run, "purge", "--store", raw, "--namespace", ns, "--status", "failed",
				"--older-than", "30m", "--retention", "1h", "--yes"); code != 0 || !strings.Contains(stdout, "deleted 0 failed records") {
				t.Fatalf("purge --older-than 30m --retention 1h: %d\n%s", code, stdout)
			}
		})
	}
	stdin = nil
	clitest.Check(t, "idem", run, []clitest.Case{
		{Args: []string{"purge", "--store", "mem://", "--older-than", "1h", "k"}, Code: 2, Stderr: "--older-than goes with --status"},
		{Args: []string{"purge", "--store", "redis://127.0.0.1:1", "--status", "failed", "--older-than", "24h"}, Code: 2, Stderr: "is not less than --retention 24h0m0s"},
		{Args: []string{"purge", "--store", "redis://127.0.0.1:1", "--status", "failed", "--older-than", "-1h"}, Code: 2, Stderr: "must be positive"},
		{Args: []string{"purge", "--store", "redis://127.0.0.1:1", "--status", "failed", "--retention", "0s"}, Code: 2, Stderr: "--retention 0s: must be positive"},
	})
}

// lastWritten is when a record was last written, by what it holds.
func TestLastWritten(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		r    storage.Record
		want time.Time
	}{
		{"failed", storage.Record{Status: storage.StatusFailed, ExpiresAt: now.Add(24 * time.Hour)}, now},
		{"completed", storage.Record{Status: storage.StatusCompleted, ExpiresAt: now.Add(20 * time.Hour)}, now.Add(-4 * time.Hour)},
		{"in progress: its lease end", storage.Record{Status: storage.StatusInProgress, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(48 * time.Hour)}, now.Add(time.Minute)},
		{"released: the lease it gave up", storage.Record{Status: storage.StatusInProgress, ExpiresAt: now.Add(23 * time.Hour)}, now.Add(-time.Hour)},
	} {
		if got := lastWritten(tc.r, 24*time.Hour); !got.Equal(tc.want) {
			t.Errorf("%s: lastWritten = %v, want %v", tc.name, got, tc.want)
		}
	}
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
	code, stdout, stderr := clitest.Args(t, run, "outbox", "stats", "--store", pgstoretest.URL(), "--table", table, "--json")
	var got struct {
		Pending, Dead int64
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Pending != 2 || got.Dead != 0 {
		t.Fatalf("outbox stats: %d %+v\n%s%s", code, got, stdout, stderr)
	}
	if code, _, stderr = clitest.Args(t, run, "outbox", "stats", "--store", "redis://127.0.0.1:6379/0"); code != 2 || !strings.Contains(stderr, "postgres://") {
		t.Fatalf("outbox stats on Redis: %d %s", code, stderr)
	}
}
