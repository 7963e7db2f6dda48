package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

func TestBenchStoreUsage(t *testing.T) {
	clitest.Check(t, "idem-bench", run, []clitest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "store   a store's operations beside a bare client"},
		{Args: []string{"store", "-h"}, Code: 0, Stderr: "Usage: idem-bench store --store URL [flags]"},
		{Args: []string{"store"}, Code: 2, Stderr: "idem-bench: store: --store is required\nrun 'idem-bench store -h' for its flags"},
		{Args: []string{"store", "--store", "mem://", "--rounds", "0"}, Code: 2, Stderr: "idem-bench: --rounds 0: must be at least 1"},
		{Args: []string{"store", "--store", "mem://", "--duration", "0s"}, Code: 2, Stderr: "idem-bench: --duration 0s: must be positive"},
		{Args: []string{"store", "--store", "mem://", "--ops", "-1"}, Code: 2, Stderr: "idem-bench: --ops -1: must not be negative"},
		{Args: []string{"store", "--store", "mem://", "--goroutines", "1,,16"}, Code: 2, Stderr: `idem-bench: --goroutines "1,,16": want numbers from 1 to 1024`},
		{Args: []string{"store", "--store", "mem://", "--goroutines", "0"}, Code: 2, Stderr: `idem-bench: --goroutines "0": want numbers from 1 to 1024`},
		{Args: []string{"store", "--store", "mem://", "--cases", "do,undo"}, Code: 2, Stderr: `idem-bench: --cases: unknown case "undo"`},
		{Args: []string{"store", "--store", "mem://", "--sides", "left"}, Code: 2, Stderr: `idem-bench: --sides "left": want store, bare or store,bare`},
		{Args: []string{"store", "--store", "mem://", "--cases", "txguard-do"}, Code: 2, Stderr: "idem-bench: --cases txguard-do: none of them applies to mem://"},
		{Args: []string{"store", "--store", "mem://x"}, Code: 2, Stderr: "mem:// takes no host, path or options"},
		{Args: []string{"store", "--store", "ftp://x"}, Code: 2, Stderr: `unsupported scheme "ftp"`},
		{Args: []string{"store", "--store", "postgres://u:s3cret@127.0.0.1:1/db?table=t"}, Code: 2, Stderr: "no ?table=: the benchmark's tables go in a schema of its own"},
		{Args: []string{"store", "--store", "mem://", "now"}, Code: 2, Stderr: `idem-bench: store: unexpected argument "now"`},
	})
}

// benchStoreJSON runs idem-bench store with args and --json, and returns
// the report after checking the run succeeded and printed its table.
func benchStoreJSON(t *testing.T, args ...string) (report benchStoreReport, stdout string) {
	t.Helper()
	code, stdout, stderr := clitest.Args(t, run, append([]string{"store", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("\n%s", stdout)
	table, js, ok := strings.Cut(stdout, "\n{")
	if !ok {
		t.Fatalf("no JSON after the table:\n%s", stdout)
	}
	if err := json.Unmarshal([]byte("{"+js), &report); err != nil {
		t.Fatalf("the JSON: %v", err)
	}
	for _, r := range report.Rows {
		if !strings.Contains(table, r.Title) {
			t.Errorf("the table has no row %q", r.Title)
		}
	}
	return report, stdout
}

// wantRounds checks that every row measured both sides in every round,
// and that its ratios are the rounds' own store ÷ bare.
func wantRounds(t *testing.T, report benchStoreReport, cases []string, goroutines []int, rounds int) {
	t.Helper()
	var got, want []string
	for _, c := range cases {
		for _, g := range goroutines {
			want = append(want, fmt.Sprint(c, "/", g))
		}
	}
	for _, r := range report.Rows {
		got = append(got, fmt.Sprint(r.Case, "/", r.Goroutines))
		if len(r.StoreKeysPS) != rounds || len(r.BareKeysPS) != rounds || len(r.Ratios) != rounds {
			t.Errorf("%s on %d goroutines: %d store, %d bare rates and %d ratios, want %d of each",
				r.Case, r.Goroutines, len(r.StoreKeysPS), len(r.BareKeysPS), len(r.Ratios), rounds)
			continue
		}
		for i := range rounds {
			s, b := r.StoreKeysPS[i], r.BareKeysPS[i]
			if s <= 0 || b <= 0 || r.StoreOps[i] <= 0 || r.BareOps[i] <= 0 {
				t.Errorf("%s on %d goroutines, round %d: store %v keys/s, bare %v; want both measured", r.Case, r.Goroutines, i+1, s, b)
			}
			if math.Abs(r.Ratios[i]-100*s/b) > 1e-9 {
				t.Errorf("%s, round %d: ratio %v%%, want store ÷ bare = %v%%", r.Case, i+1, r.Ratios[i], 100*s/b)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

func TestBenchStoreMem(t *testing.T) {
	// A count of operations, not a duration: on a loaded machine a side of
	// a few milliseconds may get no time to run at all.
	report, stdout := benchStoreJSON(t, "--store", "mem://", "--ops", "300", "--rounds", "3", "--goroutines", "1,3")
	wantRounds(t, report, []string{"claim-complete", "claim-batch", "do", "do-duplicate", "do-cached"}, []int{1, 3}, 3)
	if report.Store != "mem://" || report.Memory != nil {
		t.Errorf("report of %q with memory %v, want mem:// without", report.Store, report.Memory)
	}
	if !strings.Contains(stdout, "3 rounds, 300 operations per side") {
		t.Errorf("the header does not say how the run went:\n%s", stdout)
	}
}

func TestBenchStoreOpsAndOneSide(t *testing.T) {
	// The callgrind scripts count a server's instructions over an exact
	// number of operations of one side.
	report, _ := benchStoreJSON(t, "--store", "mem://", "--ops", "250", "--rounds", "2", "--goroutines", "4",
		"--cases", "claim-complete,claim-batch", "--sides", "bare")
	if len(report.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(report.Rows))
	}
	for _, r := range report.Rows {
		if !slices.Equal(r.BareOps, []int{250, 250}) || len(r.StoreOps) != 0 || len(r.Ratios) != 0 {
			t.Errorf("%s: store ops %v, bare ops %v, ratios %v; want 250 bare operations a round and nothing else",
				r.Case, r.StoreOps, r.BareOps, r.Ratios)
		}
	}
}

func TestBenchStoreUnreachable(t *testing.T) {
	for _, raw := range []string{"redis://127.0.0.1:1/0?max_retries=-1", "postgres://postgres:s3cret@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"} {
		code, stdout, stderr := clitest.Args(t, run, "store", "--store", raw, "--duration", "10ms")
		if code != 1 || stdout != "" || !strings.Contains(stderr, "cannot reach") || strings.Contains(stderr, "s3cret") {
			t.Errorf("--store %s: exit status %d, want 1 with an error naming the store without its password, and no table\nstdout:\n%s\nstderr:\n%s",
				raw, code, stdout, stderr)
		}
	}
}

// TestBenchStoreOnServers runs every case of Redis and PostgreSQL for a few
// operations and checks the run leaves nothing behind on the shared
// servers: no key (Redis), no schema (PostgreSQL).
func TestBenchStoreOnServers(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		c := redisstoretest.Client(t)
		prefix := redisstoretest.Prefix(t, c)
		raw := storeurltest.WithParam(t, storeurltest.Server(t, "redis"), "prefix", prefix)
		report, _ := benchStoreJSON(t, "--store", raw, "--ops", "40", "--rounds", "2", "--goroutines", "1,2")
		wantRounds(t, report, []string{"claim-complete", "claim-batch", "do", "do-duplicate"}, []int{1, 2}, 2)
		if m := report.Memory; m == nil || m.Store <= 0 || m.Bare <= 0 {
			t.Errorf("memory per record %+v, want both measured", m)
		}
		keys, err := c.Keys(context.Background(), prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 0 {
			t.Errorf("%d keys left under %s after the run, e.g. %s; want every key deleted", len(keys), prefix, keys[0])
		}
	})
	t.Run("postgres", func(t *testing.T) {
		raw := storeurltest.Server(t, "postgres")
		pool := pgstoretest.Pool(t, 1)
		schemas := func() []string {
			rows, err := pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, 'idem_bench_')`)
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return names
		}
		before := schemas()
		report, _ := benchStoreJSON(t, "--store", raw, "--ops", "40", "--rounds", "2", "--goroutines", "1,2")
		wantRounds(t, report, []string{"claim-complete", "claim-batch", "do", "do-duplicate", "txguard-do"}, []int{1, 2}, 2)
		if !strings.Contains(report.Server, "PostgreSQL") || !strings.Contains(report.Server, "synchronous_commit=") {
			t.Errorf("server %q, want its version and synchronous_commit", report.Server)
		}
		for _, s := range schemas() {
			if !slices.Contains(before, s) {
				t.Errorf("schema %s is left after the run", s)
			}
		}
	})
}
