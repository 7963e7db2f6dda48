// Package dynamostoretest gives tests a [dynamostore.Store] on the
// DynamoDB-compatible server of the test machine (dynalite, started by
// scripts/services.sh), each in a table of its own that is deleted when the
// test ends, so parallel tests and concurrent runs never see one another's
// records.
//
// The server's endpoint comes from IDEM_DYNAMODB_URL (default
// http://127.0.0.1:8000). A server that cannot be reached skips the test, or
// fails it under IDEM_REQUIRE_SERVICES=1 (as make test sets it).
package dynamostoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/internal/testenv"
)

var server = testenv.Server{Name: "A DynamoDB-compatible server", Env: "IDEM_DYNAMODB_URL", Default: "http://127.0.0.1:8000"}

// TablePrefix starts the name of every table [Table] creates:
// idemtest_<unix seconds>_<random>. Test tables older than an hour, left
// by runs that died, are deleted by the first [Client] of a test binary.
const TablePrefix = "idemtest_"

const (
	connectTimeout = 30 * time.Second
	cleanupTimeout = 30 * time.Second
)

// Endpoint returns the server's endpoint: IDEM_DYNAMODB_URL, or
// http://127.0.0.1:8000.
func Endpoint() string { return server.Addr() }

// NewClient returns a client of [Endpoint] with static dummy credentials
// over hc, with opts applied. It does not check the server; [Client] does.
func NewClient(hc *http.Client, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(Endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider("idemtest", "idemtest", ""),
		HTTPClient:   hc,
	}, opts...)
}

// Client returns a client of [Endpoint] over an HTTP transport of its own,
// whose idle connections are closed when tb ends (so no goroutine outlives
// the test binary). When the server cannot be reached it skips tb, or fails
// it under IDEM_REQUIRE_SERVICES=1.
func Client(tb testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	tb.Helper()
	if err := reachable(); err != nil {
		server.Unreachable(tb, Endpoint(), err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tb.Cleanup(tr.CloseIdleConnections)
	return NewClient(&http.Client{Transport: tr}, opts...)
}

// reachable lists the server's tables once per test binary, and deletes
// the stale test tables.
var reachable = sync.OnceValue(func() error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := NewClient(&http.Client{Transport: tr}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
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

func stale(name string) bool {
	stamp, _, ok := strings.Cut(strings.TrimPrefix(name, TablePrefix), "_")
	sec, err := strconv.ParseInt(stamp, 10, 64)
	return ok && strings.HasPrefix(name, TablePrefix) && err == nil && time.Since(time.Unix(sec, 0)) > time.Hour
}

// Table creates a records table of tb's own with [dynamostore.CreateTable]
// through c and deletes it when tb ends. c must stay usable until then.
func Table(tb testing.TB, c *dynamodb.Client) string {
	tb.Helper()
	name := fmt.Sprintf("%s%d_%s", TablePrefix, time.Now().Unix(), strings.ToLower(rand.Text()[:12]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamostore.CreateTable(ctx, c, name); err != nil {
		tb.Fatalf("dynamostore.CreateTable(%s): %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			tb.Errorf("deleting the test's table %s: %v", name, err)
		}
	})
	return name
}

// Store returns a Store through c over cfg.Table, or, when that is empty, a
// new table of tb's own ([Table]).
func Store(tb testing.TB, c *dynamodb.Client, cfg dynamostore.Config) *dynamostore.Store {
	tb.Helper()
	if cfg.Table == "" {
		cfg.Table = Table(tb, c)
	}
	s, err := dynamostore.New(c, cfg)
	if err != nil {
		tb.Fatalf("dynamostore.New: %v", err)
	}
	return s
}

// URL returns a dynamodb:// URL (see [dynamostore.ParseURL]) of the server
// at [Endpoint] naming a table of tb's own that does not exist yet, for
// code that creates its table from a URL; the table is deleted when tb
// ends, if it was created. It skips or fails tb as [Client] does.
func URL(tb testing.TB) string {
	tb.Helper()
	c := Client(tb)
	table := fmt.Sprintf("%s%d_%s", TablePrefix, time.Now().Unix(), strings.ToLower(rand.Text()[:12]))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table})
	})
	host := strings.TrimPrefix(strings.TrimPrefix(Endpoint(), "http://"), "https://")
	return "dynamodb://" + strings.TrimSuffix(host, "/") + "/" + table
}
