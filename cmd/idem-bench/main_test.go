package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore/redisstoretest"
)

// TestMain fails the run if a goroutine of idem outlives the tests: the
// Guards' heartbeats, memstore's sweeper.
func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// usageCase is a command line and what it must answer.
type usageCase struct {
	args   []string
	code   int
	stdout string // a part of it, or "" for nothing at all
	stderr string // a part of it, or "" for nothing at all
}

// checkUsage runs each case as a subtest.
func checkUsage(t *testing.T, tests []usageCase) {
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{"idem-bench"}, tt.args...), " "), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, c := range []struct{ name, got, want string }{{"stdout", stdout, tt.stdout}, {"stderr", stderr, tt.stderr}} {
				if (c.want == "" && c.got != "") || !strings.Contains(c.got, c.want) {
					t.Errorf("%s = %q, want %q in it (or nothing when that is empty)", c.name, c.got, c.want)
				}
			}
		})
	}
}

// serverURL returns the --store URL of the shared Redis ("redis") or
// PostgreSQL ("postgres"), from the environment as pgstoretest and
// redisstoretest read it, after checking the server answers. An
// unreachable server skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1 (make test).
func serverURL(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "redis":
		redisstoretest.Client(t)
		return "redis://" + redisstoretest.Addr() + "/0"
	case "postgres":
		pgstoretest.Pool(t, 1)
		return pgstoretest.URL()
	}
	t.Fatalf("serverURL: unknown kind %q", kind)
	return ""
}

// withParam returns raw with the query parameter name=value added.
func withParam(t *testing.T, raw, name, value string) string {
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

// TestSecretsNeverPrinted runs both benchmarks with a password in every
// place a URL can hold one, well-formed or not, and servers that do not
// answer: no error or usage text names it.
func TestSecretsNeverPrinted(t *testing.T) {
	const secret = "S3cretPw"
	for _, u := range []string{
		"postgres://app:" + secret + "@127.0.0.1:1/test",
		"postgres://app@127.0.0.1:1/test?password=" + secret,
		"postgres://app:" + secret + "@127.0.0.1:1/te%zzst",
		"postgres://app:" + secret + "@127.0.0.1:1/test?sslmode=bogus",
		"redis://:" + secret + "@127.0.0.1:1/0",
		"redis://:" + secret + "@127.0.0.1:1/0?prefix=%zz",
		"rediss://user:" + secret + "@127.0.0.1:1/nope",
		"dynamodb://127.0.0.1:1/t?secret_access_key=" + secret,
		"ftp://u:" + secret + "@host/",
		"mem://u:" + secret + "@host",
	} {
		for _, args := range [][]string{
			{"store", "--store", u, "--ops", "1"},
			{"http", "--stores", u, "--duration", "1ms"},
		} {
			_, stdout, stderr := runArgs(t, args...)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("idem-bench %s: the password is printed:\n%s%s", strings.Join(args, " "), stdout, stderr)
			}
		}
	}
}
