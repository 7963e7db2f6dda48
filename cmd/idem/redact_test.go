package main

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli/clitest"
)

// TestSecretsNeverPrinted runs the verbs that take a store or broker URL
// with a password in every place a URL can hold one, well-formed or not,
// and servers that refuse or do not answer: no error, log line or usage
// text names the password.
func TestSecretsNeverPrinted(t *testing.T) {
	const secret = "S3cretPw"
	urls := []string{
		"postgres://app:" + secret + "@127.0.0.1:1/test",
		"postgres://app@127.0.0.1:1/test?password=" + secret,
		"postgres://app:" + secret + "@127.0.0.1:1/te%zzst",
		"postgres://app:" + secret + "@127.0.0.1:1/test?table=bad%20name",
		"redis://:" + secret + "@127.0.0.1:1/0",
		"redis://:" + secret + "@127.0.0.1:1/0?prefix=%zz",
		"rediss://user:" + secret + "@127.0.0.1:1/nope",
		"dynamodb://127.0.0.1:1/t?secret_access_key=" + secret,
		"ftp://u:" + secret + "@host/",
		"mem://u:" + secret + "@host",
		"sqlite://u:" + secret + "@/tmp/x.db",
		// A password with an unescaped "/", "?" or "#": the secret here
		// is its last piece, which a URL parser reads as a path or a
		// fragment.
		"postgres://app:Sup3r/" + secret + "@127.0.0.1:1/test",
		"postgres://app:5432/" + secret + "@127.0.0.1:1/test",
		"redis://:Sup3r#" + secret + "@127.0.0.1:1/0",
		"postgres://app:Sup3r?" + secret + "@127.0.0.1:1/test",
		"nats://" + secret + "@127.0.0.1:1",
		"host=127.0.0.1 port=1 user=app password=" + secret + " dbname=test",
	}
	for _, u := range urls {
		for _, args := range [][]string{
			{"migrate", "--store", u},
			{"reap", "--store", u},
			{"inspect", "--store", u, "k"},
			{"purge", "--store", u, "--status", "failed", "--yes"},
			{"stats", "--store", u},
			{"demo", "--store", u, "--messages", "1"},
			{"demo", "--broker", strings.Replace(u, "postgres", "amqp", 1), "--messages", "1"},
			{"demo", "--broker", strings.Replace(u, "postgres", "nats", 1), "--messages", "1"},
		} {
			_, stdout, stderr := clitest.Args(t, run, args...)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("idem %s: the password is printed:\n%s%s", strings.Join(args, " "), stdout, stderr)
			}
		}
	}
}
