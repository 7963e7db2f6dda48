package demo

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestNewStream(t *testing.T) {
	const orders = 1000
	msgs := NewStream(7, orders, 0.3)
	seen := make([]bool, orders)
	dups := 0
	for i, m := range msgs {
		if m.Duplicate {
			dups++
			if !seen[m.Order] {
				t.Fatalf("message %d: duplicate of order %d before its original", i, m.Order)
			}
			continue
		}
		if seen[m.Order] || (m.Order > 0 && !seen[m.Order-1]) {
			t.Fatalf("message %d: original of order %d out of order", i, m.Order)
		}
		seen[m.Order] = true
	}
	if len(msgs) != orders+dups || dups < 240 || dups > 360 {
		t.Errorf("%d messages with %d duplicates for %d orders at rate 0.3", len(msgs), dups, orders)
	}
	if !reflect.DeepEqual(msgs, NewStream(7, orders, 0.3)) {
		t.Error("seed 7 gave two different streams")
	}
	if reflect.DeepEqual(msgs, NewStream(8, orders, 0.3)) {
		t.Error("seeds 7 and 8 gave the same stream")
	}
	if got := len(NewStream(7, orders, 0)); got != orders {
		t.Errorf("rate 0: %d messages, want %d", got, orders)
	}
}

func testStream(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Order: i, Key: string(rune('a' + i))}
	}
	return msgs
}

func mustReceive(t *testing.T, b *broker) *delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := b.receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return d
}

func wantDrained(t *testing.T, b *broker) {
	t.Helper()
	if d, err := b.receive(context.Background()); !errors.Is(err, errDrained) {
		t.Fatalf("receive after every ack: %+v, %v; want errDrained", d, err)
	}
}

func TestBrokerDeliversInOrderUntilAcked(t *testing.T) {
	b := newBroker(testStream(3), time.Hour)
	for i := range 3 {
		d := mustReceive(t, b)
		if d.id != i || d.attempt != 1 {
			t.Fatalf("delivery %d: message %d attempt %d", i, d.id, d.attempt)
		}
		if !d.ack() {
			t.Fatalf("ack of message %d refused", i)
		}
		if d.ack() || d.nack(0) {
			t.Fatalf("message %d settled twice", i)
		}
	}
	wantDrained(t, b)
	if st := b.stats(3); st.Deliveries != 3 || st.Timeouts != 0 {
		t.Errorf("stats %+v, want 3 deliveries and no timeout", st)
	}
}

func TestBrokerRedeliversNackedAfterDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	b := newBroker(testStream(1), time.Hour)
	d1 := mustReceive(t, b)
	nacked := time.Now()
	if !d1.nack(delay) {
		t.Fatal("nack refused")
	}
	d2 := mustReceive(t, b)
	if waited := time.Since(nacked); waited < delay {
		t.Errorf("redelivered %v after the nack, before its %v delay", waited, delay)
	}
	if d2.id != 0 || d2.attempt != 2 {
		t.Errorf("redelivery: message %d attempt %d, want 0 and 2", d2.id, d2.attempt)
	}
	if d1.ack() {
		t.Error("the nacked delivery could still ack")
	}
	if !d2.ack() {
		t.Error("the redelivery could not ack")
	}
	wantDrained(t, b)
}

func TestBrokerRedeliversUnackedAfterVisibilityTimeout(t *testing.T) {
	const visibility = 30 * time.Millisecond
	b := newBroker(testStream(1), visibility)
	d1 := mustReceive(t, b) // its consumer "crashes": no ack, no nack
	got := time.Now()
	d2 := mustReceive(t, b)
	if waited := time.Since(got); waited < visibility {
		t.Errorf("redelivered %v after the delivery, before the %v visibility timeout", waited, visibility)
	}
	if d2.attempt != 2 {
		t.Errorf("redelivery attempt %d, want 2", d2.attempt)
	}
	if d1.ack() || d1.nack(0) {
		t.Error("the timed-out delivery could still settle its message")
	}
	if !d2.ack() {
		t.Error("the redelivery could not ack")
	}
	wantDrained(t, b)
	if st := b.stats(1); st.Deliveries != 2 || st.Timeouts != 1 || st.Unacked[0] {
		t.Errorf("stats %+v, want 2 deliveries, 1 timeout, nothing unacked", st)
	}
}

func TestBrokerWakesWaitersWhenDrained(t *testing.T) {
	b := newBroker(testStream(1), time.Hour)
	d := mustReceive(t, b)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := b.receive(context.Background())
			errs <- err
		}()
	}
	d.ack()
	for range 3 {
		if err := <-errs; !errors.Is(err, errDrained) {
			t.Errorf("waiting receive: %v, want errDrained", err)
		}
	}
}

func TestBrokerReceiveStopsWithContext(t *testing.T) {
	b := newBroker(testStream(1), time.Hour)
	mustReceive(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("receive with the only message in flight: %v, want the context's error", err)
	}
	if st := b.stats(1); !st.Unacked[0] {
		t.Error("the message in flight counts as acked")
	}
}
