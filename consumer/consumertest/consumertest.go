// Package consumertest is the behaviour suite of idem's message consumers,
// as idemtest is the conformance suite of its stores: one table of cases
// that every consumer (idemkafka, idemnats, idemamqp) passes against its
// real broker, each case failing on a consumer broken for it.
//
// A consumer's test gives [Run] a [Broker]: a harness that builds the
// consumer from a [Config] and publishes to it. The cases:
//
//   - Duplicates: a key published three times runs its handler once.
//   - Retry: a handler that fails twice and then succeeds has its message
//     redelivered until it does, and runs no more.
//   - PoisonDeadLettered: a permanent failure is dead-lettered with its
//     reason, cause, key and body, and the messages after it are handled.
//   - PanicBoundedByDefault: a handler that always panics runs
//     consumer.DefaultMaxAttempts times, with no option set, and its message
//     ends in the dead letter (too-many-attempts); the rest go on.
//   - MaxAttempts: the same with WithMaxAttempts.
//   - MissingKey, EmptyKey, HugeKey (600 KiB, or the largest header the
//     broker takes), NULKey: missing-key and invalid-key dead letters that
//     fit the broker; a key with a NUL byte is a key like any other.
//   - UnkeyedUnguarded: without a key, the handler runs.
//   - BodyAtLimit: a message of the broker's largest size, dead-lettered,
//     arrives without its body, with the body's size and SHA-256.
//   - DeadLetterRefused: a dead-letter destination that refuses every
//     letter makes the consumer give up on the message after MaxAttempts,
//     not stop: the messages after it are handled, and the poison is
//     settled (where the harness is a [Settler]).
//   - DiscardPoison: with WithDiscardPoison, poison is dropped and the rest
//     go on.
//   - BusyKey: a message whose key another holder has comes back after the
//     busy delay, and is acknowledged as a duplicate once the holder
//     stored its outcome, without running.
//   - CutConnection: every connection to the broker cut mid-stream; every
//     message is handled exactly once.
//   - ShutdownDrains: a graceful stop lets the handler in flight finish and
//     store its outcome; a consumer started after it does not run it again.
//   - TraceContext: the handler's context carries the message's W3C trace
//     headers (consumer.TraceFrom).
//   - DecisionsRequired: New refuses a consumer without a scope decision,
//     or without a poison decision.
//   - Scopes: the same key in two scopes runs twice.
//   - UserFuncPanics: a scope, key or fingerprint function that panics on
//     a message makes it poison (reason panicked, the function named in
//     the cause) without running its handler, and an observer that panics
//     at every event stops nothing: the messages after are handled.
package consumertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// Broker is a consumer under test with its broker.
type Broker interface {
	// Start builds a consumer from cfg over a destination of its own
	// (a topic of one partition, a stream, a queue), runs it, and returns
	// it; it fails t when New fails. The consumer handles its messages one
	// at a time, in the order they were published (one partition, a
	// concurrency of one), and is stopped at the end of the test.
	Start(t *testing.T, cfg Config) Consumer
	// New builds a consumer from cfg, without running it, and returns
	// New's error.
	New(t *testing.T, cfg Config) error
	// MaxBody returns the largest body the broker takes in a message with
	// a key and a few small headers: the body of BodyAtLimit.
	MaxBody() int
	// MaxHeader returns the largest header value the broker takes: the
	// key of HugeKey is the smaller of it and 600 KiB.
	MaxHeader() int
	// Ordered reports whether a message that is to be redelivered holds
	// back the ones after it (a Kafka partition), rather than letting them
	// pass (JetStream, RabbitMQ).
	Ordered() bool
}

// Consumer is a running consumer of a [Broker].
type Consumer interface {
	// Publish publishes m to the consumer's destination, and returns once
	// the broker has it.
	Publish(t *testing.T, m Message)
	// DeadLetters returns the dead letters that arrived so far at the
	// consumer's dead-letter destination (none with Config.Poison other
	// than PoisonDeadLetter), in order.
	DeadLetters(t *testing.T) []DeadLetter
	// Stop ends Run's context and returns Run's error, once Run returned.
	Stop(t *testing.T) error
	// Cut closes every connection of the consumer to the broker at once, as
	// a network failure would; the consumer reconnects by itself.
	Cut(t *testing.T)
}

// Settler is what a [Consumer] implements, optionally, when its broker
// tells which messages are settled for good: a broker that lets messages
// pass a held one (Ordered false) would otherwise hide a message held
// without end behind the ones handled after it. DeadLetterRefused then
// also waits until the poison is settled.
type Settler interface {
	// Settled reports whether every message published so far is settled
	// for good (acknowledged, or terminated): none is held, or waits to be
	// delivered again.
	Settled(t *testing.T) bool
}

// Running is a consumer's Run in a goroutine of its own: what a harness's
// [Consumer.Stop] stops.
type Running struct {
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	stopped bool
	err     error
}

// Go calls run in a goroutine of its own, with a context that Stop ends.
func Go(run func(context.Context) error) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	return r
}

// Stop ends run's context and returns its error once it returned; it fails
// t if run has not returned a minute later. Called again, it returns the
// same error.
func (r *Running) Stop(t *testing.T) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return r.err
	}
	r.stopped = true
	r.cancel()
	select {
	case r.err = <-r.done:
	case <-time.After(time.Minute):
		t.Errorf("Run did not return a minute after its context ended")
	}
	return r.err
}

// Scope is a consumer's scope decision in a [Config].
type Scope uint8

// The scope decisions.
const (
	// ScopeShared: WithSharedScope.
	ScopeShared Scope = iota
	// ScopeHeader: WithScope, the scope being the value of the header
	// "tenant".
	ScopeHeader
	// ScopeNone: neither (New must refuse it).
	ScopeNone
)

// Poison is a consumer's poison decision in a [Config].
type Poison uint8

// The poison decisions.
const (
	// PoisonDeadLetter: WithDeadLetter, to a destination of the test's
	// own that DeadLetters reads.
	PoisonDeadLetter Poison = iota
	// PoisonDiscard: WithDiscardPoison.
	PoisonDiscard
	// PoisonRefused: WithDeadLetter to a destination the broker refuses
	// every message to (a topic that does not exist and is not created,
	// a subject no stream takes, an exchange that does not exist).
	PoisonRefused
	// PoisonNone: neither (New must refuse it).
	PoisonNone
)

// Config says how to build a consumer. The harness maps every field to the
// consumer's options of the same name.
type Config struct {
	Guard   *idem.Guard
	Handler func(ctx context.Context, m Received) error
	Scope   Scope
	Poison  Poison
	// MaxAttempts is WithMaxAttempts; 0 leaves the default.
	MaxAttempts int
	// UnkeyedUnguarded is WithUnkeyedUnguarded.
	UnkeyedUnguarded bool
	// RetryFirst and RetryLongest are WithRetryBackoff's (always set).
	RetryFirst, RetryLongest time.Duration
	// BusyDelay is WithBusyDelay (always set).
	BusyDelay time.Duration
	// DrainTimeout is WithDrainTimeout (always set).
	DrainTimeout time.Duration
	// UserFunc, when set, is called first by each function the harness
	// gives the consumer besides its handler, with the function's name and
	// the message as the handler would receive it: "scope" by the scope
	// function of ScopeHeader, "key" by a key function that reads the key
	// header (WithKeyFunc), "fingerprint" by a fingerprint function that
	// returns the body (WithFingerprint), and "observer", with no message,
	// by an observer of every event (WithObserver).
	UserFunc func(fn string, m Received)
}

// Message is what a case publishes.
type Message struct {
	// Key is the idempotency key, in the header the consumer reads it
	// from, unless NoKey.
	Key   string
	NoKey bool
	Body  []byte
	// Headers are other headers ("tenant", "traceparent").
	Headers map[string]string
}

// Received is a message as a handler sees it.
type Received struct {
	Key     string // the key header's value, "" without one
	Body    []byte
	Headers map[string]string // every header, its last value
}

// DeadLetter is a message that arrived at the dead-letter destination.
type DeadLetter struct {
	Body    []byte
	Headers map[string]string // every header, its last value
}

// Run runs every case against b, each a parallel subtest with a consumer
// and a Guard of its own.
func Run(t *testing.T, b Broker) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &env{b: b})
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"Duplicates", duplicates},
	{"Retry", retry},
	{"PoisonDeadLettered", poisonDeadLettered},
	{"PanicBoundedByDefault", panicBoundedByDefault},
	{"MaxAttempts", maxAttempts},
	{"MissingKey", missingKey},
	{"EmptyKey", emptyKey},
	{"HugeKey", hugeKey},
	{"NULKey", nulKey},
	{"UnkeyedUnguarded", unkeyedUnguarded},
	{"BodyAtLimit", bodyAtLimit},
	{"DeadLetterRefused", deadLetterRefused},
	{"DiscardPoison", discardPoison},
	{"BusyKey", busyKey},
	{"CutConnection", cutConnection},
	{"ShutdownDrains", shutdownDrains},
	{"TraceContext", traceContext},
	{"DecisionsRequired", decisionsRequired},
	{"Scopes", scopes},
	{"UserFuncPanics", userFuncPanics},
}

// wait is how long a case waits for what it expects: generous, for a
// loaded machine and a consumer group's join.
const wait = 90 * time.Second

// env is a case's harness, store and ledger of handler runs.
type env struct {
	b Broker

	mu   sync.Mutex
	runs map[string]int // handler runs by key ("" for unkeyed), by body for unkeyed
	done map[string]int // handler runs that returned nil
	got  []Received
	cond chan struct{} // closed and replaced at every run
}

// guard returns a Guard over a fresh memstore with a long lease: no case
// wants a takeover.
func (e *env) guard(t *testing.T, observer idem.Observer) *idem.Guard {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := idem.New(s, idem.Config{Lease: time.Minute, Observer: observer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// config returns a Config over a fresh Guard whose handler records each run
// in the ledger and then calls h (nil: succeed).
func (e *env) config(t *testing.T, h func(ctx context.Context, m Received) error) Config {
	e.mu.Lock()
	e.runs, e.done, e.cond = map[string]int{}, map[string]int{}, make(chan struct{})
	e.mu.Unlock()
	return Config{
		Guard: e.guard(t, nil),
		Handler: func(ctx context.Context, m Received) error {
			var err error
			if h != nil {
				defer func() { e.record(m, err) }()
				err = h(ctx, m)
				return err
			}
			e.record(m, nil)
			return nil
		},
		RetryFirst:   5 * time.Millisecond,
		RetryLongest: 20 * time.Millisecond,
		BusyDelay:    50 * time.Millisecond,
		DrainTimeout: 30 * time.Second,
	}
}

func (e *env) record(m Received, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := m.Key
	if id == "" {
		id = "body:" + string(m.Body)
	}
	e.runs[id]++
	if err == nil {
		e.done[id]++
	}
	e.got = append(e.got, m)
	close(e.cond)
	e.cond = make(chan struct{})
}

// await waits until cond holds of the ledger, failing t after wait.
func (e *env) await(t *testing.T, what string, cond func(runs, done map[string]int) bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		ok, ch := cond(e.runs, e.done), e.cond
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("after %v: %s never happened; handler runs %v, successful %v", wait, what, e.runs, e.done)
		case <-time.After(50 * time.Millisecond): // conditions on other state (dead letters)
		}
	}
}

// handled waits until the handler of key returned nil n times.
func (e *env) handled(t *testing.T, key string, n int) {
	t.Helper()
	e.await(t, fmt.Sprintf("%q handled %d times", key, n), func(_, done map[string]int) bool { return done[key] >= n })
}

// runsOf returns how many times the handler ran for key.
func (e *env) runsOf(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[key]
}

// deadLetters waits until c has n dead letters and returns them.
func deadLetters(t *testing.T, c Consumer, n int) []DeadLetter {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		dls := c.DeadLetters(t)
		if len(dls) >= n {
			return dls
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d dead letters, want %d", wait, len(dls), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// msg is a keyed message whose body names its key.
func msg(key string) Message { return Message{Key: key, Body: []byte("body of " + key)} }

// checkLetter checks a dead letter's reason, cause, key and body.
func checkLetter(t *testing.T, dl DeadLetter, reason consumer.Reason, cause, key string, body []byte) {
	t.Helper()
	if got := dl.Headers[consumer.HeaderReason]; got != string(reason) {
		t.Errorf("dead letter's %s = %q, want %q (headers %v)", consumer.HeaderReason, got, reason, brief(dl.Headers))
	}
	if got := dl.Headers[consumer.HeaderCause]; !strings.Contains(got, cause) {
		t.Errorf("dead letter's %s = %q, want it to say %q", consumer.HeaderCause, got, cause)
	}
	if key != "" {
		if got := dl.Headers[consumer.HeaderKey]; got != key {
			t.Errorf("dead letter's %s = %q, want %q", consumer.HeaderKey, got, key)
		}
	}
	if body != nil && !bytes.Equal(dl.Body, body) {
		t.Errorf("dead letter's body = %q, want the original's %q", trunc(dl.Body), trunc(body))
	}
}

// brief returns headers with long values cut, for messages.
func brief(hs map[string]string) map[string]string {
	out := make(map[string]string, len(hs))
	for k, v := range hs {
		out[k] = string(trunc([]byte(v)))
	}
	return out
}

func trunc(b []byte) []byte {
	if len(b) > 80 {
		return append(b[:80:80], "…"...)
	}
	return b
}

// after publishes a good message after the others and waits until it is
// handled: the messages before it were settled and did not stop the
// consumer.
func (e *env) after(t *testing.T, c Consumer) {
	t.Helper()
	c.Publish(t, msg("after"))
	e.handled(t, "after", 1)
}

func duplicates(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	for range 3 {
		c.Publish(t, msg("dup"))
	}
	e.after(t, c)
	if n := e.runsOf("dup"); n != 1 {
		t.Fatalf("a key published 3 times ran its handler %d times, want 1", n)
	}
}

func retry(t *testing.T, e *env) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "flaky" && e.runsOf("flaky") < 2 {
			return errors.New("downstream timeout")
		}
		return nil
	})
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("flaky"))
	e.handled(t, "flaky", 1)
	e.after(t, c)
	if n := e.runsOf("flaky"); n != 3 {
		t.Fatalf("a handler that fails twice then succeeds ran %d times, want 3", n)
	}
	if dls := c.DeadLetters(t); len(dls) != 0 {
		t.Fatalf("a message that succeeded on its third attempt was dead-lettered: %v", brief(dls[0].Headers))
	}
}

func poisonDeadLettered(t *testing.T, e *env) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "poison" {
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	})
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("poison"))
	c.Publish(t, msg("poison")) // a duplicate replays the stored failure: a second dead letter, no second run
	e.after(t, c)
	dls := deadLetters(t, c, 2)
	checkLetter(t, dls[0], consumer.ReasonPermanent, "card declined", "poison", []byte("body of poison"))
	checkLetter(t, dls[1], consumer.ReasonPermanent, "card declined", "poison", []byte("body of poison"))
	if n := e.runsOf("poison"); n != 1 {
		t.Fatalf("a permanent failure ran %d times, want 1", n)
	}
}

func panics(t *testing.T, e *env, max int) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "panics" {
			panic("nil map")
		}
		return nil
	})
	cfg.MaxAttempts = max
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("panics"))
	e.after(t, c)
	dls := deadLetters(t, c, 1)
	checkLetter(t, dls[0], consumer.ReasonTooManyAttempts, "panicked: nil map", "panics", []byte("body of panics"))
	want := max
	if want == 0 {
		want = consumer.DefaultMaxAttempts
	}
	if n := e.runsOf("panics"); n != want {
		t.Fatalf("a handler that always panics ran %d times, want %d", n, want)
	}
}

func panicBoundedByDefault(t *testing.T, e *env) { panics(t, e, 0) }
func maxAttempts(t *testing.T, e *env)           { panics(t, e, 3) }

func missingKey(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	c.Publish(t, Message{NoKey: true, Body: []byte("no key")})
	e.after(t, c)
	dls := deadLetters(t, c, 1)
	checkLetter(t, dls[0], consumer.ReasonMissingKey, consumer.ErrNoKey.Error(), "", []byte("no key"))
	if n := e.runsOf("body:no key"); n != 0 {
		t.Fatalf("a message without a key ran its handler %d times, want 0", n)
	}
}

func emptyKey(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	c.Publish(t, Message{Key: "", Body: []byte("empty key")})
	e.after(t, c)
	dls := deadLetters(t, c, 1)
	checkLetter(t, dls[0], consumer.ReasonInvalidKey, "empty", "", []byte("empty key"))
	if _, ok := dls[0].Headers[consumer.HeaderKey]; ok {
		t.Errorf("the dead letter of an empty key has a %s header", consumer.HeaderKey)
	}
}

func hugeKey(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	size := min(600<<10, e.b.MaxHeader())
	key := strings.Repeat("k", size)
	c.Publish(t, Message{Key: key, Body: []byte("huge key")})
	e.after(t, c)
	dls := deadLetters(t, c, 1)
	checkLetter(t, dls[0], consumer.ReasonInvalidKey, "longer than", "", []byte("huge key"))
	if v, ok := dls[0].Headers[consumer.HeaderKey]; ok {
		t.Errorf("the dead letter copies a refused key of %d bytes (%d bytes)", size, len(v))
	}
}

func nulKey(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	key := "a\x00b"
	c.Publish(t, msg(key))
	c.Publish(t, msg(key))
	e.after(t, c)
	if n := e.runsOf(key); n != 1 {
		t.Fatalf("a key with a NUL byte, published twice, ran %d times, want 1", n)
	}
	if n := e.runsOf("a"); n != 0 {
		t.Fatalf("a key with a NUL byte was cut at it")
	}
}

func unkeyedUnguarded(t *testing.T, e *env) {
	cfg := e.config(t, nil)
	cfg.UnkeyedUnguarded = true
	c := e.b.Start(t, cfg)
	c.Publish(t, Message{NoKey: true, Body: []byte("unkeyed")})
	e.after(t, c)
	if n := e.runsOf("body:unkeyed"); n != 1 {
		t.Fatalf("a message without a key under WithUnkeyedUnguarded ran %d times, want 1", n)
	}
	if dls := c.DeadLetters(t); len(dls) != 0 {
		t.Fatalf("a message without a key under WithUnkeyedUnguarded was dead-lettered")
	}
}

func bodyAtLimit(t *testing.T, e *env) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "big" {
			return idem.Permanent(errors.New("not an event"))
		}
		return nil
	})
	c := e.b.Start(t, cfg)
	body := bytes.Repeat([]byte{0xAB}, e.b.MaxBody())
	c.Publish(t, Message{Key: "big", Body: body})
	e.after(t, c)
	dls := deadLetters(t, c, 1)
	dl := dls[0]
	checkLetter(t, dl, consumer.ReasonPermanent, "not an event", "big", nil)
	sum := sha256.Sum256(body)
	switch {
	case bytes.Equal(dl.Body, body):
		// It fit whole: the broker's limit left room for the headers.
	case len(dl.Body) != 0:
		t.Fatalf("the dead letter's body is %d bytes, neither the original's %d nor left out", len(dl.Body), len(body))
	case dl.Headers[consumer.HeaderBodySize] != strconv.Itoa(len(body)):
		t.Fatalf("the body was left out; %s = %q, want %d", consumer.HeaderBodySize, dl.Headers[consumer.HeaderBodySize], len(body))
	case dl.Headers[consumer.HeaderBodySHA256] != hex.EncodeToString(sum[:]):
		t.Fatalf("the body was left out; %s = %q, want its SHA-256", consumer.HeaderBodySHA256, dl.Headers[consumer.HeaderBodySHA256])
	}
}

func deadLetterRefused(t *testing.T, e *env) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "poison" {
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	})
	cfg.Poison, cfg.MaxAttempts = PoisonRefused, 2
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("poison"))
	e.after(t, c) // the consumer gave up on the dead letter, and went on
	if s, ok := c.(Settler); ok {
		e.await(t, "the poison settled (given up on)", func(map[string]int, map[string]int) bool { return s.Settled(t) })
	}
	if n := e.runsOf("poison"); n != 1 {
		t.Fatalf("the poison's handler ran %d times, want 1 (its failure is stored)", n)
	}
}

func discardPoison(t *testing.T, e *env) {
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "poison" {
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	})
	cfg.Poison = PoisonDiscard
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("poison"))
	c.Publish(t, Message{NoKey: true, Body: []byte("no key")})
	e.after(t, c)
	if n := e.runsOf("poison"); n != 1 {
		t.Fatalf("discarded poison ran %d times, want 1", n)
	}
}

func busyKey(t *testing.T, e *env) {
	var mu sync.Mutex
	duplicates := 0
	cfg := e.config(t, nil)
	cfg.Guard = e.guard(t, func(ctx context.Context, ev idem.Event) {
		if ev.Op == idem.OpClaim && ev.Key == "busy" && ev.Outcome == storage.Duplicate {
			mu.Lock()
			duplicates++
			mu.Unlock()
		}
	})
	// Another holder (another consumer, a process on another machine)
	// holds the key until release.
	release, held := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		_, err := cfg.Guard.Do(context.Background(), "busy", []byte("body of busy"), func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		holder <- err
	}()
	<-held
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("busy"))
	c.Publish(t, msg("other"))
	if !e.b.Ordered() {
		e.handled(t, "other", 1) // a busy key does not hold the others back where order allows
	}
	close(release)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	e.await(t, "the busy message acknowledged as a duplicate", func(map[string]int, map[string]int) bool {
		mu.Lock()
		defer mu.Unlock()
		return duplicates >= 1
	})
	e.after(t, c)
	if n := e.runsOf("busy"); n != 0 {
		t.Fatalf("the message of a key another holder ran and stored ran %d times, want 0", n)
	}
}

func cutConnection(t *testing.T, e *env) {
	c := e.b.Start(t, e.config(t, nil))
	const n = 20
	for i := range n {
		c.Publish(t, msg("m"+strconv.Itoa(i)))
		if i == n/2 {
			e.handled(t, "m0", 1)
			c.Cut(t)
		}
	}
	for i := range n {
		e.handled(t, "m"+strconv.Itoa(i), 1)
	}
	e.after(t, c)
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range n {
		if k := "m" + strconv.Itoa(i); e.done[k] != 1 {
			t.Errorf("%s handled %d times across a cut connection, want 1", k, e.done[k])
		}
	}
}

func shutdownDrains(t *testing.T, e *env) {
	started, release := make(chan struct{}), make(chan struct{})
	var ctxErr error
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "slow" {
			close(started)
			<-release
			ctxErr = ctx.Err()
		}
		return nil
	})
	c := e.b.Start(t, cfg)
	c.Publish(t, msg("slow"))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(t) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a handler was in flight, before the drain timeout", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("a graceful stop: %v", err)
	}
	if ctxErr != nil {
		t.Fatalf("the draining handler's context ended: %v", ctxErr)
	}
	if _, err := cfg.Guard.Store().Get(context.Background(), cfg.Guard.ScopedStoreKey("", "slow")); err != nil {
		t.Fatalf("the drained handler's outcome was not stored: %v", err)
	}
}

func traceContext(t *testing.T, e *env) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got := make(chan consumer.TraceCarrier, 1)
	cfg := e.config(t, func(ctx context.Context, m Received) error {
		if m.Key == "traced" {
			got <- consumer.TraceFrom(ctx)
		}
		return nil
	})
	c := e.b.Start(t, cfg)
	c.Publish(t, Message{Key: "traced", Body: []byte("traced"), Headers: map[string]string{"traceparent": parent, "tracestate": "vendor=1"}})
	select {
	case tc := <-got:
		if tc.Get("traceparent") != parent || tc.Get("tracestate") != "vendor=1" {
			t.Fatalf("the handler's trace context is %v, want the message's traceparent and tracestate", tc)
		}
	case <-time.After(wait):
		t.Fatal("the traced message was not handled")
	}
}

func decisionsRequired(t *testing.T, e *env) {
	for _, tc := range []struct {
		name   string
		scope  Scope
		poison Poison
		want   string // in the error; "" for none
	}{
		{"both made", ScopeShared, PoisonDeadLetter, ""},
		{"discard", ScopeHeader, PoisonDiscard, ""},
		{"no scope", ScopeNone, PoisonDeadLetter, "no scope decision"},
		{"no poison", ScopeShared, PoisonNone, "no poison decision"},
	} {
		cfg := e.config(t, nil)
		cfg.Scope, cfg.Poison = tc.scope, tc.poison
		err := e.b.New(t, cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: New: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: New = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func scopes(t *testing.T, e *env) {
	cfg := e.config(t, nil)
	cfg.Scope = ScopeHeader
	c := e.b.Start(t, cfg)
	for _, tenant := range []string{"alice", "bob", "alice"} {
		m := msg("order-1")
		m.Headers = map[string]string{"tenant": tenant}
		c.Publish(t, m)
	}
	e.after(t, c)
	if n := e.runsOf("order-1"); n != 2 {
		t.Fatalf("one key from two tenants (one of them twice) ran %d times, want 2", n)
	}
}

func userFuncPanics(t *testing.T, e *env) {
	funcs := map[string]string{"scope": "WithScope", "key": "WithKeyFunc", "fingerprint": "WithFingerprint"}
	cfg := e.config(t, nil)
	cfg.Scope = ScopeHeader
	cfg.UserFunc = func(fn string, m Received) {
		if fn == "observer" || m.Key == "panic-in-"+fn {
			panic("bug in " + fn)
		}
	}
	c := e.b.Start(t, cfg)
	for fn := range funcs {
		c.Publish(t, msg("panic-in-"+fn))
	}
	e.after(t, c)
	dls := deadLetters(t, c, len(funcs))
	for fn, option := range funcs {
		key := "panic-in-" + fn
		i := slices.IndexFunc(dls, func(dl DeadLetter) bool { return string(dl.Body) == "body of "+key })
		if i < 0 {
			t.Errorf("no dead letter of the message whose %s function panicked", fn)
			continue
		}
		checkLetter(t, dls[i], consumer.ReasonPanicked, "("+option+") panicked: bug in "+fn, "", nil)
		if n := e.runsOf(key); n != 0 {
			t.Errorf("the message whose %s function panicked ran its handler %d times, want 0", fn, n)
		}
	}
}
