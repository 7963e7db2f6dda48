package idemotel

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// ScopeName is the instrumentation scope of idemotel's meter and tracer.
const ScopeName = "github.com/idemgo/idem/idemotel"

// Config configures [New]. The zero value uses OpenTelemetry's global
// providers.
type Config struct {
	// MeterProvider makes the instruments. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// KeySecret keys the idem.key.hash attribute of spans, an HMAC-SHA256
	// of the scope and key: unkeyed, the hash of a key drawn from a small
	// or guessable set (order numbers, account IDs) is reversed by trying
	// them all. Default: 32 random bytes New draws, so hashes tell keys
	// apart within one process only. Set the same secret, of at least 16
	// bytes, in every process whose spans you join by key, and keep it as
	// you keep a password; [Telemetry.KeyHash] computes a key's hash.
	KeySecret []byte
	// RecordErrorText puts an error's message into its span: the status
	// description and an exception event. Default false: the messages of
	// the Guard's and the stores' errors name the key, the scope or the
	// store's key, which a trace backend must not hold; a span then
	// carries the error's error.type alone, and the message stays in the
	// caller's logs.
	RecordErrorText bool
}

// minKeySecret is the shortest Config.KeySecret New takes.
const minKeySecret = 16

// Telemetry turns a Guard's events into metrics and spans; see the package
// documentation. It is safe for concurrent use, and one Telemetry serves
// any number of Guards.
type Telemetry struct {
	secret    []byte // Config.KeySecret, or New's random one
	errorText bool   // Config.RecordErrorText
	tracer    trace.Tracer
	claims    metric.Int64Counter
	cacheHits metric.Int64Counter
	store     metric.Float64Histogram
	run       metric.Float64Histogram
	lost      metric.Int64Counter
	failOpen  metric.Int64Counter
	tooLarge  metric.Int64Counter
	consumers consumerMetrics
}

// New returns a Telemetry whose instruments are made by cfg's providers.
func New(cfg Config) (*Telemetry, error) {
	mp, tp := cfg.MeterProvider, cfg.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	secret := cfg.KeySecret
	switch {
	case secret == nil:
		secret = make([]byte, 32)
		rand.Read(secret)
	case len(secret) < minKeySecret:
		return nil, fmt.Errorf("idemotel: New: Config.KeySecret has %d bytes, want at least %d", len(secret), minKeySecret)
	default:
		secret = append([]byte(nil), secret...)
	}
	m := mp.Meter(ScopeName)
	t := &Telemetry{secret: secret, errorText: cfg.RecordErrorText, tracer: tp.Tracer(ScopeName)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
		errs = append(errs, err)
		return h
	}
	t.claims = counter("idem.claims", "{claim}", "Claims of idempotency keys, by outcome.")
	t.cacheHits = counter("idem.cache.hits", "{claim}", "Duplicates answered from the Guard's local cache.")
	t.store = histogram("idem.store.duration", "Duration of the idempotency store's calls, by operation.")
	t.run = histogram("idem.run.duration", "Duration of the operations run under an idempotency key.")
	t.lost = counter("idem.lease.lost", "{operation}", "Operations whose lease was lost or not confirmed in time.")
	t.failOpen = counter("idem.fail_open", "{operation}", "Operations run without idempotency because the store failed.")
	t.tooLarge = counter("idem.too_large", "{operation}", "Outcomes too large for the store, kept without them.")
	errs = append(errs, t.consumers.init(m, counter))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("idemotel: New: %w", err)
	}
	return t, nil
}

// Outcomes of a claim, the values of the idem.outcome attribute.
const (
	OutcomeAcquired        = "acquired"
	OutcomeRetried         = "retried"
	OutcomeReplayed        = "replayed"
	OutcomeBusy            = "busy"
	OutcomeKeyReused       = "key_reused"
	OutcomeTooManyAttempts = "too_many_attempts"
	OutcomeError           = "error"
)

// Observe is an [idem.Observer]: pass it as the Guard's Config.Observer (or
// call it from one of your own).
func (t *Telemetry) Observe(ctx context.Context, e idem.Event) {
	ns := attribute.String("idem.namespace", e.Namespace)
	switch e.Op {
	case idem.OpClaim:
		outcome := claimOutcome(e)
		t.claims.Add(ctx, 1, metric.WithAttributes(ns, attribute.String("idem.outcome", outcome)))
		t.storeCall(ctx, "claim", e, ns)
		t.span(ctx, "idem claim", e, ns, attribute.String("idem.outcome", outcome), attribute.Int("idem.attempt", e.Attempt))
	case idem.OpCacheHit:
		outcome := OutcomeReplayed
		if errors.Is(e.Err, idem.ErrKeyReused) {
			outcome = OutcomeKeyReused
		}
		t.claims.Add(ctx, 1, metric.WithAttributes(ns, attribute.String("idem.outcome", outcome)))
		t.cacheHits.Add(ctx, 1, metric.WithAttributes(ns))
	case idem.OpRun:
		attrs := []attribute.KeyValue{ns}
		if e.Err != nil {
			attrs = append(attrs, errorType(e.Err))
		}
		t.run.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
		t.span(ctx, "idem run", e, ns)
	case idem.OpComplete, idem.OpFail, idem.OpRelease, idem.OpExtend:
		t.storeCall(ctx, e.Op.String(), e, ns)
		if e.Op != idem.OpExtend {
			t.span(ctx, "idem "+e.Op.String(), e, ns)
		}
	case idem.OpLeaseLost:
		t.lost.Add(ctx, 1, metric.WithAttributes(ns))
	case idem.OpFailOpen:
		t.failOpen.Add(ctx, 1, metric.WithAttributes(ns))
	case idem.OpTooLarge:
		t.tooLarge.Add(ctx, 1, metric.WithAttributes(ns))
	}
}

// claimOutcome names what a claim answered.
func claimOutcome(e idem.Event) string {
	switch {
	case errors.Is(e.Err, idem.ErrTooManyAttempts):
		return OutcomeTooManyAttempts
	case errors.Is(e.Err, idem.ErrKeyReused):
		return OutcomeKeyReused
	case e.Err != nil:
		return OutcomeError
	case e.Outcome == storage.Acquired && e.Attempt > 1:
		return OutcomeRetried
	case e.Outcome == storage.Acquired:
		return OutcomeAcquired
	case e.Outcome == storage.Busy:
		return OutcomeBusy
	case e.Outcome == storage.Duplicate:
		return OutcomeReplayed
	}
	return OutcomeError
}

func (t *Telemetry) storeCall(ctx context.Context, op string, e idem.Event, ns attribute.KeyValue) {
	attrs := []attribute.KeyValue{ns, attribute.String("idem.operation", op)}
	if e.Err != nil && !errors.Is(e.Err, idem.ErrKeyReused) && !errors.Is(e.Err, idem.ErrTooManyAttempts) {
		attrs = append(attrs, errorType(e.Err))
	}
	t.store.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
}

// span records the step e, which has just ended, as a span from its start.
func (t *Telemetry) span(ctx context.Context, name string, e idem.Event, attrs ...attribute.KeyValue) {
	end := time.Now()
	_, s := t.tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-e.Duration)), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(attrs, attribute.String("idem.key.hash", t.KeyHash(e.Scope, e.Key)))...))
	switch {
	case e.Err == nil:
	case t.errorText:
		s.RecordError(e.Err)
		s.SetStatus(codes.Error, e.Err.Error())
	default:
		s.SetStatus(codes.Error, errorType(e.Err).Value.AsString()) // the message may name the key
	}
	s.End(trace.WithTimestamp(end))
}

// KeyHash returns the idem.key.hash attribute of the spans of key in
// scope: the first 16 hex digits of the HMAC-SHA256, under
// Config.KeySecret, of the scope's length, the scope and the key. It tells
// keys apart without naming them; compute it from a key to find its spans.
func (t *Telemetry) KeyHash(scope, key string) string {
	h := hmac.New(sha256.New, t.secret)
	var n [8]byte
	h.Write(fmt.Appendf(n[:0], "%d:", len(scope)))
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// errorType is the error.type attribute of err: the sentinel of idem it
// wraps, else its Go type.
func errorType(err error) attribute.KeyValue {
	for _, s := range []struct {
		err  error
		name string
	}{
		{idem.ErrStoreUnavailable, "store_unavailable"},
		{idem.ErrLeaseLost, "lease_lost"},
		{idem.ErrInProgress, "in_progress"},
		{idem.ErrClosed, "closed"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
	} {
		if errors.Is(err, s.err) {
			return attribute.String("error.type", s.name)
		}
	}
	if _, ok := errors.AsType[*idem.PermanentError](err); ok {
		return attribute.String("error.type", "permanent")
	}
	return attribute.String("error.type", fmt.Sprintf("%T", err))
}
