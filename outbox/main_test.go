package outbox_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// relayConfig is a RelayConfig for tests over table: short intervals, so
// that what the tests wait for happens within milliseconds.
func relayConfig(table string) outbox.RelayConfig {
	return outbox.RelayConfig{
		Table:             table,
		RebalanceInterval: 20 * time.Millisecond,
		MinBackoff:        5 * time.Millisecond,
		MaxBackoff:        50 * time.Millisecond,
	}
}

// events collects a relay's events, for the tests to wait on.
type events struct {
	ch chan outbox.Event
}

func newEvents() *events { return &events{ch: make(chan outbox.Event, 10000)} }

func (e *events) observe(_ context.Context, ev outbox.Event) {
	select {
	case e.ch <- ev:
	default: // a test that does not read them must not block the relay
	}
}

// await returns the first event for which match holds, or fails t.
func (e *events) await(t *testing.T, what string, match func(outbox.Event) bool) outbox.Event {
	t.Helper()
	deadline := time.After(outboxtest.Timeout)
	for {
		select {
		case ev := <-e.ch:
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event within %v", what, outboxtest.Timeout)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	t.Cleanup(cancel)
	return ctx
}
