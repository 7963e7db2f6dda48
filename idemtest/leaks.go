package idemtest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests of m and then fails the test binary if a goroutine
// running code of package prefix (such as "github.com/idemgo/idem") is
// still alive: whatever starts a goroutine must stop it by its Close. Call
// it from TestMain:
//
//	func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }
func Main(m *testing.M, prefix string) {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(prefix, 2*time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "idemtest: goroutines leaked after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked waits up to grace for the goroutines running code of package
// prefix to end, and returns the stacks of those still alive ("" if none).
// The calling goroutine is not counted.
func Leaked(prefix string, grace time.Duration) string {
	deadline := time.Now().Add(grace)
	for {
		var leaked []string
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n")[1:] { // [0] is this goroutine
			if strings.Contains(g, prefix) && !strings.Contains(g, "testing.(*M)") && !strings.Contains(g, "idemtest.Leaked") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
