package idemamqptest_test

import (
	"net"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/internal/testenv"
)

// A broker that cannot be reached skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1, naming IDEM_AMQP_URL.
func TestConnectUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	t.Setenv("IDEM_AMQP_URL", "amqp://guest:secret@"+addr+"/")
	skip, fatal := testenv.CheckUnreachable(t, "IDEM_AMQP_URL", func(tb testing.TB) { idemamqptest.Connect(tb) })
	for _, msg := range []string{skip, fatal} {
		if strings.Contains(msg, "secret") {
			t.Errorf("the message shows the password: %q", msg)
		}
	}
}
