package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

// TestDemoOnServers runs the demo on the real stores: --store is all it
// takes, PostgreSQL's table and SQLite's file are created on the way.
func TestDemoOnServers(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			raw := storeurltest.URL(t, kind)
			for _, keep := range []bool{false, true} {
				args := []string{"demo", "--messages", "400", "--dup-rate", "0.3", "--crash-rate", "0.05", "--seed", "7", "--store", raw}
				if keep {
					args = append(args, "--keep")
				}
				code, stdout, stderr := clitest.Args(t, run, args...)
				if code != 0 || !strings.Contains(stdout, "OK: idem charged every order once in this run") {
					t.Fatalf("demo --store %s: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", raw, code, stdout, stderr)
				}
				// The demo leaves nothing behind in the user's store unless
				// told to, and says which it did.
				if n, want := demoRecords(t, kind, raw), map[bool]int{false: 0, true: 400}[keep]; n != want {
					t.Fatalf("demo --keep=%v left %d records in the store, want %d\nstdout:\n%s", keep, n, want, stdout)
				}
				if said := map[bool]string{false: "Deleted the run's 400 records", true: "The run's 400 records stay in"}[keep]; !strings.Contains(stdout, said) {
					t.Fatalf("demo --keep=%v does not say %q:\n%s", keep, said, stdout)
				}
			}
		})
	}
}

// TestMigrateThenReap: migrate creates the table (twice is fine), reap
// deletes the expired records and leaves the live ones.
func TestMigrateThenReap(t *testing.T) {
	raw := storeurltest.URL(t, "postgres")
	for range 2 {
		code, stdout, stderr := clitest.Args(t, run, "migrate", "--store", raw)
		if code != 0 || !strings.Contains(stdout, "is up to date") {
			t.Fatalf("migrate: exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	}

	ctx := context.Background()
	s, closeStore, err := openStore(ctx, raw, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	claim := func(key string, retention time.Duration) {
		t.Helper()
		c, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Lease: time.Minute, Retention: time.Hour})
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("claim %s: %+v %v", key, c, err)
		}
		if err := s.Complete(ctx, key, c.Token, []byte("v"), retention); err != nil {
			t.Fatal(err)
		}
	}
	const expired = 25
	for i := range expired {
		claim(fmt.Sprint("old-", i), time.Millisecond)
	}
	claim("live", time.Hour)
	// The server's clock decides expiry: wait until it says the last of
	// the short-lived records is gone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := s.Get(ctx, fmt.Sprint("old-", expired-1))
		if errors.Is(err, storage.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record did not expire on the server's clock: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	code, stdout, stderr := clitest.Args(t, run, "reap", "--store", raw, "--batch", "10")
	if want := fmt.Sprintf("deleted %d expired records", expired); code != 0 || !strings.Contains(stdout, want) {
		t.Fatalf("reap: exit status %d, want 0 and %q\nstdout:\n%s\nstderr:\n%s", code, want, stdout, stderr)
	}
	if _, err := s.Get(ctx, "live"); err != nil {
		t.Fatalf("the live record after reap: %v", err)
	}
	if code, stdout, _ := clitest.Args(t, run, "reap", "--store", raw); code != 0 || !strings.Contains(stdout, "deleted 0 expired records") {
		t.Errorf("a second reap: exit status %d, stdout %q; want nothing left to delete", code, stdout)
	}
}

// TestUnreachableServer: a server that does not answer is exit status 1
// with ErrStoreUnavailable's message, and never a hang or a pass.
func TestUnreachableServer(t *testing.T) {
	for _, raw := range []string{
		"redis://127.0.0.1:1/0?dial_timeout=200ms",
		"postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1",
	} {
		code, _, stderr := clitest.Args(t, run, "demo", "--messages", "10", "--store", raw)
		if code != 1 || !strings.Contains(stderr, "cannot reach") || !strings.Contains(stderr, idem.ErrStoreUnavailable.Error()) {
			t.Errorf("demo --store %s: exit status %d, stderr %q; want 1 and the store named unavailable", raw, code, stderr)
		}
	}
}

// demoRecords counts the records in the store of a URL from testStoreURL:
// the keys under its Redis prefix, or the rows of its PostgreSQL table or
// SQLite file.
func demoRecords(t *testing.T, kind, raw string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	switch kind {
	case "redis":
		keys, err := redisstoretest.Client(t).Keys(ctx, u.Query().Get("prefix")+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	case "sqlite":
		s, err := sqlitestore.Open(ctx, u.Path, sqlitestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+s.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	table := pgx.Identifier(strings.Split(u.Query().Get("table"), ".")).Sanitize()
	if err := pgstoretest.Pool(t, 1).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
