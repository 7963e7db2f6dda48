package main

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/cli/clitest"
)

// TestMain fails the run if a goroutine of idem outlives the tests: the
// Guards' heartbeats, memstore's sweeper.
func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

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
			_, stdout, stderr := clitest.Args(t, run, args...)
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("idem-bench %s: the password is printed:\n%s%s", strings.Join(args, " "), stdout, stderr)
			}
		}
	}
}
