package idemamqp_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
)

// A queue that is not declared fails the subscription after the
// connection is up: Run closes that connection, keeps trying, and stops
// when told (it used to close a session it had already forgotten, and
// panic).
func TestMissingQueueRetriesUntilStopped(t *testing.T) {
	t.Parallel()
	idemamqptest.Connect(t) // skips, or fails, when the broker is unreachable
	g := newMemGuard(t, idem.Config{})
	c, err := idemamqp.New(g, idemamqptest.URL(), "idemtest.no-such-queue."+rand.Text(), nop, idemamqp.WithSharedScope(),
		idemamqp.WithDiscardPoison(), idemamqp.WithDelayQueue(""), idemamqp.WithReconnectBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil once stopped", err)
	}
}
