package testenv

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RequireServicesEnv is the environment variable that, set to 1, turns a
// missing server or program from a skip into a failure.
const RequireServicesEnv = "IDEM_REQUIRE_SERVICES"

// ServicesRequired reports whether IDEM_REQUIRE_SERVICES is 1.
func ServicesRequired() bool { return os.Getenv(RequireServicesEnv) == "1" }

// Server is a server the tests use, found through an environment variable.
type Server struct {
	Name    string // for messages: "PostgreSQL"
	Env     string // the variable that holds its address: "IDEM_POSTGRES_URL"
	Default string // the address when Env is unset or empty
}

// Addr returns the server's address: the value of s.Env, or s.Default.
func (s Server) Addr() string { return cmp.Or(os.Getenv(s.Env), s.Default) }

// Unreachable ends tb because the server could not be reached at addr: a
// skip, or a failure under IDEM_REQUIRE_SERVICES=1. addr is the address as
// the message shows it, so pass it without a password. The message names
// the server, addr, s.Env and err.
func (s Server) Unreachable(tb testing.TB, addr string, err error) {
	tb.Helper()
	Unavailable(tb, "%s at %s (%s) is unreachable: %v", s.Name, addr, s.Env, err)
}

// Unavailable ends tb for want of something it needs, described by format
// and args: with tb.Fatal under IDEM_REQUIRE_SERVICES=1, with tb.Skip
// otherwise. Use it for a program that is not installed (redis-server,
// initdb); for a server, [Server.Unreachable] words the message.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if ServicesRequired() {
		tb.Fatalf("%s; %s=1 requires it", msg, RequireServicesEnv)
	}
	tb.Skipf("%s; skipping (%s=1 fails instead)", msg, RequireServicesEnv)
}

// Ending is how a function given to [Record] ended the test it was given.
type Ending struct {
	Skip   string   // the message of its Skip, Skipf or SkipNow ("" if none)
	Fatal  string   // the message of its Fatal, Fatalf or FailNow ("" if none)
	Errors []string // the messages of its Error and Errorf calls
}

// Record calls f with a testing.TB that records how f ends the test instead
// of ending t, and returns the record: Skip and Fatal stop f as they stop a
// test (runtime.Goexit, on a goroutine of its own), and the cleanups f
// registered run before Record returns. Logs go to t. It is for testing
// test helpers: that a helper skips or fails, and with what message.
func Record(t testing.TB, f func(testing.TB)) Ending {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.end
}

// recorder is the testing.TB of Record. The embedded TB answers what it
// does not override (Name, TempDir, Context, …).
type recorder struct {
	testing.TB
	mu       sync.Mutex
	end      Ending
	cleanups []func()
}

func (r *recorder) Helper() {}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end.Errors = append(r.end.Errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.stop(&r.end.Fatal, fmt.Sprintf(format, args...))
}
func (r *recorder) FailNow() { r.Fatalf("FailNow") }

func (r *recorder) Skip(args ...any) { r.Skipf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) {
	r.stop(&r.end.Skip, fmt.Sprintf(format, args...))
}

// stop records msg in *field and ends the calling goroutine, the way
// Fatal and Skip end a test.
func (r *recorder) stop(field *string, msg string) {
	r.mu.Lock()
	*field = msg
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) SkipNow() { r.Skipf("SkipNow") }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end.Fatal != "" || len(r.end.Errors) > 0
}

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end.Skip != ""
}

// CheckUnreachable checks that helper applies the rule to a server it
// cannot reach: the caller has pointed the variable env at an address where
// nothing listens. Run by [Record] without IDEM_REQUIRE_SERVICES, helper must
// skip; with IDEM_REQUIRE_SERVICES=1, fail; each time with a message that
// names env. Departures are reported on t; the two messages are returned
// for further checks. It sets IDEM_REQUIRE_SERVICES with t.Setenv, so t
// must not be parallel.
func CheckUnreachable(t testing.TB, env string, helper func(testing.TB)) (skip, fatal string) {
	t.Helper()
	t.Setenv(RequireServicesEnv, "")
	end := Record(t, helper)
	if end.Fatal != "" || !strings.Contains(end.Skip, env) {
		t.Errorf("unreachable, not required: skip %q, failure %q; want a skip naming %s", end.Skip, end.Fatal, env)
	}
	skip = end.Skip
	t.Setenv(RequireServicesEnv, "1")
	end = Record(t, helper)
	if end.Skip != "" || !strings.Contains(end.Fatal, env) {
		t.Errorf("unreachable, required: skip %q, failure %q; want a failure naming %s", end.Skip, end.Fatal, env)
	}
	return skip, end.Fatal
}
