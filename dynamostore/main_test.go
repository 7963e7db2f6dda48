package dynamostore_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/dynamostore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// endpoint is the DynamoDB-compatible server the tests use (dynalite,
// started by scripts/services.sh); each test works in a table of its own.
func endpoint() string { return cmp.Or(os.Getenv("IDEM_DYNAMODB_URL"), "http://127.0.0.1:8000") }

// unavailableService skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1 (make test).
func unavailableService(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg + " (set IDEM_REQUIRE_SERVICES=1 to fail instead)")
}

// newClient returns a client of the test server with static dummy
// credentials and its own HTTP transport, whose idle connections are
// closed when t ends (so no goroutine outlives the test binary). With no
// server it skips or fails t.
func newClient(t testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	if err := reachable(); err != nil {
		unavailableService(t, "dynamostore: no DynamoDB-compatible server at %s (IDEM_DYNAMODB_URL): %v", endpoint(), err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	return rawClient(&http.Client{Transport: tr}, opts...)
}

func rawClient(hc *http.Client, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider("idemtest", "idemtest", ""),
		HTTPClient:   hc,
	}, opts...)
}

// reachable lists the server's tables once per test binary, and deletes
// the test tables that runs which died left behind.
var reachable = sync.OnceValue(func() error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := rawClient(&http.Client{Transport: tr}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		return err
	}
	for _, name := range out.TableNames {
		if stale(name) {
			c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		}
	}
	return nil
})

// tablePrefix starts every test table's name: idemtest_<unix seconds>_<random>.
const tablePrefix = "idemtest_"

func stale(name string) bool {
	stamp, _, ok := strings.Cut(strings.TrimPrefix(name, tablePrefix), "_")
	sec, err := strconv.ParseInt(stamp, 10, 64)
	return ok && strings.HasPrefix(name, tablePrefix) && err == nil && time.Since(time.Unix(sec, 0)) > time.Hour
}

// newTable creates a records table of t's own with CreateTable and deletes
// it when t ends.
func newTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := fmt.Sprintf("%s%d_%s", tablePrefix, time.Now().Unix(), hex.EncodeToString(b[:]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamostore.CreateTable(ctx, c, name); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			t.Errorf("deleting the test's table %s: %v", name, err)
		}
	})
	return name
}

// newStore returns a Store over a new table of t's own (cfg.Table unset)
// or cfg.Table.
func newStore(t testing.TB, c *dynamodb.Client, cfg dynamostore.Config) *dynamostore.Store {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = newTable(t, c)
	}
	s, err := dynamostore.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
