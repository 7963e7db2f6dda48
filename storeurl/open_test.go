package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	_ "github.com/idemgo/idem/storeurl/cassandraurl"
	_ "github.com/idemgo/idem/storeurl/dynamourl"
	_ "github.com/idemgo/idem/storeurl/pgurl"
	_ "github.com/idemgo/idem/storeurl/redisurl"
	_ "github.com/idemgo/idem/storeurl/sqliteurl"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

// TestMain fails the run if a store's connections outlive its close
// function: a pool's, a client's, an HTTP transport's goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(runThenClose{m})
}

// runThenClose runs the tests, then closes the session the Cassandra
// tests share, before goleak looks for what outlived them.
type runThenClose struct{ m *testing.M }

func (r runThenClose) Run() int {
	code := r.m.Run()
	cassandrastoretest.Cleanup()
	return code
}

// secret is the password and secret parameter of the hostile URLs.
const secret = "S3cretPw"

// noSecret fails t if err's message, or that of any error in its chain,
// holds the secret.
func noSecret(t *testing.T, raw string, err error) {
	t.Helper()
	for _, e := range chain(err) {
		if strings.Contains(e.Error(), secret) {
			t.Errorf("Open(%q): an error of the chain, %T, prints the secret: %v", raw, e, e)
		}
	}
}

// chain returns err and every error it wraps, depth first.
func chain(err error) []error {
	if err == nil {
		return nil
	}
	out := []error{err}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, chain(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, chain(e)...)
		}
	}
	return out
}

// storeURL returns a URL of kind's server whose records are the test's
// own, deleted when it ends: storeurltest's, and a table of its own on
// DynamoDB (not created yet).
func storeURL(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "dynamodb":
		return dynamostoretest.URL(t)
	case "cassandra":
		return cassandrastoretest.URL(t)
	}
	return storeurltest.URL(t, kind)
}

func open(t *testing.T, raw string, opts ...storeurl.Option) storage.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeStore, err := storeurl.Open(ctx, raw, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	t.Cleanup(func() {
		if err := closeStore(); err != nil {
			t.Errorf("closing %s: %v", raw, err)
		}
	})
	return s
}

// complete claims key in s and completes it with value.
func complete(t *testing.T, s storage.Store, key, value string) {
	t.Helper()
	ctx := context.Background()
	c, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("%T: claim %s: %+v %v", s, key, c, err)
	}
	if err := s.Complete(ctx, key, c.Token, []byte(value), time.Hour); err != nil {
		t.Fatalf("%T: complete %s: %v", s, key, err)
	}
}

// TestOpenEveryScheme: each scheme opens its store, on the real server,
// where the URL says (the prefix, table or file it names); a second Open
// of the same URL, as another process would, finds the first one's
// record; with Migrate the table is made on the way.
func TestOpenEveryScheme(t *testing.T) {
	for kind, want := range map[string]any{
		"mem":       (*memstore.Store)(nil),
		"redis":     (*redisstore.Store)(nil),
		"postgres":  (*pgstore.Store)(nil),
		"dynamodb":  (*dynamostore.Store)(nil),
		"cassandra": (*cassandrastore.Store)(nil),
		"sqlite":    (*sqlitestore.Store)(nil),
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			raw := storeURL(t, kind)
			s := open(t, raw, storeurl.Migrate())
			if reflect.TypeOf(s) != reflect.TypeOf(want) {
				t.Fatalf("Open(%s) = %T, want %T", raw, s, want)
			}
			complete(t, s, "order-7", "charged")
			if kind == "mem" {
				return // the process's own: nothing to find from elsewhere
			}
			again := open(t, raw)
			r, err := again.Get(context.Background(), "order-7")
			if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != "charged" {
				t.Fatalf("a second Open of %s: Get = %+v, %v; want the first one's completed record", raw, r, err)
			}
			wantRecordWhereTheURLSays(t, kind, raw)
		})
	}
}

// wantRecordWhereTheURLSays checks that the record of TestOpenEveryScheme
// is under the URL's Redis prefix, in its PostgreSQL table or its SQLite
// file.
func wantRecordWhereTheURLSays(t *testing.T, kind, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	switch kind {
	case "redis":
		keys, err := redisstoretest.Client(t).Keys(ctx, u.Query().Get("prefix")+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		n = len(keys)
	case "postgres":
		table := pgx.Identifier(strings.Split(u.Query().Get("table"), ".")).Sanitize()
		if err := pgstoretest.Pool(t, 1).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
	case "sqlite":
		if _, err := os.Stat(u.Path); err != nil {
			t.Fatalf("the file of %s: %v", raw, err)
		}
		return
	case "dynamodb":
		return // the second Open checked the URL's table (CheckTable) and read the record there
	case "cassandra":
		q := "SELECT count(*) FROM " + strings.TrimPrefix(u.Path, "/") + "." + cassandrastore.DefaultTable + " WHERE k = ?"
		if err := cassandrastoretest.Session(t).Query(q, []byte("order-7")).ScanContext(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Errorf("%s: %d records where the URL says, want 1", raw, n)
	}
}

// TestMigrate: without Migrate, a PostgreSQL table is used as it is (a
// missing one fails the first call) and a missing DynamoDB table fails
// Open; with it, both are created, and a second Migrate is harmless.
func TestMigrate(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		raw := storeURL(t, "postgres")
		_, err := open(t, raw).Get(context.Background(), "k")
		if err == nil || errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Get without Migrate: %v, want an error: the table does not exist", err)
		}
		open(t, raw, storeurl.Migrate())
		complete(t, open(t, raw, storeurl.Migrate()), "k", "v")
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		raw := storeURL(t, "dynamodb")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if s, closeStore, err := storeurl.Open(ctx, raw); err == nil {
			closeStore()
			t.Fatalf("Open(%s) without Migrate = %T, want an error: the table does not exist", raw, s)
		} else if _, ok := errors.AsType[*storeurl.URLError](err); ok {
			t.Fatalf("a missing table: %v, want the server's answer, not a URL error", err)
		}
		complete(t, open(t, raw, storeurl.Migrate()), "k", "v")
		complete(t, open(t, raw), "k2", "v")
	})
	t.Run("cassandra", func(t *testing.T) {
		t.Parallel()
		raw := storeurltest.WithParam(t, storeURL(t, "cassandra"), "table", "migrated")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if s, closeStore, err := storeurl.Open(ctx, raw); err == nil {
			closeStore()
			t.Fatalf("Open(%s) without Migrate = %T, want an error: the table does not exist", raw, s)
		} else if _, ok := errors.AsType[*storeurl.URLError](err); ok || !errors.Is(err, storage.ErrStoreUnavailable) {
			t.Fatalf("a missing table: %v, want the server's answer, not a URL error", err)
		}
		if _, _, err := storeurl.Open(ctx, "cassandra://"+cassandrastoretest.Addr()+"/idemtest_absent_keyspace", storeurl.Migrate()); err == nil ||
			!strings.Contains(err.Error(), "replication") {
			t.Fatalf("Migrate of a keyspace that does not exist, without replication=: %v, want an error asking for it", err)
		}
		complete(t, open(t, raw, storeurl.Migrate()), "k", "v")
		// The keyspace exists: Migrate without replication= makes the table.
		other := strings.Replace(storeurltest.WithParam(t, raw, "table", "migrated_too"), "replication=SimpleStrategy%3A1", "", 1)
		complete(t, open(t, other, storeurl.Migrate()), "k2", "v")
		complete(t, open(t, raw), "k3", "v")
	})
}

// TestBadURLs: a URL that is not one of a linked scheme's, or that its
// store refuses, is a *URLError naming the URL redacted and saying what is
// wrong, and nothing in the error prints a password or secret parameter.
// None needs a server.
func TestBadURLs(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"postgres://app:" + secret + "@127.0.0.1:1/te%zzst", "malformed %-escape"},
		{"postgres://app:S3%cretPw@127.0.0.1:1/test?password=" + secret, "malformed %-escape"},
		{"postgres://app:" + secret + "@127.0.0.1:notaport/test", "invalid port"},
		{"postgres://app:" + secret + "@127.0.0.1:1/test?table=bad%20name", "pgstore: Config.Table"},
		{"postgres://app@127.0.0.1:1/test?password=" + secret + "&table=Orders", "pgstore: Config.Table"},
		{"postgresql://app@127.0.0.1:1/test?sslpassword=" + secret + "&sslmode=bogus", "sslmode"},
		{"rediss://user:" + secret + "@127.0.0.1:1/nope", "invalid database number"},
		{"redis://:" + secret + "@127.0.0.1:1/0?bogus=1", "unexpected option: bogus"},
		{"dynamodb://127.0.0.1:1/t?secret_access_key=" + secret, "unknown parameter"},
		{"dynamodb://u:" + secret + "@127.0.0.1:1/t", "credentials do not go in the URL"},
		{"dynamodb://127.0.0.1:1/t!", "table"},
		{"cassandra://u:" + secret + "@127.0.0.1:1/ks?password=" + secret, "unknown parameter"},
		{"cassandra://127.0.0.1:1/k-s", "keyspace"},
		{"ftp://u:" + secret + "@host/", `unsupported scheme "ftp"`},
		{"mysql://u:" + secret + "@127.0.0.1:3306/db", `unsupported scheme "mysql"`},
		{"mem://u:" + secret + "@host", "mem:// takes no host"},
		{"mem://elsewhere", "mem:// takes no host"},
		{"sqlite://u:" + secret + "@/tmp/x.db", "no user"},
		{"sqlite:///tmp/idem%00.db", "NUL byte"},
		{"127.0.0.1:6379", "not a URL"},
		{"localhost", "no scheme"},
		{"", "no scheme"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			s, closeStore, err := storeurl.Open(context.Background(), tc.raw)
			if err == nil {
				closeStore()
				t.Fatalf("Open(%q) = %T, want a *URLError", tc.raw, s)
			}
			ue, ok := errors.AsType[*storeurl.URLError](err)
			if !ok {
				t.Fatalf("Open(%q): %T %v, want a *URLError", tc.raw, err, err)
			}
			if ue.URL != storeurl.Redact(tc.raw) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "storeurl: ") {
				t.Errorf("Open(%q): %v (URL %q); want it to name the redacted URL and say %q", tc.raw, err, ue.URL, tc.want)
			}
			noSecret(t, tc.raw, err)
		})
	}
}

// TestAmbiguousPasswordRefused: a password with an unescaped "/", "?" or
// "#" is refused before any driver reads it, which would take a piece of
// it for the host or the path and repeat that piece in its errors; no
// piece of it is printed. None needs a server.
func TestAmbiguousPasswordRefused(t *testing.T) {
	for _, raw := range []string{
		"postgres://app:Sup3r/H1dden@127.0.0.1:1/test",
		"postgres://app:5432/H1dden@127.0.0.1:1/test", // parses, with the host app:5432
		"postgres://app:Sup3r?H1dden@127.0.0.1:1/test",
		"redis://:Sup3r#H1dden@127.0.0.1:1/0",
		"redis://:6379#H1dden@127.0.0.1:1/0",
		"rediss://u:Sup3r/H1dden@127.0.0.1:1/0",
		"dynamodb://u:Sup3r/H1dden@127.0.0.1:1/t",
	} {
		t.Run(raw, func(t *testing.T) {
			s, closeStore, err := storeurl.Open(context.Background(), raw)
			if err == nil {
				closeStore()
				t.Fatalf("Open(%q) = %T, want a *URLError", raw, s)
			}
			if _, ok := errors.AsType[*storeurl.URLError](err); !ok || !strings.Contains(err.Error(), "percent-encode") {
				t.Errorf("Open(%q): %v, want a URL error that says to percent-encode", raw, err)
			}
			for _, e := range chain(err) {
				if strings.Contains(e.Error(), "Sup3r") || strings.Contains(e.Error(), "H1dden") {
					t.Errorf("Open(%q): an error of the chain, %T, prints a piece of the password: %v", raw, e, e)
				}
			}
		})
	}
}

// TestUnreachableServer: a server that does not answer is an error
// wrapping storage.ErrStoreUnavailable that names the URL redacted, not a
// URL error, and it comes back in time.
func TestUnreachableServer(t *testing.T) {
	for _, raw := range []string{
		"redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=200ms",
		"rediss://u:" + secret + "@127.0.0.1:1/0?dial_timeout=200ms",
		"postgres://app:" + secret + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=1",
		"postgres://app@127.0.0.1:1/test?sslmode=disable&connect_timeout=1&password=" + secret,
		"dynamodb://127.0.0.1:1/idem_records?region=eu-west-1",
	} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, closeStore, err := storeurl.Open(ctx, raw, storeurl.Migrate())
			if err == nil {
				closeStore()
				t.Fatalf("Open(%s) = %T, want an error", raw, s)
			}
			if _, ok := errors.AsType[*storeurl.URLError](err); ok || !errors.Is(err, storage.ErrStoreUnavailable) ||
				!strings.HasPrefix(err.Error(), "storeurl: "+storeurl.Redact(raw)+": ") {
				t.Errorf("Open(%s): %v; want ErrStoreUnavailable naming the redacted URL, not a URL error", raw, err)
			}
			noSecret(t, raw, err)
		})
	}
}

// TestRedisPrefixRefused: a prefix redisstore refuses is a URL
// error once the server answers, and the prefix parameter is idem's, not
// passed on to go-redis.
func TestRedisPrefixRefused(t *testing.T) {
	redisstoretest.Client(t)
	raw := "redis://:" + secret + "@" + redisstoretest.Addr() + "/0?prefix={x}"
	_, _, err := storeurl.Open(context.Background(), raw)
	if _, ok := errors.AsType[*storeurl.URLError](err); !ok || !strings.Contains(err.Error(), "Config.Prefix") {
		t.Fatalf("Open(%s): %v, want a URL error about Config.Prefix", raw, err)
	}
	noSecret(t, raw, err)
}

// A Redis whose maxmemory-policy may evict records is refused with
// redisstore's *EvictionPolicyError, a state of the server and not a URL
// error; the password that opened it is not printed.
func TestEvictingRedisRefused(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--requirepass", secret, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the private redis-server did not listen within 20s")
		}
	}
	raw := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", secret, port)
	s, closeStore, err := storeurl.Open(context.Background(), raw)
	if err == nil {
		closeStore()
		t.Fatalf("Open of a volatile-lru Redis = %T, want an error", s)
	}
	pe, ok := errors.AsType[*redisstore.EvictionPolicyError](err)
	if _, bad := errors.AsType[*storeurl.URLError](err); !ok || bad || pe.Policy != "volatile-lru" || !strings.Contains(err.Error(), "noeviction") {
		t.Errorf("Open of a volatile-lru Redis: %v; want the *EvictionPolicyError naming the policy and noeviction", err)
	}
	noSecret(t, raw, err)
}

// The forms of a sqlite:// URL: a path relative to the working directory
// (sqlite://idem.db, sqlite://data/idem.db, sqlite:idem.db), an absolute
// one (sqlite:///…), the table and synchronous options; and what is
// refused, as URL errors.
func TestSQLiteURLs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("data", 0o755); err != nil {
		t.Fatal(err)
	}
	for raw, file := range map[string]string{
		"sqlite://idem.db":                         "idem.db",
		"sqlite://data/idem.db?table=records":      "data/idem.db",
		"sqlite:plain.db?synchronous=normal":       "plain.db",
		"sqlite://" + filepath.Join(dir, "abs.db"): "abs.db",
	} {
		complete(t, open(t, raw), "k", "v")
		if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
			t.Errorf("%s: %v, want the file %s", raw, err, file)
		}
	}
	if s := open(t, "sqlite://data/idem.db?table=records").(*sqlitestore.Store); s.Table() != `"records"` && s.Table() != "records" {
		t.Errorf("sqlite://…?table=records opened table %s", s.Table())
	}
	for raw, want := range map[string]string{
		"sqlite://":                     "no file",
		"sqlite://x.db?synchronous=off": "want full or normal",
		"sqlite://x.db?cache=shared":    "unknown options",
		"sqlite://me@x.db":              "no user",
		"sqlite://x.db?table=A-B":       "Config.Table",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if _, ok := errors.AsType[*storeurl.URLError](err); !ok || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s): %v, want a URL error saying %q", raw, err, want)
		}
	}
	// A file that cannot be created is the machine's state, not the URL's.
	_, _, err := storeurl.Open(context.Background(), "sqlite://missing/dir/x.db")
	if _, bad := errors.AsType[*storeurl.URLError](err); err == nil || bad || !strings.Contains(err.Error(), "sqlitestore: Open") {
		t.Errorf("a file in a missing directory: %v; want sqlitestore's error, not a URL error", err)
	}
}
