package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/storeurl/storeurltest"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestBenchUsage(t *testing.T) {
	clitest.Check(t, "idem-bench", run, []clitest.Case{
		{Args: nil, Code: 2, Stderr: "idem-bench: name a benchmark: http, store"},
		{Args: []string{"-h"}, Code: 0, Stderr: "http    a handler that sleeps"},
		{Args: []string{"help"}, Code: 0, Stderr: "Usage: idem-bench <benchmark> [flags]"},
		{Args: []string{"help", "store"}, Code: 0, Stderr: "Usage: idem-bench store --store URL [flags]"},
		{Args: []string{"ftp"}, Code: 2, Stderr: `idem-bench: unknown benchmark "ftp" (benchmarks: http, store, chart)`},
		{Args: []string{"--clients", "3", "http"}, Code: 2, Stderr: "flag provided but not defined: -clients"},
		{Args: []string{"http", "-h"}, Code: 0, Stderr: "Usage: idem-bench http [flags]"},
		{Args: []string{"http", "--repeat", "1"}, Code: 2, Stderr: "idem-bench: --repeat 1: must be at least 0 and below 1\nrun 'idem-bench http -h' for its flags"},
		{Args: []string{"http", "--repeat", "-0.3"}, Code: 2, Stderr: "idem-bench: --repeat -0.3: must be at least 0 and below 1"},
		{Args: []string{"http", "--repeat", "NaN"}, Code: 2, Stderr: "idem-bench: --repeat NaN: must be at least 0 and below 1"},
		{Args: []string{"http", "--repeat", "often"}, Code: 2, Stderr: `invalid value "often" for flag -repeat`},
		{Args: []string{"http", "--clients", "0"}, Code: 2, Stderr: "idem-bench: --clients 0: must be at least 1"},
		{Args: []string{"http", "--rounds", "0"}, Code: 2, Stderr: "idem-bench: --rounds 0: must be at least 1"},
		{Args: []string{"http", "--duration", "40ms", "--rounds", "5"}, Code: 2, Stderr: "idem-bench: --duration 40ms: too short for 5 rounds"},
		{Args: []string{"http", "--duration", "0s"}, Code: 2, Stderr: "idem-bench: --duration 0s: must be positive"},
		{Args: []string{"http", "--duration", "-1s"}, Code: 2, Stderr: "idem-bench: --duration -1s: must be positive"},
		{Args: []string{"http", "--duration", "10"}, Code: 2, Stderr: `invalid value "10" for flag -duration`},
		{Args: []string{"http", "--sleep", "-5ms"}, Code: 2, Stderr: "idem-bench: --sleep -5ms: must not be negative"},
		{Args: []string{"http", "--stores", "mem://,,mem://"}, Code: 2, Stderr: `idem-bench: --stores "mem://,,mem://": an empty entry`},
		{Args: []string{"http", "--stores", "mem://,ftp://x"}, Code: 2, Stderr: `unsupported scheme "ftp"`},
		{Args: []string{"http", "now"}, Code: 2, Stderr: `idem-bench: http: unexpected argument "now"`},
	})
}

func TestBenchHTTPUnreachableStore(t *testing.T) {
	// Nothing listens on port 1: the store fails before any load runs.
	code, stdout, stderr := clitest.Args(t, run, "http", "--duration", "100ms", "--stores", "mem://,redis://127.0.0.1:1/0")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "redis://127.0.0.1:1/0?pool_size=50: cannot reach Redis") {
		t.Errorf("exit status %d, want 1 with an error naming the store and no table\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestBenchHTTPMem(t *testing.T) {
	code, stdout, stderr := clitest.Args(t, run, "http", "--duration", "300ms", "--clients", "4", "--sleep", "5ms", "--stores", "mem://", "--json")
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("\n%s", stdout)

	for _, row := range []string{"baseline +fresh", "mem +fresh", "baseline +repeat", "mem +repeat"} {
		if !regexp.MustCompile(`(?m)^ *` + row + ` +\d+ `).MatchString(stdout) {
			t.Errorf("the table has no row %q", row)
		}
	}

	report := jsonReport(t, stdout)
	want := []struct{ store, pass string }{{"baseline", "fresh"}, {"mem", "fresh"}, {"baseline", "repeat"}, {"mem", "repeat"}}
	if len(report.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(report.Rows), len(want), report.Rows)
	}
	for i, r := range report.Rows {
		if r.Store != want[i].store || r.Pass != want[i].pass {
			t.Errorf("row %d is %s/%s, want %s/%s", i, r.Store, r.Pass, want[i].store, want[i].pass)
		}
		if r.Requests == 0 || r.Errors != 0 || r.ReqPerSec <= 0 || r.P99MS < 5 {
			t.Errorf("%s/%s: %d requests, %d errors, %.1f req/s, p99 %.2fms; want requests, no error, and a p99 of the handler's 5ms at least",
				r.Store, r.Pass, r.Requests, r.Errors, r.ReqPerSec, r.P99MS)
		}
	}
	fresh, repeat := report.Rows[1], report.Rows[3]
	if fresh.Repeats != 0 || fresh.Replays != 0 {
		t.Errorf("mem/fresh: %d repeats, %d replays; want none", fresh.Repeats, fresh.Replays)
	}
	// Every repeat resends a completed key, so every one is replayed.
	if repeat.Replays == 0 || repeat.Replays != repeat.Repeats {
		t.Errorf("mem/repeat: %d replays of %d repeats; want some, all replayed", repeat.Replays, repeat.Repeats)
	}
	if base := report.Rows[2]; base.Repeats == 0 || base.Replays != 0 {
		t.Errorf("baseline/repeat: %d repeats, %d replays; want repeats run again, not replayed", base.Repeats, base.Replays)
	}
	if !strings.Contains(stderr, "idem-bench http: repeat pass, round 5 of 5, 60ms per row") {
		t.Errorf("stderr = %q, want the rows' progress", stderr)
	}
}

// TestBenchHTTPBareRows: each Redis and PostgreSQL row is followed, in the
// fresh pass only, by its bare row, whose writes reach the server and are
// cleaned up after the run.
func TestBenchHTTPBareRows(t *testing.T) {
	redisURL, pgURL := storeurltest.Server(t, "redis"), storeurltest.Server(t, "postgres")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	// Counted before and after, so that what other runs left does not
	// count.
	counts := func() (tables, keys int) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'idem_bench_bare_%'`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		ks, err := rc.Keys(ctx, "idem-bench-bare:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return tables, len(ks)
	}
	tablesBefore, keysBefore := counts()

	code, stdout, stderr := clitest.Args(t, run, "http", "--duration", "200ms", "--rounds", "2", "--clients", "4",
		"--sleep", "2ms", "--stores", redisURL+","+pgURL, "--json")
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	report := jsonReport(t, stdout)
	var got []string
	for _, r := range report.Rows {
		got = append(got, r.Store+"/"+r.Pass)
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s/%s: %d requests, %d errors (%v); want requests and no error", r.Store, r.Pass, r.Requests, r.Errors, r.ErrorSample)
		}
	}
	want := []string{"baseline/fresh", "redis/fresh", "redis, bare/fresh", "postgres/fresh", "postgres, bare/fresh",
		"baseline/repeat", "redis/repeat", "postgres/repeat"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}

	// The bare writes went to the servers: Redis keeps the keys until
	// they expire, the PostgreSQL table is dropped with the run.
	tables, keys := counts()
	if tables != tablesBefore {
		t.Errorf("%d bare tables before the run, %d after; want the run's dropped", tablesBefore, tables)
	}
	if keys <= keysBefore {
		t.Errorf("%d bare Redis keys before the run, %d after; want the run's written", keysBefore, keys)
	}
}

// jsonReport returns the rows of the JSON that --json prints after the
// table.
func jsonReport(t *testing.T, stdout string) (report struct{ Rows []benchRow }) {
	t.Helper()
	i := strings.Index(stdout, "\n{")
	if i < 0 {
		t.Fatal("no JSON after the table")
	}
	if err := json.Unmarshal([]byte(stdout[i:]), &report); err != nil {
		t.Fatalf("the JSON: %v", err)
	}
	return report
}

func TestKeyPool(t *testing.T) {
	var p keyPool
	if k, ok := p.pick(); ok {
		t.Errorf("an empty pool picked %q", k)
	}
	p.add("")
	p.add("a")
	p.add("a")
	if len(p.keys) != 1 {
		t.Errorf("after adding a twice and \"\": keys %q, want [a]", p.keys)
	}
	if k, ok := p.pick(); !ok || k != "a" {
		t.Errorf("pick = %q, %v; want a", k, ok)
	}
}

func TestWithPoolSize(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?pool_max_conns=50&sslmode=disable"},
		{"postgres://u@h/db?pool_max_conns=8", "postgres://u@h/db?pool_max_conns=8"},
		{"redis://h:6379/0", "redis://h:6379/0?pool_size=50"},
		{"redis://h:6379/0?pool_size=3", "redis://h:6379/0?pool_size=3"},
		{"mem://", "mem://"},
	} {
		if got := withPoolSize(tt.in, 50); got != tt.want {
			t.Errorf("withPoolSize(%q, 50) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
