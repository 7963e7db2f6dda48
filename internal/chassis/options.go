package chassis

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
)

// Defaults of the shared options, the same for every consumer.
const (
	defaultRetryFirst   = 100 * time.Millisecond
	defaultRetryLongest = 10 * time.Second
	defaultBusyDelay    = time.Second
	defaultDrainTimeout = 10 * time.Second
)

// scopeThreat completes the error of a consumer built without a scope
// decision, for which the threat is the publishers'.
const scopeThreat = ". For a consumer, keys are chosen by publishers: without a scope, a publisher " +
	"that sends another tenant's key makes this consumer ack that tenant's message as a duplicate " +
	"without handling it, or has its own message stand in for the other's"

// poison is the poison decision.
type poison uint8

const (
	poisonUndecided poison = iota
	poisonDeadLetter
	poisonDiscard
)

// Options are the settings every consumer has, for messages of type M. A
// consumer's options struct embeds them, its With functions call the Set
// methods (the shared ones under the shared names), and its New calls
// [Build].
type Options[M any] struct {
	adapter.Policy[M]

	header      func(m M, name string) []string // the values of a header of m
	checkHeader func(m M, name string) error    // why a header of m holds no text
	body        func(m M) []byte                // what is fingerprinted by default
	keyHeader   string
	validHeader func(string) bool
	keyFunc     func(M) (string, error)
	unguarded   bool
	fingerprint func(M) []byte
	poison      poison
	maxAttempts int
	retryFirst  time.Duration
	retryLast   time.Duration
	busyDelay   time.Duration
	drain       time.Duration
	// observerPanicked: the consumer's observer panicked once, and was
	// logged (see Observe).
	observerPanicked *atomic.Bool
}

// Broker is what Build needs to know of a consumer's broker.
type Broker[M any] struct {
	Names adapter.Names
	// KeyHeader is the default header of the key.
	KeyHeader string
	// Header returns the values of the header name of m, in order.
	Header func(m M, name string) []string
	// CheckHeader, for a broker whose header values are typed (AMQP's
	// field tables), returns why the header name of m cannot hold a key
	// (a value that is not text), or nil; nil reads every value as text.
	CheckHeader func(m M, name string) error
	// Body returns what is fingerprinted unless WithFingerprint says
	// otherwise.
	Body func(m M) []byte
	// ValidHeaderName reports whether WithKeyHeader may name name; nil
	// accepts any non-empty name.
	ValidHeaderName func(name string) bool
	// DeadLetterOption is how the consumer's dead-letter option is
	// written, for the error of a missing poison decision:
	// "WithDeadLetter(topic)".
	DeadLetterOption string
}

// Build applies opts to o, whose shared Options are so, for a consumer of
// broker b over the Guard g (or, when g is nil, over an executor whose
// configuration is cfg), and checks them: a nil Option, an option that
// failed, and a missing or double scope or poison decision are errors,
// all reported at once. A nil Guard is the consumer's to refuse, before.
func Build[O any, F ~func(*O), M any](o *O, so *Options[M], b Broker[M], g *idem.Guard, cfg idem.Config, opts []F) error {
	so.header, so.checkHeader, so.body, so.keyHeader = b.Header, b.CheckHeader, b.Body, b.KeyHeader
	if b.ValidHeaderName != nil {
		so.validHeader = b.ValidHeaderName
	}
	names := b.Names
	names.Threat = scopeThreat
	var exec *idem.Config
	if g == nil {
		exec = &cfg
	}
	err := adapter.Build(o, &so.Policy, names, g, exec, opts, func() {
		if so.poison == poisonUndecided {
			so.Fail("New: no poison decision. Pass %s, where the messages that can never succeed go "+
				"(with their cause in their headers), or WithDiscardPoison() to drop them, logged. "+
				"A message is poison when its handler fails permanently, or %d times in a row (WithMaxAttempts), "+
				"when its key is missing, unusable or reused with another payload", b.DeadLetterOption, consumer.DefaultMaxAttempts)
		}
		if so.retryFirst > 0 && so.retryLast > 0 && so.retryFirst > so.retryLast {
			so.Fail("WithRetryBackoff(%v, %v): the first pause is longer than the longest", so.retryFirst, so.retryLast)
		}
	})
	if err != nil {
		return err
	}
	so.maxAttempts = cmp.Or(so.maxAttempts, consumer.DefaultMaxAttempts)
	so.retryFirst = cmp.Or(so.retryFirst, defaultRetryFirst)
	so.retryLast = cmp.Or(so.retryLast, max(defaultRetryLongest, so.retryFirst))
	so.busyDelay = cmp.Or(so.busyDelay, defaultBusyDelay)
	so.drain = cmp.Or(so.drain, defaultDrainTimeout)
	so.observerPanicked = new(atomic.Bool)
	if so.keyFunc == nil && so.keyHeader != "" {
		so.SetKeyName("the " + so.keyHeader + " header")
	}
	return nil
}

// SetKeyHeader is WithKeyHeader: the key is the value of the header name.
func (o *Options[M]) SetKeyHeader(name string) {
	if o.Check(name != "" && (o.validHeader == nil || o.validHeader(name)), "WithKeyHeader(%q): not a valid header name", name) {
		o.keyHeader, o.keyFunc = name, nil
	}
}

// SetKeyFunc is WithKeyFunc: the key is what f returns; "" or
// consumer.ErrNoKey for a message without one, another error for one whose
// key cannot be used.
func (o *Options[M]) SetKeyFunc(f func(M) (string, error)) {
	if o.Check(f != nil, "WithKeyFunc(nil)") {
		o.keyFunc = f
	}
}

// SetUnkeyedUnguarded is WithUnkeyedUnguarded.
func (o *Options[M]) SetUnkeyedUnguarded() { o.unguarded = true }

// SetFingerprint is WithFingerprint.
func (o *Options[M]) SetFingerprint(f func(M) []byte) {
	if o.Check(f != nil, "WithFingerprint(nil)") {
		o.fingerprint = f
	}
}

// SetDeadLetter records the poison decision of the consumer's
// WithDeadLetter, which keeps the destination itself.
func (o *Options[M]) SetDeadLetter() { o.decide(poisonDeadLetter) }

// SetDiscardPoison is WithDiscardPoison.
func (o *Options[M]) SetDiscardPoison() { o.decide(poisonDiscard) }

func (o *Options[M]) decide(p poison) {
	if o.poison != poisonUndecided && o.poison != p {
		o.Fail("New: WithDeadLetter and WithDiscardPoison are both given: choose one")
	}
	o.poison = p
}

// SetMaxAttempts is WithMaxAttempts.
func (o *Options[M]) SetMaxAttempts(n int) {
	if o.Check(n >= 1, "WithMaxAttempts(%d): must be at least 1", n) {
		o.maxAttempts = n
	}
}

// SetRetryBackoff is WithRetryBackoff.
func (o *Options[M]) SetRetryBackoff(first, longest time.Duration) {
	if o.Check(first > 0 && longest > 0, "WithRetryBackoff(%v, %v): must be positive", first, longest) {
		o.retryFirst, o.retryLast = first, longest
	}
}

// SetBusyDelay is WithBusyDelay.
func (o *Options[M]) SetBusyDelay(d time.Duration) {
	if o.Check(d > 0, "WithBusyDelay(%v): must be positive", d) {
		o.busyDelay = d
	}
}

// SetDrainTimeout is WithDrainTimeout.
func (o *Options[M]) SetDrainTimeout(d time.Duration) {
	if o.Check(d >= 0, "WithDrainTimeout(%v): must not be negative", d) {
		o.drain = d
		if d == 0 {
			o.drain = -1 // set, to nothing: cmp.Or must not take the default
		}
	}
}

// DeadLetters reports whether poison goes to a dead-letter destination
// (else it is discarded, logged: WithDiscardPoison).
func (o *Options[M]) DeadLetters() bool { return o.poison == poisonDeadLetter }

// UnkeyedUnguarded reports whether a message without a key runs
// unguarded.
func (o *Options[M]) UnkeyedUnguarded() bool { return o.unguarded }

// MaxAttempts returns the attempts of a failing handler before its message
// is dead-lettered.
func (o *Options[M]) MaxAttempts() int { return o.maxAttempts }

// BusyDelay returns the pause before a message whose key is busy comes back.
func (o *Options[M]) BusyDelay() time.Duration { return o.busyDelay }

// DrainTimeout returns how long handlers in flight may go on at a
// shutdown, and how long cancelled ones may take to return.
func (o *Options[M]) DrainTimeout() time.Duration { return max(o.drain, 0) }

// Backoff returns the pause before the attempt after the n-th failure in a
// row (n ≥ 1): the first pause, doubled each time up to the longest, with
// jitter (from half of it to all of it).
func (o *Options[M]) Backoff(n int) time.Duration {
	d := o.retryFirst
	for i := 1; i < n && d < o.retryLast; i++ {
		d *= 2
	}
	d = min(d, o.retryLast)
	return d/2 + rand.N(d/2+1)
}

// Payload returns what is fingerprinted for m.
func (o *Options[M]) Payload(m M) []byte {
	if o.fingerprint != nil {
		return o.fingerprint(m)
	}
	return o.body(m)
}

// Key returns m's idempotency key: "" and nil when m has none, a
// *consumer.KeyError when the key it carries cannot be used (sent twice,
// empty, refused by the key function or by the Guard's checks).
func (o *Options[M]) Key(m M) (string, error) {
	if o.keyFunc != nil {
		k, err := o.keyFunc(m)
		switch {
		case errors.Is(err, consumer.ErrNoKey):
			return "", nil
		case err != nil:
			return "", &consumer.KeyError{Source: "key function", Err: err}
		case k == "":
			return "", nil
		}
		if err := o.Config().CheckKey("", k); err != nil {
			return "", &consumer.KeyError{Source: "key function", Err: err}
		}
		return k, nil
	}
	if o.checkHeader != nil {
		if err := o.checkHeader(m, o.keyHeader); err != nil {
			return "", &consumer.KeyError{Source: "header " + strconv.Quote(o.keyHeader), Err: err}
		}
	}
	values := o.header(m, o.keyHeader)
	if len(values) == 0 {
		return "", nil
	}
	k, err := o.Policy.Key(values, nil)
	if err != nil {
		return "", &consumer.KeyError{Source: "header " + strconv.Quote(o.keyHeader), Err: err}
	}
	return k, nil
}

// Read returns what the Guard needs of m: its scope, its key ("" for none),
// and, when it has a usable key, its payload. err is Key's error, or a
// *consumer.PanicError when a function the user gave (the scope, key or
// fingerprint function, the Guard's key check) panicked on m, logged at
// error level. [Options.DecideKey] gives the verdict on a message with an
// error, or without a key.
//
// Those functions read what a publisher sent: a panic of theirs is the
// message's, and would end the process at each delivery of it.
func (o *Options[M]) Read(m M) (scope, key string, payload []byte, err error) {
	fn := "the scope function (WithScope)"
	defer func() {
		if v := recover(); v != nil {
			fp := o.Panicked(context.Background(), fn, v)
			scope, key, payload = "", "", nil
			err = &consumer.PanicError{Func: fp.Func, Value: fp.Value, Stack: fp.Stack}
		}
	}()
	scope = o.Scope(m)
	fn = "the Guard's key check (Config.ValidateKey)"
	if o.keyFunc != nil {
		fn = "the key function (WithKeyFunc)"
	}
	if key, err = o.Key(m); err != nil || key == "" {
		return scope, "", nil, err
	}
	fn = "the fingerprint function (WithFingerprint)"
	return scope, key, o.Payload(m), nil
}

// Observe runs report, a call of the consumer's observer, and recovers its
// panic: an observer must not end the process, nor leave unsettled the
// message it is told about. The first panic is logged at error level with
// its stack; the later ones, which the same bug repeats at every event,
// are not.
func (o *Options[M]) Observe(ctx context.Context, report func()) {
	defer func() {
		if v := recover(); v != nil && o.observerPanicked.CompareAndSwap(false, true) {
			o.Logger().LogAttrs(ctx, slog.LevelError, o.Names().Pkg+": the observer (WithObserver) panicked "+
				"(recovered; later panics of it are not logged)", slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		}
	}()
	report()
}

// Call runs h with the context a handler gets, and turns its panic into a
// *consumer.PanicError, logged at error level with its stack and the
// attributes attrs returns (nil: none). attrs runs only then: a message's
// attributes cost more to build than a no-op handler costs to run.
//
// The handler's context has ctx's deadline, cancellation and values, then
// the values of msgCtx (a Kafka record's context, where kgo hooks such as
// kotel put their span; nil elsewhere), and the message's trace context
// (consumer.TraceFrom).
//
// Under a Guard, ctx carries the attempt of the key's claim, which the
// store counts (idem.AttemptFrom): a handler that fails (an error without
// a permanent mark, a panic, its own timeout) at attempt MaxAttempts or
// later gets an idem.Permanent error wrapping idem.ErrTooManyAttempts
// instead, which the Guard stores as the key's outcome. So the handler of
// a key runs at most MaxAttempts times, whatever the consumer's restarts
// and however many messages fail at once; the in-memory count that
// [Options.Decide] is given only bounds what runs without a Guard's
// attempt (unguarded messages, a TxGuard).
func (o *Options[M]) Call(ctx, msgCtx context.Context, trace consumer.TraceCarrier, h func(context.Context) error, attrs func() []slog.Attr) error {
	err := o.call(ctx, msgCtx, trace, h, attrs)
	if err == nil {
		return nil
	}
	if attempt, ok := idem.AttemptFrom(ctx); ok && attempt >= o.maxAttempts && counts(adapter.Classify(err), err) {
		return idem.Permanent(&tooManyAttemptsError{attempts: attempt, last: err})
	}
	return err
}

func (o *Options[M]) call(ctx, msgCtx context.Context, trace consumer.TraceCarrier, h func(context.Context) error, attrs func() []slog.Attr) (err error) {
	if msgCtx != nil && msgCtx != context.Background() && msgCtx != context.TODO() {
		ctx = merged{ctx, msgCtx}
	}
	ctx = consumer.WithTrace(ctx, trace)
	defer func() {
		if v := recover(); v != nil {
			pe := &consumer.PanicError{Value: v, Stack: debug.Stack()}
			var a []slog.Attr
			if attrs != nil {
				a = attrs()
			}
			o.Logger().LogAttrs(ctx, slog.LevelError, o.Names().Pkg+": the handler panicked",
				append(a, slog.Any("panic", v), slog.String("stack", string(pe.Stack)))...)
			err = pe
		}
	}()
	return h(ctx)
}
