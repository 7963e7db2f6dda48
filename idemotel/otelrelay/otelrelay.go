package otelrelay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/outbox"
)

// ScopeName is the instrumentation scope of the package's meter.
const ScopeName = "github.com/idemgo/idem/idemotel/otelrelay"

// Values of the idem.outbox.outcome attribute of idem.outbox.messages.
const (
	OutcomePublished   = "published"
	OutcomeRefused     = "refused"
	OutcomeUnavailable = "unavailable"
	OutcomeDead        = "dead"
)

// Metrics turns a relay's events into metrics; see the package
// documentation. It is safe for concurrent use, and one Metrics serves any
// number of relays and tables.
type Metrics struct {
	messages metric.Int64Counter
	publish  metric.Float64Histogram

	mu   sync.Mutex
	lags map[string]outbox.Lag // the last backlog sampled of each table
}

// New returns a Metrics whose instruments are made by cfg's meter provider
// (cfg.TracerProvider is not used: a relay makes no spans).
func New(cfg idemotel.Config) (*Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{lags: map[string]outbox.Lag{}}
	var errs [6]error
	m.messages, errs[0] = meter.Int64Counter("idem.outbox.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages an outbox relay finished with, by outcome."))
	m.publish, errs[1] = meter.Float64Histogram("idem.outbox.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an outbox relay's Publish calls."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	var pending, dead metric.Int64ObservableGauge
	var lag metric.Float64ObservableGauge
	pending, errs[2] = meter.Int64ObservableGauge("idem.outbox.pending", metric.WithUnit("{message}"),
		metric.WithDescription("Outbox messages waiting to be published, as last sampled."))
	lag, errs[3] = meter.Float64ObservableGauge("idem.outbox.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest outbox message waiting to be published, as last sampled."))
	dead, errs[4] = meter.Int64ObservableGauge("idem.outbox.dead", metric.WithUnit("{message}"),
		metric.WithDescription("Dead outbox rows, waiting for an operator, as last sampled."))
	if errs[2] == nil && errs[3] == nil && errs[4] == nil {
		_, errs[5] = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for table, l := range m.lags {
				attrs := metric.WithAttributes(attribute.String("idem.outbox.table", table))
				o.ObserveInt64(pending, l.Pending, attrs)
				o.ObserveFloat64(lag, l.OldestPending.Seconds(), attrs)
				o.ObserveInt64(dead, l.Dead, attrs)
			}
			return nil
		}, pending, lag, dead)
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelrelay: New: %w", err)
	}
	return m, nil
}

// Observe is an [outbox.Observer]: pass it as RelayConfig.Observer (or call
// it from one of your own).
func (m *Metrics) Observe(ctx context.Context, e outbox.Event) {
	table := attribute.String("idem.outbox.table", e.Table)
	count := func(outcome string, n int) {
		if n > 0 {
			m.messages.Add(ctx, int64(n), metric.WithAttributes(table, attribute.String("idem.outbox.outcome", outcome)))
		}
	}
	switch e.Op {
	case outbox.OpPublish:
		count(OutcomePublished, e.Sent)
		count(OutcomeRefused, e.Failed-e.Unavailable)
		count(OutcomeUnavailable, e.Unavailable)
		m.publish.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(table))
	case outbox.OpDead:
		count(OutcomeDead, e.Dead)
	case outbox.OpLag:
		m.mu.Lock()
		m.lags[e.Table] = outbox.Lag{Pending: e.Pending, OldestPending: e.OldestPending, Dead: int64(e.Dead)}
		m.mu.Unlock()
	}
}
