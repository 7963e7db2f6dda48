package idemotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgo/idem/consumer"
)

// ConsumerEvent is the event of an idem message consumer: idemkafka.Event,
// idemnats.Event, idemamqp.Event. Its Activity method says what happened
// in terms every broker shares, so that idemotel needs none of the
// consumers' modules.
type ConsumerEvent interface {
	Activity() consumer.Activity
}

// ConsumerObserver returns an observer for a consumer's WithObserver
// option, which records the consumer's events in t's consumer metrics (see
// the package documentation). group is the messaging.consumer.group.name
// of events that do not carry one: Kafka's consumer group (the kgo
// client's); "" for none. JetStream's events carry their consumer's name.
//
//	idemkafka.WithObserver(idemotel.ConsumerObserver[idemkafka.Event](tel, "orders"))
//	idemnats.WithObserver(idemotel.ConsumerObserver[idemnats.Event](tel, ""))
func ConsumerObserver[E ConsumerEvent](t *Telemetry, group string) func(context.Context, E) {
	return func(ctx context.Context, e E) {
		a := e.Activity()
		if a.Group == "" {
			a.Group = group
		}
		t.ObserveConsumer(ctx, a)
	}
}

// Values of the idem.consumer.outcome attribute of idem.consumer.messages.
const (
	ConsumerProcessed    = "processed"     // the handler ran and its outcome was stored
	ConsumerReplayed     = "replayed"      // a duplicate, answered from its stored outcome
	ConsumerDeadLettered = "dead_lettered" // poison, in the dead-letter destination
	ConsumerDiscarded    = "discarded"     // poison, dropped under WithDiscardPoison
	ConsumerGaveUp       = "gave_up"       // poison whose dead letter the broker kept refusing, settled without it
)

// ObserveConsumer records a consumer's activity in t's consumer metrics;
// [ConsumerObserver] calls it. Call it from an observer of your own that
// also logs, say:
//
//	idemnats.WithObserver(func(ctx context.Context, e idemnats.Event) {
//		tel.ObserveConsumer(ctx, e.Activity())
//		…
//	})
func (t *Telemetry) ObserveConsumer(ctx context.Context, a consumer.Activity) {
	c := &t.consumers
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String("messaging.system", a.System), attribute.String("messaging.destination.name", a.Destination))
	if a.Group != "" {
		attrs = append(attrs, attribute.String("messaging.consumer.group.name", a.Group))
	}
	if a.LagKnown {
		c.setLag(lagKey{a.System, a.Destination, a.Group, a.Partition}, max(a.Lag, 0))
	}
	count := func(outcome string, n int, more ...attribute.KeyValue) {
		if n > 0 {
			all := append(append(attrs, attribute.String("idem.consumer.outcome", outcome)), more...)
			c.messages.Add(ctx, int64(n), metric.WithAttributes(all...))
		}
	}
	reason := attribute.String("idem.consumer.reason", string(a.Reason))
	switch a.Kind {
	case consumer.ActivityProcessed:
		count(ConsumerProcessed, a.Messages-a.Replayed)
		count(ConsumerReplayed, a.Replayed)
	case consumer.ActivityDeadLettered:
		count(ConsumerDeadLettered, a.Messages, reason)
	case consumer.ActivityDiscarded:
		if a.GaveUp {
			count(ConsumerGaveUp, a.Messages, reason)
		} else {
			count(ConsumerDiscarded, a.Messages, reason)
		}
	case consumer.ActivityBusy:
		c.retries.Add(ctx, int64(a.Messages), metric.WithAttributes(append(attrs, attribute.String("idem.consumer.retry", "busy"))...))
	case consumer.ActivityRetried:
		more := []attribute.KeyValue{attribute.String("idem.consumer.retry", "error")}
		if a.Err != nil {
			more = append(more, errorType(a.Err))
		}
		c.retries.Add(ctx, int64(a.Messages), metric.WithAttributes(append(attrs, more...)...))
	case consumer.ActivityDeadLetterFailed:
		retry := "dead_letter_unreached"
		if a.Refused {
			retry = "dead_letter_refused"
		}
		more := []attribute.KeyValue{attribute.String("idem.consumer.retry", retry), reason}
		if a.Err != nil {
			more = append(more, errorType(a.Err))
		}
		c.retries.Add(ctx, 1, metric.WithAttributes(append(attrs, more...)...))
	case consumer.ActivityReleased:
		c.dropLag(lagKey{a.System, a.Destination, a.Group, a.Partition})
	}
}

// consumerMetrics are the instruments of the consumers' activity.
type consumerMetrics struct {
	messages metric.Int64Counter
	retries  metric.Int64Counter

	mu  sync.Mutex
	lag map[lagKey]int64 // the last lag seen of each partition or JetStream consumer
}

// lagKey names what a lag is of: a Kafka partition, a JetStream consumer.
type lagKey struct{ system, destination, group, partition string }

func (c *consumerMetrics) init(m metric.Meter, counter func(name, unit, desc string) metric.Int64Counter) error {
	c.lag = map[lagKey]int64{}
	c.messages = counter("idem.consumer.messages", "{message}", "Messages a consumer finished, by outcome.")
	c.retries = counter("idem.consumer.retries", "{message}", "Messages a consumer will try again, busy or after an error.")
	_, err := m.Int64ObservableGauge("idem.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages waiting to be consumed, as the broker last told: by Kafka partition, by JetStream consumer."),
		metric.WithInt64Callback(c.observeLag))
	return err
}

func (c *consumerMetrics) setLag(k lagKey, n int64) {
	c.mu.Lock()
	c.lag[k] = n
	c.mu.Unlock()
}

func (c *consumerMetrics) dropLag(k lagKey) {
	c.mu.Lock()
	delete(c.lag, k)
	c.mu.Unlock()
}

func (c *consumerMetrics) observeLag(_ context.Context, o metric.Int64Observer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.lag {
		attrs := make([]attribute.KeyValue, 0, 4)
		attrs = append(attrs, attribute.String("messaging.system", k.system), attribute.String("messaging.destination.name", k.destination))
		if k.group != "" {
			attrs = append(attrs, attribute.String("messaging.consumer.group.name", k.group))
		}
		if k.partition != "" {
			attrs = append(attrs, attribute.String("messaging.destination.partition.id", k.partition))
		}
		o.Observe(n, metric.WithAttributes(attrs...))
	}
	return nil
}
