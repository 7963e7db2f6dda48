// Package storeurltest gives the tests of code that opens stores from
// URLs (storeurl, and the commands built on it) the URLs of the shared
// servers, and URLs whose records are the test's own.
//
// The servers are those of [pgstoretest] and [redisstoretest], read from
// the same environment: one that cannot be reached skips the test, or
// fails it under IDEM_REQUIRE_SERVICES=1 (make test).
package storeurltest

import (
	"net/url"
	"path/filepath"
	"testing"

	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore/redisstoretest"
)

// Server returns the URL of the shared Redis ("redis") or PostgreSQL
// ("postgres") after checking the server answers.
func Server(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "redis":
		redisstoretest.Client(t)
		return "redis://" + redisstoretest.Addr() + "/0"
	case "postgres":
		pgstoretest.Pool(t, 1)
		return pgstoretest.URL()
	}
	t.Fatalf("storeurltest.Server: unknown kind %q", kind)
	return ""
}

// URL returns a URL of kind whose records are the test's own, deleted
// when it ends: "mem", "redis" under a key prefix of its own, "postgres"
// in a table of a schema of its own (not yet migrated), "sqlite" in a file
// of its own.
func URL(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "mem":
		return "mem://"
	case "sqlite":
		return "sqlite://" + filepath.Join(t.TempDir(), "idem.db") // sqlite:///tmp/…: an absolute path
	case "redis":
		return WithParam(t, Server(t, kind), "prefix", redisstoretest.Prefix(t, redisstoretest.Client(t)))
	case "postgres":
		return WithParam(t, Server(t, kind), "table", pgstoretest.Schema(t, pgstoretest.Pool(t, 1))+".records")
	}
	t.Fatalf("storeurltest.URL: unknown kind %q", kind)
	return ""
}

// WithParam returns raw with the query parameter name=value added.
func WithParam(t *testing.T, raw, name, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}
