package servers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/integration/internal/servers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func claim(t *testing.T, s idem.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Claim(ctx, idem.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Claim(%q) = %v, %v; want Acquired", key, c.Outcome, err)
	}
}

func wantAbsent(t *testing.T, s idem.Store, key, why string) {
	t.Helper()
	if _, err := s.Get(context.Background(), key); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("%s: Get(%q) = %v, want ErrNotFound", why, key, err)
	}
}

func TestRedisStoresAreIsolatedAndCleanedUp(t *testing.T) {
	var prefix string
	t.Run("use", func(t *testing.T) {
		a, b := servers.Redis(t), servers.Redis(t)
		prefix = a.Config().Prefix
		if !strings.HasPrefix(prefix, "idemtest:") || prefix == b.Config().Prefix {
			t.Errorf("prefixes %q and %q, want two different ones under idemtest:", prefix, b.Config().Prefix)
		}
		claim(t, a, "k")
		wantAbsent(t, b, "k", "a key claimed in another test's store")
	})
	if prefix == "" {
		t.Skip("no Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: servers.RedisAddr()})
	defer c.Close()
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("keys %q are left after the test ended", keys)
	}
}

func TestPostgresStoresAreIsolatedAndCleanedUp(t *testing.T) {
	var table string
	t.Run("use", func(t *testing.T) {
		a, b := servers.Postgres(t), servers.Postgres(t)
		table = a.Table()
		if !strings.HasPrefix(table, `"`+servers.SchemaPrefix) || !strings.HasSuffix(table, `."idem_records"`) || table == b.Table() {
			t.Errorf("tables %s and %s, want two different <schema>.idem_records in idemtest_ schemas", table, b.Table())
		}
		claim(t, a, "k")
		wantAbsent(t, b, "k", "a key claimed in another test's store")
	})
	if table == "" {
		t.Skip("no PostgreSQL")
	}
	conn, err := pgx.Connect(context.Background(), servers.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	schema := strings.Trim(strings.Split(table, ".")[0], `"`)
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("schema %s is left after the test ended", schema)
	}
}

func TestDynamoDBStoresAreIsolatedAndCleanedUp(t *testing.T) {
	var table string
	t.Run("use", func(t *testing.T) {
		a, b := servers.DynamoDB(t), servers.DynamoDB(t)
		table = a.Config().Table
		if !strings.HasPrefix(table, servers.TablePrefix) || table == b.Config().Table {
			t.Errorf("tables %s and %s, want two different ones named %s…", table, b.Config().Table, servers.TablePrefix)
		}
		claim(t, a, "k")
		wantAbsent(t, b, "k", "a key claimed in another test's store")
	})
	if table == "" {
		t.Skip("no DynamoDB-compatible server")
	}
	c := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(servers.DynamoDBURL()),
		Credentials: credentials.NewStaticCredentialsProvider("idemtest", "idemtest", ""), HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	w := dynamodb.NewTableNotExistsWaiter(c, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, time.Second
	})
	if err := w.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: &table}, 10*time.Second); err != nil {
		t.Errorf("table %s is left after the test ended: %v", table, err)
	}
}

// fakeT records how a helper ended the test instead of ending the real one.
type fakeT struct {
	testing.TB
	fatal, skip string
	cleanups    []func()
}

func (f *fakeT) Helper()             {}
func (f *fakeT) Cleanup(fn func())   { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Logf(string, ...any) {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Skipf(format string, args ...any) {
	f.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls helper with a fakeT on a goroutine of its own, as the testing
// package runs a test, and runs the cleanups it registered.
func run(t *testing.T, helper func(testing.TB)) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f
}

func TestUnreachableServerSkipsOrFails(t *testing.T) {
	t.Setenv(servers.RedisEnv, "127.0.0.1:1")
	t.Setenv(servers.PostgresEnv, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	t.Setenv(servers.DynamoDBEnv, "http://127.0.0.1:1")
	for _, h := range []struct {
		env    string
		helper func(testing.TB)
	}{
		{servers.RedisEnv, func(t testing.TB) { servers.Redis(t) }},
		{servers.PostgresEnv, func(t testing.TB) { servers.Postgres(t) }},
		{servers.DynamoDBEnv, func(t testing.TB) { servers.DynamoDB(t) }},
	} {
		t.Setenv(servers.RequireEnv, "")
		f := run(t, h.helper)
		if f.skip == "" || f.fatal != "" || !strings.Contains(f.skip, h.env) || !strings.Contains(f.skip, servers.RequireEnv) {
			t.Errorf("unreachable, not required: skip %q, fatal %q; want a skip naming %s and %s", f.skip, f.fatal, h.env, servers.RequireEnv)
		}
		t.Setenv(servers.RequireEnv, "1")
		f = run(t, h.helper)
		if f.fatal == "" || f.skip != "" || !strings.Contains(f.fatal, h.env) {
			t.Errorf("unreachable, %s=1: skip %q, fatal %q; want a failure naming %s", servers.RequireEnv, f.skip, f.fatal, h.env)
		}
	}
}
