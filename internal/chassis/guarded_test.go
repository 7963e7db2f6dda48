package chassis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/internal/chassis"
)

// RunGuarded: a key held by the claim runs on it and leaves its value
// pending for the writer; a claim that answered (a replay) decides at
// once without running; a message not claimed runs through DoScoped.
func TestRunGuarded(t *testing.T) {
	o, err := build(t, shared, discard)
	if err != nil {
		t.Fatal(err)
	}
	g := o.Guard()
	claimer := ahead.For(g)
	ops := []ahead.Op{{Key: "held", Payload: []byte("p")}}
	claims := make([]ahead.Claim, 1)
	claimer.Claim(context.Background(), ops, claims)
	runs := 0
	run := func(context.Context) error { runs++; return nil }
	never := func(time.Duration) bool { return false }
	failures := func() int { return 0 }

	_, _, pending := o.RunGuarded(context.Background(), chassis.Claimed{Op: ops[0], OK: true, Claim: claims[0]}, failures, run, never)
	if pending == nil || runs != 1 {
		t.Fatalf("a held key: pending %v, runs %d; want its Held pending after one run", pending, runs)
	}
	errs := make([]error, 1)
	claimer.Complete([]ahead.Held{pending}, errs)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}

	claimer.Claim(context.Background(), ops, claims)
	v, replayed, pending := o.RunGuarded(context.Background(), chassis.Claimed{Op: ops[0], OK: true, Claim: claims[0]}, failures, run, never)
	if v.Settle != chassis.Ack || !replayed || pending != nil || runs != 1 {
		t.Fatalf("a replayed claim: %+v, replayed %v, pending %v, runs %d; want Ack, replayed, no run", v, replayed, pending, runs)
	}

	fail := func(context.Context) error { runs++; return errors.New("downstream timeout") }
	v, _, pending = o.RunGuarded(context.Background(), chassis.Claimed{Op: ahead.Op{Key: "unclaimed"}}, failures, fail, never)
	if v.Settle != chassis.Retry || !v.Failed || pending != nil || runs != 2 {
		t.Fatalf("an unclaimed message whose handler fails: %+v, runs %d; want a counted retry after one run", v, runs)
	}
	if _, _, _ = o.RunGuarded(context.Background(), chassis.Claimed{Op: ahead.Op{Key: "unclaimed"}}, failures, run, never); runs != 3 {
		t.Fatalf("the failed handler's key was not released: the next delivery ran %d handlers in all, want 3", runs)
	}
}

func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		scope, key, id string
		body           string
		want           string
	}{
		{"a", "k", "m1", "b", "key\x00a\x00k"},
		{"", "", "m1", "b", "message-id\x00m1"},
		{"", "", "", "b", "body\x003e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"},
	} {
		if got := chassis.Identity(tc.scope, tc.key, tc.id, []byte(tc.body)); got != tc.want {
			t.Errorf("Identity(%q, %q, %q, %q) = %q, want %q", tc.scope, tc.key, tc.id, tc.body, got, tc.want)
		}
	}
}

// Drain waits for every slot, and cancels once the timeout passed.
func TestDrain(t *testing.T) {
	slots := make(chan struct{}, 2)
	slots <- struct{}{} // a handler runs
	cancelled := make(chan struct{})
	go func() {
		<-cancelled
		<-slots // the handler returns once cancelled
	}()
	done := make(chan struct{})
	go func() {
		chassis.Drain(slots, 20*time.Millisecond, func() { close(cancelled) })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return once the cancelled handler returned")
	}
	if len(slots) != 2 {
		t.Fatalf("Drain returned holding %d of 2 slots", len(slots))
	}
}
