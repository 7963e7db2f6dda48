package idemotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/idemtest"
)

type env struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer *sdktrace.TracerProvider
	tel    *idemotel.Telemetry
	g      *idem.Guard
}

func newEnv(t *testing.T, cfg idem.Config) *env {
	t.Helper()
	e := &env{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	e.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	tel, err := idemotel.New(idemotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader)),
		TracerProvider: e.tracer,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.tel = tel
	cfg.Observer = tel.Observe
	if cfg.Namespace == "" {
		cfg.Namespace = "payments"
	}
	e.g = idemtest.Guard(t, idemtest.MemStore(t), cfg)
	return e
}

// sums returns the sum of each counter by its attributes, written
// "attr=value,…", the count of each histogram and the value of each gauge
// the same way.
func (e *env) sums(t *testing.T) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name][attrs(p.Attributes.ToSlice())] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name][attrs(p.Attributes.ToSlice())] += int64(p.Count)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name][attrs(p.Attributes.ToSlice())] = p.Value
				}
			}
		}
	}
	return out
}

// attrs writes kvs (sorted by key, as ToSlice returns them) as
// "key=value,…".
func attrs(kvs []attribute.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + "=" + kv.Value.Emit()
	}
	return strings.Join(parts, ",")
}

func TestMetricsAndSpansOfDo(t *testing.T) {
	e := newEnv(t, idem.Config{MaxAttempts: 2, Lease: time.Minute})
	ctx := context.Background()
	ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	fail := func(context.Context) ([]byte, error) { return nil, errors.New("downstream timeout") }
	mustDo := func(key, payload string, fn func(context.Context) ([]byte, error)) error {
		_, err := e.g.DoScoped(ctx, "tenant-a", key, []byte(payload), fn)
		return err
	}
	if err := mustDo("order-1", "p", ok); err != nil {
		t.Fatal(err)
	}
	if err := mustDo("order-1", "p", ok); err != nil { // replayed
		t.Fatal(err)
	}
	if err := mustDo("order-1", "other", ok); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatal(err)
	}
	for range 3 { // fails, retried and fails, then too many attempts
		mustDo("order-2", "p", fail)
	}
	got := e.sums(t)
	claims := got["idem.claims"]
	for outcome, want := range map[string]int64{
		idemotel.OutcomeAcquired: 2, idemotel.OutcomeReplayed: 1, idemotel.OutcomeKeyReused: 1,
		idemotel.OutcomeRetried: 1, idemotel.OutcomeTooManyAttempts: 1,
	} {
		if n := claims["idem.namespace=payments,idem.outcome="+outcome]; n != want {
			t.Errorf("idem.claims{outcome=%s} = %d, want %d (all: %v)", outcome, n, want, claims)
		}
	}
	if n := got["idem.run.duration"]["idem.namespace=payments"]; n != 1 {
		t.Errorf("successful runs recorded %d, want 1 (%v)", n, got["idem.run.duration"])
	}
	if n := got["idem.run.duration"]["error.type=*errors.errorString,idem.namespace=payments"]; n != 2 {
		t.Errorf("failed runs recorded %d, want 2 (%v)", n, got["idem.run.duration"])
	}
	for _, op := range []string{"claim", "complete", "release"} {
		if got["idem.store.duration"]["idem.namespace=payments,idem.operation="+op] == 0 {
			t.Errorf("no idem.store.duration for %s: %v", op, got["idem.store.duration"])
		}
	}
	names := map[string]int{}
	for _, s := range e.spans.Ended() {
		names[s.Name()]++
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "order-") || strings.Contains(v, "tenant-a") {
				t.Errorf("span %s has the key or scope in %s=%q", s.Name(), kv.Key, v)
			}
		}
	}
	if names["idem claim"] != 6 || names["idem run"] != 3 || names["idem complete"] != 1 || names["idem release"] != 2 {
		t.Errorf("spans %v", names)
	}
}

// The spans of a Do are children of the span in the caller's context.
func TestSpansAreChildrenOfTheCallersSpan(t *testing.T) {
	e := newEnv(t, idem.Config{})
	ctx, parent := e.tracer.Tracer("test").Start(context.Background(), "POST /orders")
	if _, err := e.g.Do(ctx, "k", nil, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	parent.End()
	n := 0
	for _, s := range e.spans.Ended() {
		if !strings.HasPrefix(s.Name(), "idem ") {
			continue
		}
		n++
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %s is not a child of the caller's span", s.Name())
		}
		if !s.StartTime().Before(s.EndTime()) && s.StartTime() != s.EndTime() {
			t.Errorf("span %s starts after it ends", s.Name())
		}
	}
	if n != 3 {
		t.Fatalf("%d idem spans, want claim, run and complete", n)
	}
}
