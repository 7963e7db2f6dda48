package chassis_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/chassis"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// msg is the message of a test consumer: headers by name.
type msg map[string][]string

type options struct {
	chassis.Options[msg]
	dest string
}

type option func(*options)

func withDeadLetter(dest string) option {
	return func(o *options) { o.dest = dest; o.SetDeadLetter() }
}

func discard(o *options) { o.SetDiscardPoison() }
func shared(o *options)  { o.SetSharedScope() }

var broker = chassis.Broker[msg]{
	Names:            adapter.Names{Pkg: "testconsumer", Request: "msg"},
	KeyHeader:        "idempotency-key",
	Header:           func(m msg, name string) []string { return m[name] },
	Body:             func(m msg) []byte { return []byte(strings.Join(m["body"], "")) },
	DeadLetterOption: "withDeadLetter(dest)",
}

func newGuard(t *testing.T) *idem.Guard {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := idem.New(s, idem.Config{MaxKeyLen: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func build(t *testing.T, opts ...option) (*options, error) {
	t.Helper()
	o := &options{}
	return o, chassis.Build(o, &o.Options, broker, newGuard(t), idem.Config{}, opts)
}

func TestBuildRequiresTheDecisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []option
		want []string
	}{
		{"dead letter", []option{shared, withDeadLetter("dlq")}, nil},
		{"discard", []option{shared, discard}, nil},
		{"no poison decision", []option{shared}, []string{"testconsumer: New: no poison decision", "withDeadLetter(dest)", "WithDiscardPoison()"}},
		{"both poison decisions", []option{shared, discard, withDeadLetter("dlq")}, []string{"WithDeadLetter and WithDiscardPoison are both given"}},
		{"no scope decision", []option{discard}, []string{"no scope decision", "Security Considerations). For a consumer, keys are chosen by publishers"}},
		{"bad values", []option{shared, discard, func(o *options) {
			o.SetMaxAttempts(0)
			o.SetRetryBackoff(time.Second, time.Millisecond)
			o.SetBusyDelay(0)
			o.SetKeyHeader("")
		}}, []string{"WithMaxAttempts(0)", "WithRetryBackoff(1s, 1ms): the first pause is longer", "WithBusyDelay(0s)", `WithKeyHeader("")`}},
	} {
		_, err := build(t, tc.opts...)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Build = %v, want an error saying %q", tc.name, err, w)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	o, err := build(t, shared, discard)
	if err != nil {
		t.Fatal(err)
	}
	first, longest := o.RetryBackoff()
	if o.MaxAttempts() != consumer.DefaultMaxAttempts || first != chassis.DefaultRetryFirst || longest != chassis.DefaultRetryLongest ||
		o.BusyDelay() != chassis.DefaultBusyDelay || o.DrainTimeout() != chassis.DefaultDrainTimeout || o.DeadLetters() || o.UnkeyedUnguarded() {
		t.Fatalf("defaults: attempts %d, backoff %v–%v, busy %v, drain %v, dead letters %v, unguarded %v",
			o.MaxAttempts(), first, longest, o.BusyDelay(), o.DrainTimeout(), o.DeadLetters(), o.UnkeyedUnguarded())
	}
	o, err = build(t, shared, discard, func(o *options) { o.SetDrainTimeout(0) })
	if err != nil || o.DrainTimeout() != 0 {
		t.Fatalf("WithDrainTimeout(0): %v, %v; want 0, no default", o.DrainTimeout(), err)
	}
}

func TestKey(t *testing.T) {
	o, err := build(t, shared, discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values []string
		key    string
		why    string // in the KeyError; "" for none
	}{
		{"none", nil, "", ""},
		{"one", []string{"k1"}, "k1", ""},
		{"NUL", []string{"a\x00b"}, "a\x00b", ""},
		{"empty", []string{""}, "", "the key is empty"},
		{"twice", []string{"k1", "k1"}, "", "sent 2 times"},
		{"too long", []string{strings.Repeat("k", 17)}, "", "longer than 16"},
	} {
		key, err := o.Key(msg{"idempotency-key": tc.values})
		ke, isKeyErr := errors.AsType[*consumer.KeyError](err)
		switch {
		case tc.why == "" && (err != nil || key != tc.key):
			t.Errorf("%s: Key = %q, %v; want %q", tc.name, key, err, tc.key)
		case tc.why != "" && (!isKeyErr || !strings.Contains(err.Error(), tc.why) || key != ""):
			t.Errorf("%s: Key = %q, %v; want a *consumer.KeyError saying %q", tc.name, key, err, tc.why)
		case tc.why != "" && (ke.Source != `header "idempotency-key"` || !errors.Is(err, idem.ErrInvalidKey)):
			t.Errorf("%s: KeyError source %q, wraps ErrInvalidKey %v", tc.name, ke.Source, errors.Is(err, idem.ErrInvalidKey))
		}
	}
	errBad := errors.New("not JSON")
	o, err = build(t, shared, discard, func(o *options) {
		o.SetKeyFunc(func(m msg) (string, error) {
			switch m["k"][0] {
			case "none":
				return "", consumer.ErrNoKey
			case "bad":
				return "", errBad
			}
			return m["k"][0], nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := o.Key(msg{"k": {"none"}}); k != "" || err != nil {
		t.Errorf("key function's ErrNoKey: %q, %v; want no key", k, err)
	}
	if _, err := o.Key(msg{"k": {"bad"}}); !errors.Is(err, errBad) {
		t.Errorf("key function's error: %v, want it wrapped", err)
	}
	if _, err := o.Key(msg{"k": {strings.Repeat("k", 17)}}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("a key function's key is checked by the Guard's rules too: %v", err)
	}
}

// The verdicts on every answer the Guard gives, and the attempts that
// bound a failing handler.
func TestDecide(t *testing.T) {
	o, err := build(t, shared, discard, func(o *options) { o.SetMaxAttempts(3); o.SetBusyDelay(7 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("downstream timeout")
	panicked := &consumer.PanicError{Value: "boom"}
	permanent := idem.Permanent(errors.New("card declined"))
	stored := &idem.PermanentError{Err: storage.DecodeFailure(storage.EncodeFailure(permanent)), Replayed: true}
	for _, tc := range []struct {
		name     string
		res      idem.Result
		err      error
		failures int
		settle   chassis.Settle
		reason   consumer.Reason
		busy     bool
		counted  bool
	}{
		{"ok", idem.Result{Value: []byte("v")}, nil, 0, chassis.Ack, "", false, false},
		{"replayed", idem.Result{Value: []byte("v"), Replayed: true}, nil, 0, chassis.Ack, "", false, false},
		{"too large, ran", idem.Result{Value: []byte("v")}, fmt.Errorf("%w: 2 MiB", idem.ErrValueTooLarge), 0, chassis.Ack, "", false, false},
		{"too large, replayed", idem.Result{Replayed: true}, &idem.PermanentError{Err: idem.ErrValueTooLarge, Replayed: true}, 0, chassis.Ack, "", false, false},
		{"busy", idem.Result{}, fmt.Errorf("%w (key %q)", idem.ErrInProgress, "k"), 9, chassis.Retry, "", true, false},
		{"store down", idem.Result{}, fmt.Errorf("%w: claim: refused", idem.ErrStoreUnavailable), 9, chassis.Retry, "", false, false},
		{"lease lost", idem.Result{Value: []byte("v")}, fmt.Errorf("idem: complete: %w", idem.ErrLeaseLost), 9, chassis.Retry, "", false, false},
		{"closed", idem.Result{}, idem.ErrClosed, 9, chassis.Retry, "", false, false},
		{"shutdown", idem.Result{}, fmt.Errorf("idem: claim: %w", context.Canceled), 9, chassis.Retry, "", false, false},
		{"handler's own timeout", idem.Result{}, fmt.Errorf("charge: %w", context.DeadlineExceeded), 0, chassis.Retry, "", false, true},
		{"handler's own timeout, third", idem.Result{}, fmt.Errorf("charge: %w", context.DeadlineExceeded), 2, chassis.DeadLetter, consumer.ReasonTooManyAttempts, false, true},
		{"first failure", idem.Result{}, failed, 0, chassis.Retry, "", false, true},
		{"second failure", idem.Result{}, failed, 1, chassis.Retry, "", false, true},
		{"third failure", idem.Result{}, failed, 2, chassis.DeadLetter, consumer.ReasonTooManyAttempts, false, true},
		{"third panic", idem.Result{}, panicked, 2, chassis.DeadLetter, consumer.ReasonTooManyAttempts, false, true},
		{"refused", idem.Result{}, fmt.Errorf("idem: claim (key %q): %w", "k", idem.ErrRefused), 0, chassis.Retry, "", false, true},
		{"refused, third", idem.Result{}, fmt.Errorf("idem: claim (key %q): %w", "k", idem.ErrRefused), 2, chassis.DeadLetter, consumer.ReasonTooManyAttempts, false, true},
		{"permanent", idem.Result{}, permanent, 0, chassis.DeadLetter, consumer.ReasonPermanent, false, false},
		{"stored permanent", idem.Result{Replayed: true}, stored, 0, chassis.DeadLetter, consumer.ReasonPermanent, false, false},
		{"reused", idem.Result{}, fmt.Errorf("%w (key %q)", idem.ErrKeyReused, "k"), 0, chassis.DeadLetter, consumer.ReasonKeyReused, false, false},
		{"guard's attempts", idem.Result{Replayed: true}, &idem.PermanentError{Err: storage.DecodeFailure(storage.TooManyAttemptsCause()), Replayed: true}, 0, chassis.DeadLetter, consumer.ReasonTooManyAttempts, false, false},
		{"invalid key", idem.Result{}, fmt.Errorf("%w: the key is empty", idem.ErrInvalidKey), 0, chassis.DeadLetter, consumer.ReasonInvalidKey, false, false},
		{"missing key", idem.Result{}, fmt.Errorf("%w: %w", idem.ErrInvalidKey, consumer.ErrNoKey), 0, chassis.DeadLetter, consumer.ReasonMissingKey, false, false},
	} {
		v := o.Decide(tc.res, tc.err, tc.failures)
		if v.Settle != tc.settle || v.Reason != tc.reason || v.Busy != tc.busy || v.Failed != tc.counted || v.Replayed != tc.res.Replayed {
			t.Errorf("%s: Decide = %v reason %q busy %v failed %v replayed %v; want %v %q %v %v %v", tc.name,
				v.Settle, v.Reason, v.Busy, v.Failed, v.Replayed, tc.settle, tc.reason, tc.busy, tc.counted, tc.res.Replayed)
		}
		if (v.Settle == chassis.Ack) != (v.Cause == nil) || (v.Cause != nil && !errors.Is(v.Cause, tc.err)) {
			t.Errorf("%s: Cause %v, want the Guard's error unless acknowledged", tc.name, v.Cause)
		}
		switch {
		case tc.busy && v.Delay != 7*time.Second:
			t.Errorf("%s: delay %v, want the busy delay", tc.name, v.Delay)
		case v.Settle == chassis.Retry && !tc.busy && v.Delay <= 0:
			t.Errorf("%s: delay %v, want a backoff", tc.name, v.Delay)
		}
	}
	v := o.Decide(idem.Result{}, panicked, 2)
	if !errors.Is(v.Cause, idem.ErrTooManyAttempts) || !errors.Is(v.Cause, panicked) || !strings.Contains(v.Cause.Error(), "failed 3 times") {
		t.Errorf("the cause of too many attempts %q: want it to wrap ErrTooManyAttempts and the last failure", v.Cause)
	}
	if v := o.DecideKey(nil); v.Reason != consumer.ReasonMissingKey || !errors.Is(v.Cause, consumer.ErrNoKey) {
		t.Errorf("DecideKey(nil) = %q, %v", v.Reason, v.Cause)
	}
	ke := &consumer.KeyError{Source: "x", Err: errors.New("empty")}
	if v := o.DecideKey(ke); v.Reason != consumer.ReasonInvalidKey || v.Cause != ke || v.Settle != chassis.DeadLetter {
		t.Errorf("DecideKey(KeyError) = %v %q, %v", v.Settle, v.Reason, v.Cause)
	}
}

func TestBackoff(t *testing.T) {
	o, err := build(t, shared, discard, func(o *options) { o.SetRetryBackoff(10*time.Millisecond, 80*time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 40: 80 * time.Millisecond} {
		for range 100 {
			if d := o.Backoff(n); d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v, want from %v to %v", n, d, want/2, want)
			}
		}
	}
}

// TestCallTurnsAPanicIntoAnError: a panic is the handler's
// *consumer.PanicError, logged with the message's attributes; the
// attributes are built for that log only, never for a handler that
// returns.
func TestCallTurnsAPanicIntoAnError(t *testing.T) {
	var logged bytes.Buffer
	logTo := func(o *options) { o.SetLogger(slog.New(slog.NewTextHandler(&logged, nil))) }
	o, err := build(t, shared, discard, logTo)
	if err != nil {
		t.Fatal(err)
	}
	built := 0
	attrs := func() []slog.Attr { built++; return []slog.Attr{slog.String("subject", "orders.created")} }
	if err := o.Call(context.Background(), nil, nil, func(context.Context) error { return nil }, attrs); err != nil || built != 0 {
		t.Fatalf("Call of a handler that returns: %v, its attributes built %d times, want never", err, built)
	}
	err = o.Call(context.Background(), nil, nil, func(context.Context) error { panic("nil map") }, attrs)
	pe, ok := errors.AsType[*consumer.PanicError](err)
	if !ok || pe.Value != "nil map" || !bytes.Contains(pe.Stack, []byte("chassis_test")) {
		t.Fatalf("Call of a panicking handler = %v, want a *consumer.PanicError with its value and stack", err)
	}
	if log := logged.String(); !strings.Contains(log, "subject=orders.created") || !strings.Contains(log, "panic=\"nil map\"") {
		t.Fatalf("the panic's log %q lacks the message's attributes or the panic", log)
	}
	if err := o.Call(context.Background(), nil, nil, func(context.Context) error { panic("no attrs") }, nil); err == nil {
		t.Fatal("Call with no attributes let a panic pass as a success")
	}
	if v := o.Decide(idem.Result{}, err, 0); v.Settle != chassis.Retry || !v.Failed {
		t.Fatalf("a panic is a failed attempt, retried: %v failed %v", v.Settle, v.Failed)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func headers(l *chassis.Letter) map[string]string {
	m := map[string]string{}
	for _, h := range append(append([]chassis.Header{}, l.Headers...), l.Added...) {
		m[h.Name] = string(h.Value)
	}
	return m
}

func TestLetterFits(t *testing.T) {
	const limit = 1_000_000
	v := chassis.Verdict{Reason: consumer.ReasonInvalidKey}
	v.Cause = errors.New(strings.Repeat("line one\nline two ", 200))
	hugeKey := strings.Repeat("k", 600<<10)
	body := bytes.Repeat([]byte{1}, 999_000)

	// A small message keeps everything.
	l := chassis.NewLetter([]byte("rk"), []byte("body"), []chassis.Header{{"idempotency-key", []byte("k1")}}, v, "k1", true)
	if l.Fit(limit) || string(l.Body) != "body" || headers(l)[consumer.HeaderKey] != "k1" || headers(l)["idempotency-key"] != "k1" {
		t.Fatalf("a small letter was cut: %v", headers(l))
	}
	if c := headers(l)[consumer.HeaderCause]; len(c) > consumer.MaxHeaderValue || strings.ContainsAny(c, "\r\n") {
		t.Fatalf("the cause header is %d bytes or has a line break", len(c))
	}

	// A huge key header: the key is not copied, the original header goes.
	l = chassis.NewLetter(nil, body[:500_000], []chassis.Header{{"idempotency-key", []byte(hugeKey)}, {"trace", []byte("t")}}, v, hugeKey, true)
	if _, ok := headers(l)[consumer.HeaderKey]; ok {
		t.Fatal("a key over MaxCopiedKey was copied")
	}
	if headers(l)[consumer.HeaderKeySize] != strconv.Itoa(len(hugeKey)) || headers(l)[consumer.HeaderKeySHA256] != sha([]byte(hugeKey)) {
		t.Fatalf("the key's size and hash: %v", headers(l)[consumer.HeaderKeySize])
	}
	if !l.Fit(limit) || l.Size() > limit || len(l.Body) != 500_000 || headers(l)["trace"] != "t" || headers(l)[consumer.HeaderCutHeaders] != "idempotency-key" {
		t.Fatalf("a huge header: size %d, body %d, headers %v", l.Size(), len(l.Body), headers(l)[consumer.HeaderCutHeaders])
	}

	// A body at the limit: the body goes, recorded.
	l = chassis.NewLetter([]byte("rk"), body, []chassis.Header{{"trace", []byte("t")}}, v, "k1", true)
	if !l.Fit(limit) || l.Size() > limit || l.Body != nil || l.RecordKey != nil || headers(l)["trace"] != "t" {
		t.Fatalf("a body at the limit: size %d, body %d", l.Size(), len(l.Body))
	}
	h := headers(l)
	if h[consumer.HeaderBodySize] != "999000" || h[consumer.HeaderBodySHA256] != sha(body) || h[consumer.HeaderRecordKeySize] != "2" || h[consumer.HeaderRecordKeySHA256] != sha([]byte("rk")) {
		t.Fatalf("the body's and record key's records: %v", h)
	}

	// Strip leaves the idem headers alone.
	l = chassis.NewLetter(nil, []byte("b"), []chassis.Header{{"a", []byte("1")}, {"b", []byte("2")}}, v, "k1", true)
	l.Strip()
	if l.Body != nil || len(l.Headers) != 0 || headers(l)[consumer.HeaderCutHeaders] != "a,b" || headers(l)[consumer.HeaderKey] != "k1" {
		t.Fatalf("Strip: %v", headers(l))
	}
}

// A letter whose headers travel apart from its body (AMQP's content
// header, within one frame): MaxHeaders bounds them alone, and the body,
// which does not count toward it, stays when the whole fits.
func TestLetterFitsMaxHeaders(t *testing.T) {
	const limit, maxHeaders = 1_000_000, 64 << 10
	v := chassis.Verdict{Reason: consumer.ReasonInvalidKey, Cause: errors.New("longer than 255 bytes")}
	big := strings.Repeat("k", maxHeaders-2000) // fits the headers' budget alone, not with the idem headers
	body := bytes.Repeat([]byte{1}, 500_000)
	l := chassis.NewLetter(nil, body, []chassis.Header{{"idempotency-key", []byte(big)}, {"trace", []byte("t")}}, v, "", false)
	l.MaxHeaders = maxHeaders
	if l.Size() > limit {
		t.Fatalf("the test's letter is %d bytes, over the whole's limit: it tests nothing of MaxHeaders", l.Size())
	}
	if !l.Fit(limit) || l.HeaderSize() > maxHeaders-4096 || len(l.Body) != len(body) || headers(l)["trace"] != "t" ||
		headers(l)[consumer.HeaderCutHeaders] != "idempotency-key" {
		t.Fatalf("headers over MaxHeaders: header size %d, body %d, cut %q", l.HeaderSize(), len(l.Body), headers(l)[consumer.HeaderCutHeaders])
	}
	// Many small headers over the budget: every original header goes, the body stays.
	var hs []chassis.Header
	for i := range 200 {
		hs = append(hs, chassis.Header{Name: "h" + strconv.Itoa(i), Value: bytes.Repeat([]byte{'v'}, 1000)})
	}
	l = chassis.NewLetter(nil, body, hs, v, "", false)
	l.MaxHeaders = maxHeaders
	if !l.Fit(limit) || l.HeaderSize() > maxHeaders-4096 || len(l.Headers) != 0 || len(l.Body) != len(body) || headers(l)[consumer.HeaderReason] != string(v.Reason) {
		t.Fatalf("small headers over MaxHeaders: header size %d, %d original headers left, body %d", l.HeaderSize(), len(l.Headers), len(l.Body))
	}
}

// A broker with typed header values: a key header that holds no text is an
// unusable key.
func TestKeyCheckHeader(t *testing.T) {
	b := broker
	b.CheckHeader = func(m msg, name string) error {
		if len(m[name]) > 0 && m[name][0] == "7" {
			return errors.New("a number, not a string")
		}
		return nil
	}
	o := &options{}
	if err := chassis.Build(o, &o.Options, b, newGuard(t), idem.Config{}, []option{shared, discard}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Key(msg{"idempotency-key": {"7"}}); !strings.Contains(fmt.Sprint(err), "a number") {
		t.Errorf("Key of a header CheckHeader refuses = %v, want its error", err)
	}
	if k, err := o.Key(msg{"idempotency-key": {"k1"}}); k != "k1" || err != nil {
		t.Errorf("Key = %q, %v; want k1", k, err)
	}
}

// FuzzLetterFits: whatever the message, a fitted dead letter is within
// the limit, keeps its reason, and records every part it left out.
func FuzzLetterFits(f *testing.F) {
	f.Add(1_000_000, 999_000, 2, 600<<10, 3, 10)
	f.Add(20_000, 0, 0, 0, 0, 0)
	f.Add(64<<10, 60_000, 100, 5_000, 50, 5_000)
	f.Fuzz(func(t *testing.T, limit, bodyLen, recordKeyLen, keyLen, nHeaders, headerLen int) {
		limit = 20_000 + abs(limit)%(2<<20)
		bodyLen, recordKeyLen, keyLen = abs(bodyLen)%(2<<20), abs(recordKeyLen)%(64<<10), abs(keyLen)%(1<<20)
		nHeaders, headerLen = abs(nHeaders)%64, abs(headerLen)%(256<<10)
		var hs []chassis.Header
		for i := range nHeaders {
			hs = append(hs, chassis.Header{Name: "h" + strconv.Itoa(i), Value: bytes.Repeat([]byte{'v'}, headerLen*(i%3)/2)})
		}
		body := bytes.Repeat([]byte{'b'}, bodyLen)
		v := chassis.Verdict{Reason: consumer.ReasonPermanent}
		v.Cause = errors.New(strings.Repeat("x", keyLen%5000))
		l := chassis.NewLetter(bytes.Repeat([]byte{'r'}, recordKeyLen), body, hs, v, strings.Repeat("k", keyLen), true)
		l.Fit(limit)
		h := headers(l)
		switch {
		case l.Size() > limit:
			t.Fatalf("a letter fitted to %d is %d bytes", limit, l.Size())
		case h[consumer.HeaderReason] != string(consumer.ReasonPermanent):
			t.Fatal("the reason was lost")
		case len(l.Body) != bodyLen && (l.Body != nil || h[consumer.HeaderBodySize] != fmt.Sprint(bodyLen) && bodyLen > 0):
			t.Fatalf("the body (%d bytes) was cut to %d without its size recorded", bodyLen, len(l.Body))
		case len(l.Headers) < nHeaders && h[consumer.HeaderCutHeaders] == "":
			t.Fatal("original headers were left out without their names recorded")
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

func TestTriesForgetsTheOldest(t *testing.T) {
	tr := chassis.NewTries(2)
	tr.Failed("a")
	tr.Failed("a")
	tr.Failed("b")
	if tr.Count("a") != 2 || tr.Count("b") != 1 {
		t.Fatalf("counts a %d b %d", tr.Count("a"), tr.Count("b"))
	}
	tr.Failed("c")
	if tr.Count("a") != 0 || tr.Count("c") != 1 {
		t.Fatalf("at its bound, the oldest is forgotten: a %d c %d", tr.Count("a"), tr.Count("c"))
	}
	tr.Forget("c")
	if tr.Count("c") != 0 || tr.Count("b") != 1 {
		t.Fatalf("Forget: c %d b %d", tr.Count("c"), tr.Count("b"))
	}
}

type ctxKey string

func TestHandlerContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey("mine"), "consumer's"))
	record := context.WithValue(context.WithValue(context.Background(), ctxKey("span"), "producer's span"), ctxKey("mine"), "record's")
	trace := chassis.Trace(func(name string) string {
		if name == "traceparent" {
			return "00-abc-01"
		}
		return ""
	})
	o, err := build(t, shared, discard)
	if err != nil {
		t.Fatal(err)
	}
	var hctx context.Context
	if err := o.Call(ctx, record, trace, func(ctx context.Context) error { hctx = ctx; return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if hctx.Value(ctxKey("span")) != "producer's span" || hctx.Value(ctxKey("mine")) != "consumer's" {
		t.Fatalf("values: span %v, mine %v", hctx.Value(ctxKey("span")), hctx.Value(ctxKey("mine")))
	}
	if got := consumer.TraceFrom(hctx); got.Get("traceparent") != "00-abc-01" || len(got.Keys()) != 1 {
		t.Fatalf("trace %v", got)
	}
	cancel()
	if hctx.Err() == nil {
		t.Fatal("the consumer's cancellation does not reach the handler")
	}
	if len(consumer.TraceFrom(context.Background())) != 0 {
		t.Fatal("no trace context: want an empty carrier")
	}
}

// TestSendLetter: a dead letter refused as too large is sent once more,
// stripped; refusals are counted to MaxAttempts, then the consumer gives
// up, logged at error level; outages are tried again without end; a
// consumer that stops has the last error.
func TestSendLetter(t *testing.T) {
	var logged bytes.Buffer
	o, err := build(t, shared, withDeadLetter("dlq"), func(o *options) {
		o.SetMaxAttempts(3)
		o.SetRetryBackoff(time.Millisecond, time.Millisecond)
		o.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	})
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("no")
	send := func(l *chassis.Letter, answers ...chassis.Refusal) (func() (chassis.Refusal, error), *int) {
		sent := 0
		return func() (chassis.Refusal, error) {
			sent++
			if sent > len(answers) {
				return chassis.Unreached, nil
			}
			if sent > 1 && answers[sent-2] == chassis.RefusedTooLarge && l.Body != nil {
				t.Fatal("a letter refused as too large was sent again unstripped")
			}
			return answers[sent-1], refusal
		}, &sent
	}
	waits := 0
	wait := func(time.Duration) bool { waits++; return true }
	newLetter := func() *chassis.Letter {
		return chassis.NewLetter(nil, []byte("body"), nil, chassis.Verdict{Reason: consumer.ReasonPermanent}, "k", true)
	}
	for _, tc := range []struct {
		name    string
		answers []chassis.Refusal
		sends   int
		gaveUp  bool
		err     error
	}{
		{"taken", nil, 1, false, nil},
		{"outages", []chassis.Refusal{chassis.Unreached, chassis.Unreached, chassis.Unreached, chassis.Unreached}, 5, false, nil},
		{"too large, then taken", []chassis.Refusal{chassis.RefusedTooLarge}, 2, false, nil},
		{"refused", []chassis.Refusal{chassis.Refused, chassis.Unreached, chassis.Refused, chassis.Refused}, 4, true, refusal},
		{"too large twice", []chassis.Refusal{chassis.RefusedTooLarge, chassis.RefusedTooLarge, chassis.Refused, chassis.Refused}, 4, true, refusal},
	} {
		l := newLetter()
		f, sent := send(l, tc.answers...)
		gaveUp, err := o.SendLetter(context.Background(), l, f, wait, nil, slog.String("settlement", "dropped"))
		if gaveUp != tc.gaveUp || err != tc.err || *sent != tc.sends {
			t.Errorf("%s: SendLetter = %v, %v after %d sends; want %v, %v after %d", tc.name, gaveUp, err, *sent, tc.gaveUp, tc.err, tc.sends)
		}
	}
	if log := logged.String(); strings.Count(log, "level=ERROR") != 2 || !strings.Contains(log, "refused the dead letter 3 times") ||
		!strings.Contains(log, "settlement=dropped") {
		t.Errorf("the log of the dead letters given up on: %s", log)
	}
	l := newLetter()
	f, sent := send(l, chassis.Unreached, chassis.Unreached)
	gaveUp, err := o.SendLetter(context.Background(), l, f, func(time.Duration) bool { return false }, nil)
	if gaveUp || err != refusal || *sent != 1 {
		t.Errorf("a consumer that stops: SendLetter = %v, %v after %d sends; want false, the last error, after 1", gaveUp, err, *sent)
	}
}

// The attempts of a key are bounded by the store's count, which a Guard's
// handler context carries: a handler that fails at its MaxAttempts-th
// claim has the key failed for good, whatever the in-memory count says
// (none here: a storm or a restart lost it), and its duplicates never run.
func TestCallBoundsAttemptsByTheStore(t *testing.T) {
	g := newGuard(t)
	runs := 0
	handle := func(o *options) (chassis.Verdict, error) {
		res, err := g.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
			return nil, o.Call(ctx, nil, nil, func(context.Context) error { runs++; return errors.New("downstream timeout") }, nil)
		})
		return o.Decide(res, err, 0), err
	}
	for i := 1; i <= 5; i++ {
		// A consumer of its own each time: a restart, or a count evicted.
		o := &options{}
		if err := chassis.Build(o, &o.Options, broker, g, idem.Config{}, []option{shared, discard, func(o *options) { o.SetMaxAttempts(3) }}); err != nil {
			t.Fatal(err)
		}
		v, err := handle(o)
		switch {
		case i < 3 && (v.Settle != chassis.Retry || !v.Failed):
			t.Fatalf("attempt %d: %v (%v), want a counted retry", i, v.Settle, err)
		case i >= 3 && (v.Settle != chassis.DeadLetter || v.Reason != consumer.ReasonTooManyAttempts || !errors.Is(err, idem.ErrTooManyAttempts)):
			t.Fatalf("attempt %d: %v %q (%v), want too-many-attempts poison", i, v.Settle, v.Reason, err)
		case i == 3 && !strings.Contains(err.Error(), "downstream timeout"):
			t.Errorf("the last attempt's cause %q does not say the handler's error", err)
		}
	}
	if runs != 3 {
		t.Fatalf("the handler ran %d times for one key, want MaxAttempts, 3", runs)
	}
}
